"""Message ids: random version-4 UUIDs in their 36-character text form, as Kestrel's.

Every request, response and event gets one (``docs/PROTOCOL.md`` 2.1), so making one must cost
little: :func:`new_id` formats 16 bytes taken from a block of ``os.urandom`` output read 4 KiB at a
time, instead of ``uuid.uuid4()``'s system call and object per id, and the C accelerator
``bus.native._hotpath`` writes their text when it was built. The ids stay unpredictable
(a reply can only be forged by someone who saw the request), and a forked child starts a block
of its own so parent and child never share ids.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from bus.accelerators import accelerator

__all__ = ["format_id", "id_block", "new_id", "random_hex"]

_BLOCK: Final = 4096
_HEX: Final = "0123456789abcdef"
# The version nibble (4) and the variant bits (10xx) of RFC 9562, as uuid4() sets them.
_VARIANT: Final = "89ab"


class _Pool:
    __slots__ = ("data", "pos")

    def __init__(self) -> None:
        self.data = b""
        self.pos = _BLOCK

    def reset(self) -> None:
        self.data = b""
        self.pos = _BLOCK


_pool = _Pool()
os.register_at_fork(after_in_child=_pool.reset)


def new_id() -> str:
    """A new message id: a random UUID (version 4) as text, e.g. ``"3f2b...-4...-a...-..."``."""
    pool = _pool
    pos = pool.pos
    if pos + 16 > len(pool.data):
        pool.data = os.urandom(_BLOCK)
        pos = 0
    pool.pos = pos + 16
    return _format(pool.data, pos)


def random_hex(size: int) -> str:
    """``size`` random bytes from the same pool as hex text, never all zeros (the W3C trace
    context's ids, :mod:`bus.message.trace`: formatting ``getrandbits`` cost more than a whole
    message id)."""
    pool = _pool
    pos = pool.pos
    if pos + size > len(pool.data):
        pool.data = os.urandom(max(_BLOCK, size))
        pos = 0
    pool.pos = pos + size
    text = pool.data[pos : pos + size].hex()
    return text if text.strip("0") else text[:-1] + "1"


def id_block(count: int) -> tuple[bytes, int]:
    """Random bytes for ``count`` ids at once: a block and where they start in it, taken from
    the pool as :func:`new_id` takes them (for a C caller that formats them itself, as
    :func:`format_id` does)."""
    pool = _pool
    pos, size = pool.pos, 16 * count
    if pos + size > len(pool.data):
        pool.data = os.urandom(max(_BLOCK, size))
        pos = 0
    pool.pos = pos + size
    return pool.data, pos


def format_id(block: bytes, pos: int) -> str:
    """The 16 bytes of ``block`` at ``pos`` as a version-4 UUID's text (the reference of the
    C accelerator's ``format_id``)."""
    text = block[pos : pos + 16].hex()
    # 8-4-4-4-12, version 4, variant 10xx (the random nibble's two low bits are kept).
    return (
        f"{text[:8]}-{text[8:12]}-4{text[13:16]}-"
        f"{_VARIANT[int(text[16], 16) & 3]}{text[17:20]}-{text[20:32]}"
    )


_hotpath = accelerator("bus.native._hotpath")
_format: Callable[[bytes, int], str] = format_id if _hotpath is None else _hotpath.format_id
