"""Types of the optional C accelerator of the busjournal reader (``pipeline/_journalscan.c``)."""

from typing import Any

def scan(
    data: bytes | memoryview, start: int, stop: int, max_record: int, max_count: int, /
) -> tuple[bytes, int, int, str | None, int]: ...
def decode(data: bytes | memoryview, starts: Any, lengths: Any, /) -> dict[str, Any] | None: ...
