"""Type stub of the optional C accelerator (bus/_speedups.c); bus.codec is the interface."""

from collections.abc import Callable
from datetime import datetime
from typing import Any

from bus.codec import Limits
from bus.frame import DataFrame, Field

def decode(data: bytes | bytearray | memoryview, limits: Limits, /) -> DataFrame: ...
def encode(frame: DataFrame, /) -> bytes: ...
def configure(
    field_cls: type[Field],
    types: tuple[Any, ...],
    frame_cls: type[DataFrame],
    make_frame: Callable[[list[Field]], DataFrame],
    date_from_millis: Callable[[int], datetime],
    millis_from_date: Callable[[datetime], int],
    /,
) -> None: ...
