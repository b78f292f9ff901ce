"""Type stub of the optional C accelerator (bus/_speedups.c); bus.codec is the interface."""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bus.codec import Limits
from bus.frame import DataFrame, Field

def encode(frame: DataFrame, /) -> bytes: ...
def decode(data: bytes | bytearray | memoryview, limits: Limits = ...) -> DataFrame: ...
def fast_encode(frame: DataFrame, /) -> bytes: ...
def fast_decode(data: bytes | bytearray | memoryview, limits: Limits, /) -> DataFrame: ...
def set_enabled(flag: bool, /) -> bool: ...
def find_name(fields: list[Field], name: object, /) -> int: ...
def configure(
    field_cls: type[Field],
    types: tuple[Any, ...],
    frame_cls: type[DataFrame],
    date_from_millis: Callable[[int], datetime | int],
    millis_from_date: Callable[[datetime | int], int],
    reference_encode: Callable[[DataFrame], bytes],
    reference_decode: Callable[[bytes | bytearray | memoryview, Limits], DataFrame],
    default_limits: Limits,
    /,
) -> None: ...
