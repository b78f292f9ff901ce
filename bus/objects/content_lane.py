"""The content lane: a client's stream of content objects routed a run at a time in C.

Most of what an Object System server routes is a subscribed client's content objects (docs/
PROTOCOL.md 6.2: no ``event``, no ``route``): each is read, given its ``route`` and ``id`` (6.4)
and written to the same recipients as the one before. The C accelerator
(``bus.native._hotpath.content_run``, in ``bus/native/_hotpath_objects.c``) reads a run of them
straight from
the decoder's buffer and writes each one's new bytes, instead of a JSON reading, a dict copy and
a JSON writing in Python per object; what it cannot vouch for (any other object, JSON it does
not read, an incomplete object) it leaves where it is, and the general path
(:meth:`ObjectDecoder.next_event <bus.objects.codec.ObjectDecoder.next_event>`,
:meth:`Router.receive_batch <bus.objects.router.Router.receive_batch>`) takes it. Both paths give
the same outputs for the same bytes; without the accelerator (or with ``BUSGATE_PURE_PYTHON``)
there is no lane and every object takes the general path.

Sans-I/O: the lane reads a decoder's buffer and returns the router's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Final

from bus.accelerators import accelerator
from bus.objects.codec import ObjectDecoder, new_object
from bus.objects.outputs import Output, new_deliver
from bus.objects.peers import PeerState
from bus.objects.router import Router

__all__ = ["LANE_RUN", "ContentLane", "lane_for"]

_hotpath = accelerator("bus.native._hotpath")
_CONTENT_RUN: Final[Callable[..., tuple[list[Any], int]] | None] = getattr(
    _hotpath, "content_run", None
)
#: Objects the lane takes in one call (the driver checks its write clock between calls).
LANE_RUN: Final = 64


class ContentLane:
    """Takes runs of content objects for one :class:`~bus.objects.router.Router`.

    Call it with a connection and its decoder: it returns the outputs of the run it took from
    the front of the decoder's buffer (``[]``: it took nothing, the next object is for the
    general path), or None when the connection is not a subscribed client (its objects all
    take the general path).
    """

    def __init__(self, router: Router, run: Callable[..., tuple[list[Any], int]]) -> None:
        self._router = router
        self._run = run

    def __call__(self, conn: Hashable, decoder: ObjectDecoder) -> list[Output] | None:
        sender = self._router.content_sender(conn)
        if sender is None:
            return None
        peer = sender.peer
        buffer, offset = decoder.unread()
        items, end = self._run(
            buffer, offset, LANE_RUN, decoder.max_metadata, decoder.max_payload,
            peer.routing_id, sender.own_id, sender.id_prefix, sender.next_id,
        )  # fmt: skip
        if not items:
            return []
        decoder.consume(end)
        outputs: list[Output] = []
        of_content = sender.of_content
        # The recipients depend on the content type and "to" alone while no connection
        # changes, and none changes during a run: asked once per (type, to).
        known: dict[tuple[str | None, str | None], list[PeerState]] = {}
        for metadata, payload, data, content_type, to in items:
            key = (content_type, to)
            targets = known.get(key)
            if targets is None:
                targets = known[key] = of_content(peer, metadata)
            if targets:
                obj = new_object((metadata, payload))
                for target in targets:
                    outputs.append(new_deliver((target.conn, obj, data)))
        return outputs


def lane_for(router: Router) -> ContentLane | None:
    """The content lane of ``router``, or None when the C accelerator is not in use."""
    return None if _CONTENT_RUN is None else ContentLane(router, _CONTENT_RUN)
