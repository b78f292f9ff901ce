"""Binary encoding of data frames, byte for byte as the original Java DataFrame (PROTOCOL.md 1).

A frame is its fields concatenated, with no header and no count::

    field   = namelen:u8  name:namelen bytes (UTF-8)  type:u8  value
    value   = fixed-size big-endian bytes             (numbers, BOOLEAN, DATE; UDEF: none)
            | length:u32  length bytes                (FRAME, BYTEARRAY, STRING, URI, ARRAY)
    element = type:u8  [length:u16 for variable types]  value       (inside an ARRAY)

:func:`encode` and :func:`decode` are pure functions (sans-I/O). :func:`decode` reads the whole
input as one frame; every failure is a :class:`~bus.errors.DecodeError` with the byte offset and
the reason, and :class:`Limits` bounds what a peer can make us allocate.

This module chooses between the C accelerator and the pure-Python reference, which lives in
:mod:`bus.frame.frame_encoder` and :mod:`bus.frame.frame_decoder` (with :class:`Limits`).
"""

from __future__ import annotations

from typing import Any, Protocol

from bus.accelerators import accelerator
from bus.frame import frame as frame_module
from bus.frame.frame import DataFrame, Field
from bus.frame.frame_decoder import DEFAULT_LIMITS as DEFAULT_LIMITS
from bus.frame.frame_decoder import FIELD_TYPES, Limits
from bus.frame.frame_decoder import MAX_DEPTH as MAX_DEPTH
from bus.frame.frame_decoder import reference_decode as _reference_decode
from bus.frame.frame_encoder import encode_field
from bus.frame.frame_encoder import reference_encode as _reference_encode
from bus.frame.scalars import date_from_millis, millis_from_date

__all__ = [
    "Limits",
    "accelerated",
    "accelerator_available",
    "decode",
    "encode",
    "encode_field",
    "use_accelerator",
]


# bus/native/_speedups.c is built by `pip install -e .` when a C compiler is present (an optional
# extension: without a compiler the install succeeds and this pure-Python code runs; so does
# BUSGATE_PURE_PYTHON=1). Its encode and decode give the same bytes and values; when their fast
# path meets anything unusual (bad input, nesting deeper than 48 levels) they run the reference
# functions (_reference_encode, _reference_decode), which raise the documented errors with
# offsets and reasons.


class _Encode(Protocol):
    def __call__(self, frame: DataFrame, /) -> bytes: ...


class _Decode(Protocol):
    def __call__(self, data: bytes | bytearray | memoryview, limits: Limits = ...) -> DataFrame: ...


def _load_accelerator() -> Any:
    _speedups = accelerator("bus.native._speedups")
    if _speedups is None:
        return None
    try:
        _speedups.configure(
            Field,
            FIELD_TYPES,
            DataFrame,
            date_from_millis,
            millis_from_date,
            _reference_encode,
            _reference_decode,
            DEFAULT_LIMITS,
        )
    # another bus.frame.frame, or a Python it was not validated on
    except ValueError:  # pragma: no cover
        return None
    _speedups.set_make_field(frame_module._make_field_reference)
    frame_module._fast_make_field = _speedups.make_field
    return _speedups


_fast: Any = _load_accelerator()

#: Encode a frame to its binary form; the contract:
#: :func:`bus.frame.frame_encoder.reference_encode`.
encode: _Encode = _fast.encode if _fast is not None else _reference_encode
#: Decode a whole input as one frame; the contract:
#: :func:`bus.frame.frame_decoder.reference_decode`.
decode: _Decode = _fast.decode if _fast is not None else _reference_decode
_enabled = _fast is not None


def accelerator_available() -> bool:
    """True when the C accelerator ``bus.native._speedups`` was built at install time."""
    return _fast is not None


def accelerated() -> bool:
    """True when :func:`encode` and :func:`decode` take the C accelerator's fast path."""
    return _enabled


def use_accelerator(enabled: bool = True) -> bool:
    """Turn the C accelerator's fast path on or off (the tests run both).

    Args:
        enabled: take the fast path when the accelerator was built.

    Returns:
        Whether the fast path is now in use.
    """
    global _enabled
    _enabled = bool(enabled) and _fast is not None
    if _fast is not None:
        _fast.set_enabled(_enabled)
    return _enabled
