"""Types of the optional C accelerator of the busjournal reader (``bus/native/_journalscan.c``)."""

from typing import Any

def scan(
    data: bytes | memoryview,
    start: int,
    stop: int,
    max_record: int,
    max_count: int,
    version: int = 2,
    final: bool = True,
    after_seq: int = -1,
    /,
) -> tuple[bytes, int, int, list[tuple[int, int, str]], int]: ...
def decode(data: bytes | memoryview, starts: Any, lengths: Any, /) -> dict[str, Any] | None: ...
def record(raw: bytes, ts_us: int, seq: int, /) -> bytes: ...
