"""What Objectoplex's own client library (Biomine3000/Objectoplex, ``objectoplex/system.py``) does
to an object's metadata, written from its behaviour for the tests (issue 32 item 2).

Its ``BusinessObject`` parses the content type with one regular expression and writes back only
what it matched: ``type/subtype`` (a subtype of word characters and ``-``) and a ``charset``
parameter. So ``bus/alarm.oplex`` leaves the library as ``bus/alarm``, on every object it sends
or passes on. ``serialize`` also writes ``id`` (a new message id when the object had none) and
``size``; every other attribute travels untouched.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

__all__ = ["library_type", "sent_by_library"]

_CONTENT_TYPE = re.compile(
    r"(?P<type>\w+)/(?P<subtype>[\w-]+)(;\s+charset=)?(?P<charset>[-\w\d]+)?"
)


def library_type(content_type: str) -> str:
    """The content type as the library writes it back (``ObjectType.from_string``, then str)."""
    found = _CONTENT_TYPE.match(content_type)
    if found is None:  # the library raises here (AttributeError on None): no such object is sent
        raise ValueError(f"the library cannot parse the content type {content_type!r}")
    text = f"{found['type']}/{found['subtype']}"
    if found["charset"] is not None:
        text += f"; charset={found['charset']}"
    return text


def sent_by_library(metadata: dict[str, Any], payload: bytes = b"") -> dict[str, Any]:
    """The metadata of ``BusinessObject(metadata, payload).serialize()``."""
    sent = dict(metadata)
    sent.setdefault("id", f"<{uuid.uuid4().hex}@library>")
    sent["size"] = len(payload)
    if "type" in sent:
        sent["type"] = library_type(str(sent["type"]))
    return sent
