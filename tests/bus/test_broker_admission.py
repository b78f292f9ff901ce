"""Failed logins counted per address (bus/broker/admission.py): time is an argument."""

from __future__ import annotations

from bus.broker.admission import AUTH_FAILURE_WINDOW_S, LoginThrottle


def test_an_address_is_refused_at_the_limit_until_its_oldest_failure_is_a_minute_old() -> None:
    throttle = LoginThrottle(3)
    for t in (0.0, 1.0, 2.0):
        assert not throttle.refused("10.0.0.1", t)
        throttle.failed("10.0.0.1", t)
    assert throttle.refused("10.0.0.1", 2.5)
    assert not throttle.refused("10.0.0.2", 2.5)  # another address is not touched
    assert throttle.refused("10.0.0.1", AUTH_FAILURE_WINDOW_S - 0.1)
    assert not throttle.refused("10.0.0.1", AUTH_FAILURE_WINDOW_S + 0.1)


def test_zero_turns_throttling_off() -> None:
    throttle = LoginThrottle(0)
    for t in range(100):
        throttle.failed("10.0.0.1", float(t))
    assert not throttle.refused("10.0.0.1", 100.0) and len(throttle) == 0


def test_the_addresses_remembered_are_bounded() -> None:
    throttle = LoginThrottle(2, addresses=100)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}", 0.0)
    assert len(throttle) == 100
    throttle.failed("10.0.3.231", 0.0)  # the most recent addresses are the ones kept
    assert throttle.refused("10.0.3.231", 1.0)
    assert not throttle.refused("10.0.0.0", 1.0)


def test_forgotten_failures_free_their_address() -> None:
    throttle = LoginThrottle(2)
    throttle.failed("a", 0.0)
    assert not throttle.refused("a", AUTH_FAILURE_WINDOW_S + 1)
    assert len(throttle) == 0
