"""docs/ARCHITECTURE.md stays true: every path it names exists; it places every package."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
_PATH = re.compile(r"`((?:bus|gateway|pipeline|clients|docs|tests)/[A-Za-z0-9_./-]*)`")


def named_paths(text: str) -> list[str]:
    """The repository paths a text names in backquotes."""
    return _PATH.findall(text)


def test_the_pattern_finds_files_and_folders() -> None:
    assert named_paths("see `bus/link/wire.py` and `bus/objects/`, not `busgate run`") == [
        "bus/link/wire.py",
        "bus/objects/",
    ]


def test_every_path_the_architecture_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    named = named_paths(text)
    assert len(named) > 40
    missing = [path for path in named if not (ROOT / path).exists()]
    assert not missing, f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_package_of_the_tree_is_on_the_page() -> None:
    text = DOC.read_text(encoding="utf-8")
    packages = sorted(
        f"{top}/{path.parent.name}/"
        for top in ("bus", "gateway", "pipeline")
        for path in (ROOT / top).glob("*/__init__.py")
    )
    named = named_paths(text)
    absent = [package for package in packages if not any(p.startswith(package) for p in named)]
    assert not absent, f"docs/ARCHITECTURE.md does not place these packages: {absent}"
