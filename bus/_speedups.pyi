"""Type stub of the optional C accelerator (bus/_speedups.c); bus.codec is the interface."""

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from bus.frame import DataFrame, Field

def decode(data: bytes, max_depth: int, max_fields: int, /) -> DataFrame: ...
def encode(fields: Sequence[Field], /) -> bytes: ...
def configure(
    field_cls: type[Field],
    types: tuple[Any, ...],
    frame_cls: type[DataFrame],
    make_frame: Callable[[list[Field]], DataFrame],
    date_from_millis: Callable[[int], datetime],
    millis_from_date: Callable[[datetime], int],
    /,
) -> None: ...
