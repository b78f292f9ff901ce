"""Journal records to Arrow, column-wise: the decoder behind the ``busjournal`` data source.

Pure code (bytes in, ``pyarrow.RecordBatch`` out; no Spark, no files). The fast path decodes
many records at once with numpy: it walks the top-level fields of every record in lock step
(one numpy pass per field position, not per record), picks the header fields by name, and turns
the payload's fields into JSON text and a map with Arrow compute kernels. No Python object is
made per record. Records the fast path cannot take (JSON-encoded messages, nested payload values,
text that needs escaping, ...) go through :func:`bus.message.decode_message` one by one and are
merged back in order, so both paths give the same rows.

Columns (:data:`ARROW_SCHEMA`, :data:`SPARK_SCHEMA`):

- ``ts`` timestamp (UTC, microseconds), ``seq`` (the record's sequence number; null in v1
  segments), ``segment`` (file name), ``offset`` (record offset);
- header text ``MID RID GRP RPY TYP CMD ENC MSG SRC TGT CLR TRC`` (CMD falls back to the
  payload's CMD; ENC is how the message was read: FRAM for binary frames; CLR is the caller and
  TRC the W3C traceparent, PROTOCOL.md 5.11);
- header numbers ``RCD FLG XPY PRI`` (long), ``size`` (message bytes);
- ``payload``: the PLD frame as Kestrel JSON text (``bus.jsonmap.to_json``);
- ``payload_map``: PLD's top-level fields, name -> text (strings as they are, anything else as
  JSON text).

When the optional C accelerator ``pipeline._journalscan`` was built at install time (like
``bus._speedups``), it does both jobs of a reader instead: :func:`find_records` (verify records)
and the column-wise decode, filling Arrow buffers directly; records it does not take go to the
full decoder as above. ``BUSGATE_PURE_PYTHON=1`` selects the numpy path even when it was built;
:func:`accelerated` says which one runs. Both give the same rows (tests run against both).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bus.errors import DecodeError
from bus.frame import pure_python_requested
from bus.journal import DEFAULT_MAX_RECORD, ScanResult, scan_records
from pipeline.rows import HEADER_INTS, HEADER_TEXT
from pipeline.rows import slow_row as _slow_row

__all__ = [
    "ARROW_SCHEMA",
    "HEADER_INTS",
    "HEADER_TEXT",
    "SPARK_SCHEMA",
    "accelerated",
    "decode_at",
    "decode_records",
    "find_records",
]

ARROW_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("seq", pa.int64()),
        pa.field("segment", pa.string()),
        pa.field("offset", pa.int64()),
        *(pa.field(name, pa.string()) for name in HEADER_TEXT),
        *(pa.field(name, pa.int64()) for name in HEADER_INTS),
        pa.field("size", pa.int32()),
        pa.field("payload", pa.string()),
        pa.field("payload_map", pa.map_(pa.string(), pa.string())),
    ]
)

SPARK_SCHEMA = (
    "ts timestamp, seq long, segment string, offset long, "
    + ", ".join(f"{name} string" for name in HEADER_TEXT)
    + ", "
    + ", ".join(f"{name} long" for name in HEADER_INTS)
    + ", size int, payload string, payload_map map<string,string>"
)

# Field type codes (seed 000) and their value sizes: -2 variable (u32 length), -1 unknown.
_SIZES = np.full(256, -1, dtype=np.int64)
for _code, _size in {1: 0, 4: 1, 5: 1, 6: 2, 7: 2, 8: 4, 9: 4, 10: 8, 11: 8}.items():
    _SIZES[_code] = _size
for _code, _size in {12: 4, 13: 8, 14: 1, 15: 8}.items():
    _SIZES[_code] = _size
for _code in (0, 2, 3, 16, 17):
    _SIZES[_code] = -2
_FRAME, _STRING, _URI, _UDEF, _BOOLEAN, _DOUBLE = 0, 3, 16, 1, 14, 13
_INT_TYPES = np.array([4, 5, 6, 7, 8, 9, 10, 11])
_DEEP = np.array([0, 15, 17])  # FRAME, DATE, ARRAY
_SIGNED = np.zeros(256, dtype=bool)
_SIGNED[[4, 6, 8, 10]] = True
# Bytes a JSON string cannot hold as is (escapes) or that are not ASCII (Latin-1 -> UTF-8).
_NEEDS_ESCAPE = np.zeros(256, dtype=bool)
_NEEDS_ESCAPE[:0x20] = True
_NEEDS_ESCAPE[[0x22, 0x5C]] = True
_NEEDS_ESCAPE[0x80:] = True

_WANTED = (*HEADER_TEXT, *HEADER_INTS, "PLD")
_KEYS = np.array([(3 << 24) | (ord(n[0]) << 16) | (ord(n[1]) << 8) | ord(n[2]) for n in _WANTED])
_ORDER = np.argsort(_KEYS)
_SORTED_KEYS = _KEYS[_ORDER]


class _Fields:
    """One field position across many records: which records, and where each field lies."""

    __slots__ = ("name_len", "name_pos", "rec", "type", "value_len", "value_pos")

    def __init__(
        self,
        rec: np.ndarray,
        name_pos: np.ndarray,
        name_len: np.ndarray,
        type_: np.ndarray,
        value_pos: np.ndarray,
        value_len: np.ndarray,
    ) -> None:
        self.rec = rec
        self.name_pos = name_pos
        self.name_len = name_len
        self.type = type_
        self.value_pos = value_pos
        self.value_len = value_len


_PAD = 8  # zero bytes after the data, so fixed-width reads never run off the end


def _word(buf: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """The ``width``-byte big-endian words at ``pos``: one gather from a byte-strided view."""
    words = np.ndarray((len(buf) - width + 1,), dtype=dtype, buffer=buf, strides=(1,))
    result: np.ndarray = words[np.minimum(pos, len(buf) - _PAD)]
    return result


def _u32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    result: np.ndarray = _word(buf, pos, 4, ">u4").astype(np.int64)
    return result


def _walk(buf: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[list[_Fields], np.ndarray]:
    """Walk the fields of many frames ``buf[start[i]:end[i]]`` in lock step.

    Returns one :class:`_Fields` per field position, and a mask of frames that are malformed.
    """
    bad = np.zeros(len(start), dtype=bool)
    steps: list[_Fields] = []
    last = len(buf) - 4
    pos = start.copy()
    rec = np.nonzero(pos < end)[0]
    while rec.size:
        p, e = pos[rec], end[rec]
        name_len = buf[p].astype(np.int64)  # p < e: inside the data
        type_pos = p + 1 + name_len
        type_ = buf[np.minimum(type_pos, last)].astype(np.int64)
        size = _SIZES[type_]
        variable = size == -2
        value_pos = type_pos + 1 + 4 * variable
        value_len = np.where(variable, _u32(buf, type_pos + 1), size)
        value_end = value_pos + value_len
        # value_end <= e also proves the type byte and the length field lie inside the frame
        ok = (size != -1) & (value_end <= e)
        if not ok.all():
            bad[rec[~ok]] = True
            rec, p, e, name_len, type_ = rec[ok], p[ok], e[ok], name_len[ok], type_[ok]
            value_pos, value_len, value_end = value_pos[ok], value_len[ok], value_end[ok]
        steps.append(_Fields(rec, p + 1, name_len, type_, value_pos, value_len))
        pos[rec] = value_end
        rec = rec[value_end < e]
    return steps, bad


def _slices(
    buf: np.ndarray, pos: np.ndarray, length: np.ndarray, valid: np.ndarray | None = None
) -> pa.Array:
    """The strings ``buf[pos[i]:pos[i]+length[i]]`` as an Arrow array (null where not ``valid``).

    ``pos`` must not go backwards (fields of records in file order). The slices and the gaps
    between them form one string array over ``buf`` without a copy; Arrow's ``take`` then
    gathers every other element in C++.
    """
    n = len(pos)
    if valid is not None:
        pos = np.where(valid, pos, 0)
        length = np.where(valid, length, 0)
    small = len(buf) < 2**31  # 32-bit offsets: the result needs no conversion
    offsets = np.empty(2 * n + 1, dtype=np.int32 if small else np.int64)
    offsets[0 : 2 * n : 2] = pos
    offsets[1 : 2 * n : 2] = pos + length
    offsets[2 * n] = offsets[2 * n - 1] if n else 0
    np.maximum.accumulate(offsets, out=offsets)  # nulls become empty slices in place
    both = pa.Array.from_buffers(
        pa.string() if small else pa.large_string(),
        2 * n,
        [None, pa.py_buffer(offsets), pa.py_buffer(buf)],
    )
    index = np.arange(0, 2 * n, 2, dtype=np.int64)
    picked = both.take(pa.array(index, mask=None if valid is None else ~valid))
    return picked if small else pc.cast(picked, pa.string())


def _needs_escape(values: pa.Array) -> np.ndarray:
    """True where a string is not ASCII or holds a byte JSON must escape."""
    plain = pc.and_(
        pc.string_is_ascii(values), pc.invert(pc.match_substring_regex(values, r'["\\\x00-\x1f]'))
    )
    result: np.ndarray = ~pc.fill_null(plain, True).to_numpy(zero_copy_only=False)
    return result


def _ints(buf: np.ndarray, pos: np.ndarray, type_: np.ndarray) -> np.ndarray:
    """Big-endian integers of types S8..U64 at ``pos`` as int64 (U64 above 2^63 wraps)."""
    size = _SIZES[type_]
    word = _word(buf, pos, 8, ">i8").astype(np.int64)  # the value sits in the top bytes
    shift = (64 - 8 * np.clip(size, 1, 8)).astype(np.int64)
    signed = word >> shift  # arithmetic: sign-extends
    unsigned = (word.view(np.uint64) >> shift.astype(np.uint64)).view(np.int64)
    result: np.ndarray = np.where(_SIGNED[type_] | (size == 8), signed, unsigned)
    return np.where(size > 0, result, 0)


def _doubles(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    result: np.ndarray = _word(buf, pos, 8, ">f8").astype(np.float64)
    return result


class _Header:
    """Where each wanted header field is, per record (-1: absent)."""

    def __init__(self, steps: list[_Fields], buf: np.ndarray, n: int) -> None:
        self.pos = np.full((len(_WANTED), n), -1, dtype=np.int64)
        self.len = np.zeros((len(_WANTED), n), dtype=np.int64)
        self.type = np.full((len(_WANTED), n), -1, dtype=np.int64)
        for step in steps:
            # the name length byte and three name bytes, as one word: (3 << 24) | "GRP"
            key = _u32(buf, step.name_pos - 1)
            slot = np.minimum(np.searchsorted(_SORTED_KEYS, key), len(_SORTED_KEYS) - 1)
            hit = _SORTED_KEYS[slot] == key
            col, rec = _ORDER[slot[hit]], step.rec[hit]
            first = self.pos[col, rec] == -1  # the first field of a name wins
            col, rec = col[first], rec[first]
            self.pos[col, rec] = step.value_pos[hit][first]
            self.len[col, rec] = step.value_len[hit][first]
            self.type[col, rec] = step.type[hit][first]

    def column(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        i = _WANTED.index(name)
        return self.pos[i], self.len[i], self.type[i]


def _text_column(
    buf: np.ndarray, header: _Header, name: str, bad: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    pos, length, type_ = header.column(name)
    valid = (type_ == _STRING) | (type_ == _URI)
    # a non-text value or a non-ASCII text goes the slow way
    bad |= (type_ != -1) & ~valid
    values = _slices(buf, pos, length, valid)
    ascii_ok = pc.fill_null(pc.string_is_ascii(values), True).to_numpy(zero_copy_only=False)
    bad |= ~ascii_ok
    return values, valid


def _int_column(buf: np.ndarray, header: _Header, name: str, bad: np.ndarray) -> pa.Array:
    pos, _, type_ = header.column(name)
    valid = np.isin(type_, _INT_TYPES)
    bad |= (type_ != -1) & ~valid
    values = _ints(buf, np.where(valid, pos, 0), np.where(valid, type_, 10))
    return pa.array(values, type=pa.int64(), mask=~valid)


def _in_order(parts: list[pa.Array], index: list[np.ndarray], count: int) -> pa.Array:
    """Put per-category results back in entry order: ``parts[k][j]`` belongs at ``index[k][j]``."""
    where = np.empty(count, dtype=np.int64)
    where[np.concatenate(index)] = np.arange(count)
    return pa.concat_arrays(parts).take(pa.array(where))


def _value_text(buf: np.ndarray, entries: _Fields, bad: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """JSON text (for ``payload``) and map text (strings bare) of payload fields.

    Each kind of value is converted only where it occurs, then put back in entry order. Values
    the fast path cannot write as Kestrel's ``to_json`` would mark their record ``bad``.
    """
    t, count = entries.type, len(entries.type)
    is_text = (t == _STRING) | (t == _URI)
    is_int = np.isin(t, _INT_TYPES) & ~((t == 11) & (buf[entries.value_pos] >= 0x80))
    is_double = t == _DOUBLE
    is_bool = t == _BOOLEAN
    text_at, int_at = np.nonzero(is_text)[0], np.nonzero(is_int)[0]
    text = _slices(buf, entries.value_pos[text_at], entries.value_len[text_at])
    escaped = _needs_escape(text)
    doubles = _doubles(buf, entries.value_pos[is_double])
    floats = pc.cast(pa.array(np.where(np.isfinite(doubles), doubles, 0.0)), pa.string())
    # Arrow and Python (repr) print the same shortest digits; they differ on when to use an
    # exponent, so those values take the slow path, and Python writes integral values as "3.0".
    odd = pc.match_substring(floats, "e").to_numpy(zero_copy_only=False) | ~np.isfinite(doubles)
    size = np.abs(doubles)
    odd |= ((size < 1e-4) & (size > 0)) | (size >= 1e16)  # Python writes an exponent there
    integral = (np.floor(doubles) == doubles) & (np.abs(doubles) < 1e16)
    floats = pc.if_else(pa.array(integral), pc.binary_join_element_wise(floats, ".0", ""), floats)
    double_at = np.nonzero(is_double)[0]
    slow = ~(is_text | is_int | is_double | is_bool | (t == _UDEF))
    slow[text_at[escaped]] = True
    slow[double_at[odd]] = True
    bad[entries.rec[slow]] = True
    bool_at = np.nonzero(is_bool)[0]
    null_at = np.nonzero(~(is_text | is_int | is_double | is_bool))[0]
    ints = pc.cast(pa.array(_ints(buf, entries.value_pos[int_at], t[int_at])), pa.string())
    bools = pc.if_else(pa.array(buf[entries.value_pos[bool_at]].view(np.int8) > 0), "true", "false")
    nulls = pa.repeat(pa.scalar("null", pa.string()), len(null_at))
    index = [text_at, int_at, double_at, bool_at, null_at]
    quoted = pc.binary_join_element_wise('"', text, '"', "")
    json_text = _in_order([quoted, ints, floats, bools, nulls], index, count)
    map_text = _in_order([text, ints, floats, bools, nulls], index, count)
    return json_text, map_text


def _payload_columns(
    buf: np.ndarray, header: _Header, n: int, bad: np.ndarray
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``payload`` JSON, ``payload_map`` and the payload's CMD, for every record."""
    pos, length, type_ = header.column("PLD")
    has = type_ == _FRAME
    bad |= (type_ != -1) & ~has
    steps, malformed = _walk(buf, np.where(has, pos, 0), np.where(has, pos + length, 0))
    bad |= malformed
    # every payload field of every record, in file order (record, then field position)
    rec = np.concatenate([s.rec for s in steps]) if steps else np.zeros(0, dtype=np.int64)
    order = np.argsort(rec, kind="stable")
    rec = rec[order]

    def cat(name: str) -> np.ndarray:
        if not steps:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([getattr(s, name) for s in steps])[order]

    entries = _Fields(
        rec, cat("name_pos"), cat("name_len"), cat("type"), cat("value_pos"), cat("value_len")
    )
    bad[rec[entries.name_len == 0]] = True  # unnamed fields: a JSON array, slow path
    names = _slices(buf, entries.name_pos, entries.name_len)
    bad[rec[_needs_escape(names)]] = True
    json_text, map_text = _value_text(buf, entries, bad)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.bincount(rec, minlength=n), out=offsets[1:])
    mask = pa.array(~has)
    pieces = pc.binary_join_element_wise('"', names, '":', json_text, "")
    joined = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pieces), ",")
    payload = pc.binary_join_element_wise("{", joined, "}", "")
    payload = pc.if_else(mask, pa.nulls(n, pa.string()), payload)
    payload_map = pa.MapArray.from_arrays(pa.array(offsets), names, map_text, mask=mask)
    text_type = (entries.type == _STRING) | (entries.type == _URI)
    is_cmd = pc.equal(names, "CMD").to_numpy(zero_copy_only=False) & text_type
    cmd_index = np.full(n, -1, dtype=np.int64)
    hits = np.nonzero(is_cmd)[0][::-1]  # reversed, so the first CMD of a record is written last
    cmd_index[rec[hits]] = hits
    cmd = map_text.take(pa.array(cmd_index, mask=cmd_index < 0))
    return payload, payload_map, cmd


def _fast(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[dict[str, pa.Array], np.ndarray]:
    n = len(starts)
    steps, bad = _walk(buf, starts, starts + lengths)
    # a name byte above 0x7F may not be UTF-8 (then the body is not a frame): full decoder
    high = np.zeros(len(buf) + 1, dtype=np.int32)
    np.cumsum(buf >= 0x80, dtype=np.int32, out=high[1:])
    for step in steps:
        odd = high[step.name_pos + step.name_len] != high[step.name_pos]
        bad[step.rec[odd]] = True
    header = _Header(steps, buf, n)
    # values whose inside the full decoder checks (nested frames besides the payload, arrays,
    # dates): the full decoder says whether the body is a frame at all
    payload_pos = header.column("PLD")[0]
    for step in steps:
        deep = np.isin(step.type, _DEEP) & (payload_pos[step.rec] != step.value_pos)
        bad[step.rec[deep]] = True
    columns: dict[str, pa.Array] = {}
    for name in HEADER_TEXT:
        if name not in ("CMD", "ENC"):
            columns[name], _ = _text_column(buf, header, name, bad)
    for name in HEADER_INTS:
        columns[name] = _int_column(buf, header, name, bad)
    payload, payload_map, payload_cmd = _payload_columns(buf, header, n, bad)
    header_cmd, has_cmd = _text_column(buf, header, "CMD", bad)
    columns["CMD"] = pc.if_else(pa.array(has_cmd), header_cmd, payload_cmd)
    columns["ENC"] = pa.repeat(pa.scalar("FRAM", pa.string()), n)
    columns["payload"] = payload
    columns["payload_map"] = payload_map
    return columns, bad


def _load_accelerator() -> Any:
    """``pipeline._journalscan`` when it was built and not refused by ``BUSGATE_PURE_PYTHON``."""
    if pure_python_requested():
        return None
    try:
        from pipeline import _journalscan
    except ImportError:  # pragma: no cover - no C compiler at install time
        return None
    return _journalscan


_accel: Any = _load_accelerator()
# the C column order: HEADER_TEXT without ENC (pipeline/_journalscan.c WANTED)
_C_TEXT = tuple(name for name in HEADER_TEXT if name != "ENC")
_MAP_TYPE = ARROW_SCHEMA.field("payload_map").type


def accelerated() -> bool:
    """True when the C accelerator decodes (built at install, ``BUSGATE_PURE_PYTHON`` unset)."""
    return _accel is not None


def _text_array(n: int, parts: tuple[bytes, bytes, bytes | None]) -> pa.Array:
    offsets, data, valid = parts
    bitmap = None if valid is None else pa.py_buffer(valid)
    return pa.Array.from_buffers(
        pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _map_array(n: int, parts: tuple[bytes, bytes, bytes, bytes, bytes, bytes]) -> pa.Array:
    offsets, valid, key_offsets, keys, value_offsets, values = parts
    count = len(key_offsets) // 4 - 1
    key_array = _text_array(count, (key_offsets, keys, None))
    value_array = _text_array(count, (value_offsets, values, None))
    entries = pa.StructArray.from_arrays(
        [key_array, value_array], fields=[_MAP_TYPE.key_field, _MAP_TYPE.item_field]
    )
    buffers = [pa.py_buffer(valid), pa.py_buffer(offsets)]
    return pa.Array.from_buffers(_MAP_TYPE, n, buffers, children=[entries])


def _fast_c(
    data: bytes | memoryview, starts: np.ndarray, lengths: np.ndarray
) -> tuple[dict[str, pa.Array], np.ndarray] | None:
    """The C accelerator's columns and ``bad`` mask; ``None`` when a column would pass 2 GiB."""
    out = _accel.decode(data, starts, lengths)
    if out is None:
        return None
    n = len(starts)
    columns: dict[str, pa.Array] = {
        name: _text_array(n, parts) for name, parts in zip(_C_TEXT, out["text"], strict=True)
    }
    for name, (values, valid) in zip(HEADER_INTS, out["ints"], strict=True):
        buffers = [pa.py_buffer(valid), pa.py_buffer(values)]
        columns[name] = pa.Array.from_buffers(pa.int64(), n, buffers)
    columns["ENC"] = pa.repeat(pa.scalar("FRAM", pa.string()), n)
    columns["payload"] = _text_array(n, out["payload"])
    columns["payload_map"] = _map_array(n, out["map"])
    bad = np.frombuffer(out["bad"], dtype=np.bool_).copy()
    return columns, bad


def find_records(
    data: bytes | memoryview,
    start: int = 0,
    stop: int | None = None,
    *,
    version: int = 2,
    max_record: int = DEFAULT_MAX_RECORD,
    max_count: int | None = None,
    final: bool = True,
    after_seq: int = -1,
) -> ScanResult:
    """:func:`bus.journal.scan_records`, in C when the accelerator was built.

    Args:
        data: the buffer (usually a whole segment or a range of one).
        start: offset of the first record.
        stop: scan no record that starts at or after ``stop`` (default: the end of ``data``).
        version: the segment version (2, or 1).
        max_record: the largest body accepted.
        max_count: stop after this many records.
        final: ``False`` when the buffer may still grow (see :func:`bus.journal.scan_records`).
        after_seq: the sequence number before ``start``, if known.

    Returns:
        The scan, as :func:`bus.journal.scan_records` gives it, with ``offsets`` an int64 array.
    """
    if _accel is None or max_record < 0:
        found = scan_records(
            data,
            start,
            stop,
            version=version,
            max_record=max_record,
            max_count=max_count,
            final=final,
            after_seq=after_seq,
        )
        found.offsets = np.asarray(found.offsets, dtype=np.int64)  # type: ignore[assignment]
        return found
    raw, end, partial, damage, last_seq = _accel.scan(
        data,
        start,
        -1 if stop is None else max(stop, 0),
        max_record,
        -1 if max_count is None or max_count < 0 else max_count,  # negative: no limit
        version,
        final,
        after_seq,
    )
    offsets = np.frombuffer(raw, dtype=np.int64)
    return ScanResult(offsets, end, partial, damage, last_seq)  # type: ignore[arg-type]


def decode_records(
    data: bytes | memoryview,
    starts: Sequence[int] | np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    ts_us: Sequence[int] | np.ndarray,
    record_offsets: Sequence[int] | np.ndarray,
    segment: str,
    *,
    base_offset: int = 0,
    seqs: Sequence[int] | np.ndarray | None = None,
) -> pa.RecordBatch:
    """Decode the messages ``data[starts[i]:starts[i]+lengths[i]]`` into one Arrow batch.

    Args:
        data: the buffer holding the records (a segment or part of one).
        starts: offset of each message body in ``data``.
        lengths: length of each body.
        ts_us: each record's timestamp, microseconds since the epoch.
        record_offsets: offset of each record in ``data`` (reported plus ``base_offset``).
        segment: the segment's file name, for the ``segment`` column.
        base_offset: where ``data`` starts in the segment file.
        seqs: each record's sequence number (``None``: v1 records, a null column).

    Returns:
        A batch with :data:`ARROW_SCHEMA`, one row per record, in order.

    Raises:
        DecodeError: a body does not lie inside ``data`` (a caller's mistake).
    """
    start_arr = np.ascontiguousarray(starts, dtype=np.int64)
    len_arr = np.ascontiguousarray(lengths, dtype=np.int64)
    n = len(start_arr)
    outside = (start_arr < 0) | (len_arr < 0) | (start_arr + len_arr > memoryview(data).nbytes)
    if outside.any():
        at = int(np.argmax(outside))
        raise DecodeError("record body outside the buffer", int(start_arr[at]))
    found = _fast_c(data, start_arr, len_arr) if n and _accel is not None else None
    if found is not None:
        columns, bad = found
    elif n:
        # only the bytes of these records, plus zero padding for fixed-width reads
        lo, hi = int(start_arr[0]), int(start_arr[-1] + len_arr[-1])
        buf = np.zeros(hi - lo + _PAD, dtype=np.uint8)
        buf[: hi - lo] = np.frombuffer(data, dtype=np.uint8, count=hi - lo, offset=lo)
        columns, bad = _fast(buf, start_arr - lo, len_arr)
    else:
        columns, bad = {}, np.zeros(0, dtype=bool)
    fixed = {
        "ts": pa.array(np.asarray(ts_us, dtype=np.int64), pa.timestamp("us", tz="UTC")),
        "seq": (
            pa.nulls(n, pa.int64())
            if seqs is None
            else pa.array(np.asarray(seqs, dtype=np.int64), pa.int64())
        ),
        "segment": pa.repeat(pa.scalar(segment, pa.string()), n),
        "offset": pa.array(np.asarray(record_offsets, dtype=np.int64) + base_offset, pa.int64()),
        "size": pa.array(len_arr.astype(np.int32), pa.int32()),
    }
    if not n:
        return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)
    columns.update(fixed)
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)
    if not bad.any():
        return batch
    return _patch(batch, bytes(data), start_arr, len_arr, bad)


def _patch(
    batch: pa.RecordBatch, data: bytes, starts: np.ndarray, lengths: np.ndarray, bad: np.ndarray
) -> pa.RecordBatch:
    """Replace the rows in ``bad`` with rows from the full decoder, keeping the order."""
    slow_index = np.nonzero(bad)[0]
    good_index = np.nonzero(~bad)[0]
    rows = []
    fixed = batch.select(["ts", "seq", "segment", "offset", "size"])
    fixed = fixed.take(pa.array(slow_index)).to_pylist()
    for i, extra in zip(slow_index, fixed, strict=True):
        row = _slow_row(data[starts[i] : starts[i] + lengths[i]])
        row.update(extra)
        rows.append(row)
    slow = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    good = pa.Table.from_batches([batch]).take(pa.array(good_index))
    merged = pa.concat_tables([good, slow])
    order = np.argsort(np.concatenate([good_index, slow_index]), kind="stable")
    return merged.take(pa.array(order)).combine_chunks().to_batches()[0]


def decode_at(
    data: bytes | memoryview,
    offsets: Sequence[int] | np.ndarray,
    segment: str,
    *,
    base_offset: int = 0,
    version: int = 2,
) -> pa.RecordBatch:
    """Decode the (already verified) records that start at ``offsets`` in ``data``.

    Lengths, timestamps and sequence numbers are read from the record headers in bulk
    (PROTOCOL.md section 8: length at +8, ts at +12, seq at +20 in v2), then
    :func:`decode_records` does the rest.

    Args:
        data: the buffer holding the records.
        offsets: each record's offset in ``data`` (from :func:`find_records`).
        segment: the segment's file name.
        base_offset: where ``data`` starts in the segment file.
        version: the segment version (v1 records have no sequence number).

    Returns:
        A batch with :data:`ARROW_SCHEMA`.
    """
    at = np.asarray(offsets, dtype=np.int64)
    raw = np.frombuffer(data, dtype=np.uint8)
    lengths = np.ndarray((len(raw) - 3,), dtype=">u4", buffer=raw, strides=(1,))[at + 8]
    stamps = np.ndarray((len(raw) - 7,), dtype=">i8", buffer=raw, strides=(1,))[at + 12]
    seqs = None
    if version >= 2:
        seqs = np.ndarray((len(raw) - 7,), dtype=">i8", buffer=raw, strides=(1,))[at + 20]
    return decode_records(
        data,
        at + (28 if version >= 2 else 20),
        lengths.astype(np.int64),
        stamps.astype(np.int64),
        at,
        segment,
        base_offset=base_offset,
        seqs=seqs,
    )
