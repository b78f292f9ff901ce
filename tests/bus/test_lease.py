"""A lease as its holder sees it (``bus/lease.py``, PROTOCOL.md 10.2): time is an argument."""

from __future__ import annotations

import math

import pytest

from bus.errors import ConfigError
from bus.lease import DEFAULT_LEASE_TTL, LeaseTerm


def test_a_holder_stops_trusting_its_lease_before_the_store_forgets_it() -> None:
    term = LeaseTerm(5.0)
    assert not term.valid(0.0)  # nothing granted yet
    term.granted(100.0)  # the write was sent at 100 s and confirmed
    assert term.valid(104.0)
    assert not term.valid(104.5)  # 5 s - 10 %: the store forgets it at 105 s at the earliest
    assert term.remaining(103.0) == pytest.approx(1.5)
    assert term.remaining(200.0) == 0.0


def test_renewals_come_every_fifth_of_the_time_to_live() -> None:
    term = LeaseTerm(DEFAULT_LEASE_TTL)
    term.granted(10.0)
    assert term.every == 1.0
    assert not term.due(10.9)
    assert term.due(11.0)
    term.granted(11.0)
    assert term.valid(15.0)


def test_a_late_confirmation_never_shortens_the_lease() -> None:
    term = LeaseTerm(5.0)
    term.granted(20.0)
    term.granted(18.0)  # an older write confirmed after a newer one
    assert term.valid(24.0)


def test_a_lost_lease_is_invalid_at_once() -> None:
    term = LeaseTerm(5.0)
    term.granted(0.0)
    term.lost()
    assert not term.valid(0.1)
    assert term.due(0.1)


@pytest.mark.parametrize("ttl", [0.0, 0.5, -1.0, math.nan, math.inf])
def test_a_time_to_live_nats_cannot_keep_is_refused(ttl: float) -> None:
    with pytest.raises(ConfigError):
        LeaseTerm(ttl)


def test_the_margin_is_at_least_a_fifth_of_a_second() -> None:
    assert LeaseTerm(1.0).margin == 0.2
    assert LeaseTerm(30.0).margin == 3.0
    assert LeaseTerm(2.0, margin=0.5).margin == 0.5
