"""Where a journal read starts (bus/journal/times.py): the CLI's --since, the gateway's ?since=."""

from __future__ import annotations

import pytest

from bus.journal.times import parse_since, parse_time

NOW = 1_764_000_000.0


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("42", (42, None)),
        (" 7 ", (7, None)),
        ("15m", (None, NOW - 900)),
        ("2026-11-26T10:00:00Z", (None, 1_795_687_200.0)),
        ("1764000000.5", (None, 1_764_000_000.5)),  # epoch seconds need a fraction here
    ],
)
def test_a_start_is_a_sequence_number_or_a_time(
    text: str, wanted: tuple[int | None, float | None]
) -> None:
    assert parse_since(text, NOW) == wanted


@pytest.mark.parametrize("text", ["soon", "-3", "nan", "15x", ""])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_since(text, NOW)


def test_a_duration_counts_back_from_now() -> None:
    assert parse_time("1d", NOW) == NOW - 86_400
