"""Type stub of the optional C accelerator of the data path (bus/_hotpath.c)."""

from typing import Any

def scan(
    buffer: bytes | bytearray | memoryview, start: int, max_frame: int, max_message: int, /
) -> tuple[list[bytes | None], int]: ...
def peek(
    data: bytes | bytearray | memoryview, max_depth: int, max_fields: int, json_only: bool, /
) -> tuple[Any, ...] | None: ...
def format_id(block: bytes, pos: int, /) -> str: ...
