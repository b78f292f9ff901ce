"""The confirm lane in C: a run of confirmed publishes journaled and answered by
``bus.native._hotpath.confirm_run`` (PROTOCOL.md 5.12; the records of 8; 10.1's durability).

:meth:`bus.broker.confirming.ConfirmedPublishing._confirm_run` is the reference: its Python
loop takes a body whenever this lane leaves one (a retry, a JSON body, a record that needs the
journal's own path: a new segment, index block or reservation) and hands the rest back here.
What the C code did to the journal, the de-duplication window and the held ACKs is accounted
for here, also when it stopped on an exception (raised after). The ACKs stay held exactly as
the Python loop holds them: released after the batch's write (or fsync).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from bus.accelerators import accelerator
from bus.broker.management import CENTRAL
from bus.broker.protocol import State
from bus.broker.replay import with_seq
from bus.broker.routing import MAX_NAME
from bus.message.ids import id_block

__all__ = ["NATIVE", "native_confirms"]

_hotpath = accelerator("bus.native._hotpath")
_RUN: Final[Callable[..., tuple[Any, ...]] | None] = getattr(_hotpath, "confirm_run", None)
#: Whether the C lane is there (not under BUSGATE_PURE_PYTHON=1, nor without the accelerator).
NATIVE: Final = _RUN is not None
_READY: Final = State.READY


def native_confirms(
    broker: Any,
    conn: Any,
    bodies: list[bytes],
    start: int,
    end: int,
    now: float,
    wall: float,
    held: list[tuple[int, str, bytes, bytes]],
) -> tuple[int, int, BaseException | None]:
    """Route ``bodies[start:end]`` in C while each is a confirmed publish the lane takes
    (``conn``: the sender's :class:`bus.broker.protocol.BrokerConnection`, its post office
    named in Latin-1; ``now``/``wall``: the run's monotonic and wall clocks). Returns the
    index of the first body left, how many of those taken nobody subscribed to, and the
    exception that stopped the run midway (the caller accounts for what was taken, then
    raises it)."""
    journal, run = broker.journal, _RUN
    window = getattr(journal, "append_window", None)
    opened = None if window is None or run is None else window(wall)
    stamper = conn.stamper
    if run is None or opened is None or stamper.latin1 is None:
        return start, 0, None
    limits, confirms = conn.limits, broker.confirms
    seen = confirms.known(now)
    was_empty = not seen
    ids, ids_at = id_block(end - start)
    at, seq, size, _, dropped, evicted, error = run(
        bodies, start, end - start, stamper.latin1, stamper.trusted, limits.max_size,
        limits.max_depth, limits.max_fields, MAX_NAME, stamper.office, seen, confirms.entries,
        now, opened.limits, opened.record, opened.ts_us, opened.pending,
        broker.router.subscribers, broker._deliver, with_seq, ids, ids_at, held, conn, _READY,
        CENTRAL,
    )  # fmt: skip
    journal.appended_run(seq, size, opened.ts_us)
    confirms.remembered_run(now, was_empty, evicted)
    return int(at), int(dropped), error
