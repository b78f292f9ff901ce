"""What the SSE hub feeds (gateway/events/listeners.py): the events a resuming stream has given."""

from __future__ import annotations

from gateway.events.listeners import HubEvent, JournalSeen


def _event(journal: int | None, mid: str | None) -> HubEvent:
    return HubEvent(0, "a.b", "{}", mid, journal)


def test_an_event_is_given_once_by_its_journal_number_or_else_its_message_id() -> None:
    # A resumed stream that moves to the shared subscription gets again from it what its own
    # brought just before; events the broker does not journal have no number, only their MID.
    seen = JournalSeen(size=3)
    assert seen.first(_event(7, "m7")) and not seen.first(_event(7, "other"))
    assert seen.first(_event(None, "m1")) and not seen.first(_event(None, "m1"))
    assert seen.first(_event(None, None)) and seen.first(_event(None, None))  # nothing to know
    assert seen.first(_event(8, "m8")) and seen.first(_event(9, "m9"))  # 7 is the oldest of 4
    assert seen.first(_event(7, "m7"))  # forgotten: only the newest `size` are kept
