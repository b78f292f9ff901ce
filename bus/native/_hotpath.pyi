"""Type stub of the optional C accelerator of the data path (bus/native/_hotpath.c and
bus/native/_hotpath_objects.c, bus/native/_hotpath_fields.c, bus/native/_hotpath_confirm.c,
bus/native/_hotpath_answer.c, bus/native/_hotpath_http.c)."""

from collections.abc import Callable
from typing import Any

def scan(
    buffer: bytes | bytearray | memoryview, start: int, max_frame: int, max_message: int, /
) -> tuple[list[bytes | None], int]: ...
def peek(
    data: bytes | bytearray | memoryview, max_depth: int, max_fields: int, json_only: bool, /
) -> tuple[Any, ...] | None: ...
def format_id(block: bytes, pos: int, /) -> str: ...
def http_request(data: bytes, /) -> tuple[bytes, list[tuple[bytes, bytes]], bytes, bool] | None: ...
def json_request(
    payload: bytes,
    group: str,
    reply_to: str | None,
    src: str | None,
    caller: str | None,
    trace: str | None,
    max_depth: int,
    max_fields: int,
    block: bytes,
    pos: int,
    /,
) -> tuple[bytes, tuple[Any, ...]] | None: ...
def http_answer(
    raw: bytes,
    head: tuple[Any, ...],
    status: bytes,
    defaults: bytes,
    mid: bytes,
    trace: bytes,
    close: bytes,
    /,
) -> bytes | None: ...
def ack_frame(
    dumps: Callable[[Any], bytes],
    rpy: str | None,
    rid: str | None,
    mid: str,
    payload: Any,
    src: str | None,
    trc: str | None,
    max_depth: int,
    max_fields: int,
    max_size: int,
    /,
) -> bytes | None: ...
def plain(value: Any, depth: int, max_fields: int, /) -> bool: ...
def count_fields(value: Any, /) -> int: ...
def content_run(
    buffer: bytes,
    start: int,
    limit: int,
    max_metadata: int,
    max_payload: int,
    sender_id: str,
    own_id: str,
    prefix: str,
    next_id: Callable[[], int],
    /,
) -> tuple[list[tuple[dict[str, Any], bytes, bytes, str | None, str | None]], int]: ...
def confirm_run(
    bodies: list[bytes],
    start: int,
    limit: int,
    office: bytes,
    trusted: bool,
    max_size: int,
    max_depth: int,
    max_fields: int,
    max_name: int,
    office_text: str,
    seen: dict[tuple[str, str], tuple[int, float]],
    entries: int,
    now: float,
    window: tuple[int, int, int, int, int, int],
    record: Callable[[bytes, int, int], bytes],
    ts: int,
    pending: list[bytes],
    subscribers: Callable[[str], list[int]],
    deliver: Callable[[list[int], bytes], None] | None,
    with_seq: Callable[[bytes, int, int], bytes],
    ids: bytes,
    ids_pos: int,
    held: list[tuple[int, str, bytes, bytes]],
    conn: Any,
    ready: Any,
    central: str,
    /,
) -> tuple[int, int, int, int, int, bool, BaseException | None]: ...
