"""tests/slowest_first.py: make test's workers get the longest files first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import slowest_first
from tests.slowest_first import PER_TEST, SECONDS, UNLISTED_SLOW, order_files


def test_listed_files_go_by_their_seconds_then_slow_ones_then_by_number_of_tests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slowest_first, "SECONDS", {"a.py": 5.0, "b.py": 200.0})
    files = [
        ("many.py", 400, False),  # 400 quick tests: 40 s
        ("a.py", 3, True),  # listed: its own figure, slow or not
        ("slow.py", 2, True),  # unlisted, slow: UNLISTED_SLOW
        ("few.py", 3, False),
        ("b.py", 1, False),
        ("few2.py", 3, False),  # a tie keeps the collection's order
    ]
    assert PER_TEST * 400 > UNLISTED_SLOW > 5.0 > PER_TEST * 3
    assert order_files(files) == ["b.py", "many.py", "slow.py", "a.py", "few.py", "few2.py"]


def test_this_runs_files_are_in_that_order_each_whole(request: pytest.FixtureRequest) -> None:
    """The hook ran on this very session: its files come longest first, none split."""
    items = request.session.items
    files = list(dict.fromkeys(item.nodeid.split("::", 1)[0] for item in items))
    firsts = [item.nodeid.split("::", 1)[0] for item in items]
    runs = [path for index, path in enumerate(firsts) if index == 0 or firsts[index - 1] != path]
    assert runs == files  # each file's tests together
    counted = {path: firsts.count(path) for path in files}
    slow = {item.nodeid.split("::", 1)[0] for item in items if item.get_closest_marker("slow")}
    assert order_files((path, counted[path], path in slow) for path in files) == files
    listed = [path for path in files if path in SECONDS]
    assert listed == sorted(listed, key=lambda path: -SECONDS[path])


def test_every_file_in_the_table_exists() -> None:
    root = Path(__file__).resolve().parent.parent
    assert [path for path in SECONDS if not (root / path).is_file()] == []
