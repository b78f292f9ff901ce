"""Old deep import paths (``bus/moved.py``): code written before the layer packages keeps working.

Every module that moved imports by its old dotted name as the very module at its new path, with
a DeprecationWarning that names the new path and points at the user's line; ``bus.frame`` and
``bus.message``, modules that became packages, still give their old names. Nothing is put back at
the old place, and a name that never existed still fails as before.
"""

from __future__ import annotations

import importlib
import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import bus
from bus.moved import BUS_MOVED, BUS_MOVED_INTO_PACKAGE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh() -> Iterator[None]:
    """Each test imports the old names afresh: the aliases it made (and the package attributes
    they set) are taken away again afterwards, so that no other test sees them."""
    yield
    forget(BUS_MOVED)


def forget(moved: dict[str, str]) -> None:
    """Drop the old names from ``sys.modules`` and their packages (the moved modules stay)."""
    for old, new in moved.items():
        module = sys.modules.get(new)
        if module is not None and sys.modules.get(old) is module:
            del sys.modules[old]
        package, _, name = old.rpartition(".")
        parent = sys.modules.get(package)
        if module is not None and parent is not None and vars(parent).get(name) is module:
            delattr(parent, name)


def import_old(old: str, new: str) -> object:
    """``importlib.import_module(old)``, checked: the module at ``new``, one warning naming it,
    blamed on the caller's file, and the module's own name and spec left as they were."""
    forget({old: new})
    with pytest.warns(DeprecationWarning) as caught:
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    texts = [str(w.message) for w in caught]
    assert texts == [f"{old} moved to {new}: import it from there (the old path will be removed)"]
    assert caught[0].filename == __file__  # the line above, not the import system's
    assert module.__name__ == new
    assert module.__spec__ is not None and module.__spec__.name == new
    assert module.__file__ is not None
    assert Path(module.__file__) == ROOT / (new.replace(".", "/") + ".py")
    assert not (ROOT / (old.replace(".", "/") + ".py")).exists()
    return module


@pytest.mark.parametrize(("old", "new"), sorted(BUS_MOVED.items()))
def test_every_old_module_path_is_the_moved_module(fresh: None, old: str, new: str) -> None:
    import_old(old, new)


def test_the_table_names_every_module_of_the_layer_packages() -> None:
    """What moved is what the four layer packages hold (their modules all came from bus/)."""
    layers = ("frame", "message", "link", "discovery")
    held = {
        f"bus.{layer}.{path.stem}"
        for layer in layers
        for path in (ROOT / "bus" / layer).glob("*.py")
        if path.stem != "__init__"
    }
    assert set(BUS_MOVED.values()) | set(BUS_MOVED_INTO_PACKAGE.values()) == held


def test_import_statements_of_old_code(fresh: None) -> None:
    """The forms old code uses: ``import a.b``, ``from a.b import x``, ``from a import b``."""
    old_code = (
        "import bus.codec\n"
        "from bus.link.wire import NeedData as new_need_data\n"
        "from bus.wire import NeedData\n"
        "from bus import topics\n"
        "encoded = bus.codec.encode(bus.DataFrame())\n"
    )
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning) as caught:
        exec(compile(old_code, "old_program.py", "exec"), namespace)
    assert namespace["NeedData"] is namespace["new_need_data"]
    assert namespace["topics"] is sys.modules["bus.discovery.topics"]
    assert namespace["encoded"] == bus.encode(bus.DataFrame())
    where = {(str(w.message).partition(" ")[0], w.filename, w.lineno) for w in caught}
    assert where == {
        ("bus.codec", "old_program.py", 1),
        ("bus.wire", "old_program.py", 3),
        ("bus.topics", "old_program.py", 4),
    }


def test_an_old_module_as_an_attribute_of_bus(fresh: None) -> None:
    forget({"bus.names": "bus.discovery.names"})
    with pytest.warns(DeprecationWarning, match=r"^bus\.names moved to bus\.discovery\.names"):
        names = bus.names  # type: ignore[attr-defined]
    assert names is sys.modules["bus.discovery.names"]


@pytest.mark.parametrize(
    ("package", "name"), [("bus.message", "Message"), ("bus.frame", "DataFrame")]
)
def test_the_names_of_a_module_that_became_a_package(package: str, name: str) -> None:
    """``from bus.message import Message`` (bus/message.py before the move)."""
    module = BUS_MOVED_INTO_PACKAGE[package]
    expected = f"{package}.{name} moved to {module}.{name}: import it from {module}"
    with pytest.warns(DeprecationWarning, match=f"^{re.escape(expected)}") as caught:
        namespace: dict[str, object] = {}
        exec(compile(f"from {package} import {name}\n", "old_program.py", "exec"), namespace)
    assert namespace[name] is getattr(importlib.import_module(module), name)
    assert {w.filename for w in caught} == {"old_program.py"}


def test_the_new_paths_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec("from bus.message import header, message\nfrom bus.frame.codec import encode\n", {})
        exec("from bus.discovery.topics import *\nimport bus.link.wire\n", {})


def test_names_that_never_existed_still_fail() -> None:
    with pytest.raises(ModuleNotFoundError, match="No module named 'bus.nothing_here'"):
        importlib.import_module("bus.nothing_here")
    with pytest.raises(ImportError, match="cannot import name 'Nothing' from 'bus.message'"):
        exec("from bus.message import Nothing\n", {})
    with pytest.raises(AttributeError, match="module 'bus' has no attribute 'nothing'"):
        _ = bus.nothing  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="module 'bus.frame' has no attribute '__wrapped__'"):
        _ = bus.frame.__wrapped__  # type: ignore[attr-defined]
