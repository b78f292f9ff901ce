"""Dropping the second copy of an object that a looped topology of servers brings, sans-I/O.

The router remembers the (origin, id) key of every object received over a server link, with
the link it came over (:class:`SeenObjects`, a window of the newest keys). The same key over
another link is a copy to drop; over the same link it is a new object whose sender reused an
id. An object that reached us over a link without an id (a foreign server's) gets one derived
from its content (:func:`content_id`), the same on every server, so its copies are dropped too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable
from typing import Final

import orjson

from bus.message.ids import new_id
from bus.objects.codec import BusinessObject

__all__ = ["DEFAULT_DEDUPE_WINDOW", "SeenObjects", "content_id"]

DEFAULT_DEDUPE_WINDOW: Final = 4096
_LOCAL: Final = "<this server>"  # the "link" of an object this server originated


class SeenObjects:
    """The (origin, id) keys of objects seen over server links, each with its link.

    Args:
        window: how many keys are remembered, oldest dropped first (at least 1).
    """

    def __init__(self, window: int = DEFAULT_DEDUPE_WINDOW) -> None:
        self._window = max(1, window)
        self._seen: dict[tuple[str, str], Hashable] = {}  # (origin, id) -> link, oldest first

    def is_duplicate(self, origin: str, object_id: str, link: Hashable) -> bool:
        """A copy of an object that already came over another link (a loop in the topology),
        or one this server originated coming back.

        Each server forwards an object at most once per link, so the same key over the same
        link is a new object whose sender reused an id: it is routed, and remembered again.
        """
        key = (origin, object_id)
        first_link = self._seen.pop(key, None)
        if first_link is not None and first_link != link:
            self._seen[key] = first_link
            return True
        self._remember(key, link)
        return False

    def remember_own(self, origin: str, object_id: str) -> None:
        """An object this server originates: any copy of it that comes back is a duplicate."""
        self._remember((origin, object_id), _LOCAL)

    def _remember(self, key: tuple[str, str], link: Hashable) -> None:
        self._seen[key] = link
        if len(self._seen) > self._window:
            del self._seen[next(iter(self._seen))]


def content_id(obj: BusinessObject) -> str:
    """An id for an object that reached us over a link without one (a foreign server's).

    Derived from its content (route left out), so every copy that a looped topology brings gets
    the same id on every server and is dropped as a duplicate.
    """
    metadata = {k: v for k, v in obj.metadata.items() if k != "route"}
    try:
        text = orjson.dumps(metadata, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # not from the wire: nothing to compare it with
        return new_id()
    digest = hashlib.blake2b(text, digest_size=16)
    digest.update(obj.payload)
    return digest.hexdigest()
