"""Journal records to Arrow, column-wise: the decoder behind the ``busjournal`` data source.

Pure code (bytes in, ``pyarrow.RecordBatch`` out; no Spark, no files). The fast path decodes
many records at once with numpy: it walks the top-level fields of every record in lock step
(one numpy pass per field position, not per record), picks the header fields by name, and turns
the payload's fields into JSON text and a map with Arrow compute kernels. No Python object is
made per record. Records the fast path cannot take (JSON-encoded messages, nested payload values,
text that needs escaping, ...) go through :func:`bus.message.decode_message` one by one and are
merged back in order, so both paths give the same rows.

Columns (:data:`ARROW_SCHEMA`, :data:`SPARK_SCHEMA`):

- ``ts`` timestamp (UTC, microseconds), ``segment`` (file name), ``offset`` (record offset);
- header text ``MID RID GRP RPY TYP CMD ENC MSG SRC TGT`` (CMD falls back to the payload's CMD;
  ENC is how the message was read: FRAM for binary frames);
- header numbers ``RCD FLG XPY PRI`` (long), ``size`` (message bytes);
- ``payload``: the PLD frame as Kestrel JSON text (``bus.jsonmap.to_json``);
- ``payload_map``: PLD's top-level fields, name -> text (strings as they are, anything else as
  JSON text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bus.frame import DataFrame
from bus.jsonmap import to_json
from bus.message import decode_message

__all__ = [
    "ARROW_SCHEMA",
    "HEADER_INTS",
    "HEADER_TEXT",
    "SPARK_SCHEMA",
    "decode_records",
]

HEADER_TEXT = ("MID", "RID", "GRP", "RPY", "TYP", "CMD", "ENC", "MSG", "SRC", "TGT")
HEADER_INTS = ("RCD", "FLG", "XPY", "PRI")

ARROW_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC")),
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
    "ts timestamp, segment string, offset long, "
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
_SIGNED = np.zeros(256, dtype=bool)
_SIGNED[[4, 6, 8, 10]] = True
# Bytes a JSON string cannot hold as is (escapes) or that are not ASCII (Latin-1 -> UTF-8).
_NEEDS_ESCAPE = np.zeros(256, dtype=bool)
_NEEDS_ESCAPE[:0x20] = True
_NEEDS_ESCAPE[[0x22, 0x5C]] = True
_NEEDS_ESCAPE[0x80:] = True

_WANTED = (*HEADER_TEXT, *HEADER_INTS, "PLD")
_KEYS = np.array([(ord(n[0]) << 16) | (ord(n[1]) << 8) | ord(n[2]) for n in _WANTED])
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


def _u32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    b = buf[np.stack([pos, pos + 1, pos + 2, pos + 3])].astype(np.int64)
    result: np.ndarray = (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]
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
        name_len = buf[np.minimum(p, last)].astype(np.int64)
        type_pos = p + 1 + name_len
        ok = type_pos < e
        type_ = buf[np.minimum(type_pos, last)].astype(np.int64)
        size = _SIZES[type_]
        variable = size == -2
        ok &= size != -1
        ok &= ~variable | (type_pos + 5 <= e)
        var_len = _u32(buf, np.minimum(type_pos + 1, last))
        value_pos = np.where(variable, type_pos + 5, type_pos + 1)
        value_len = np.where(variable, var_len, size)
        value_end = value_pos + value_len
        ok &= value_end <= e
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
    offsets = np.empty(2 * n + 1, dtype=np.int64)
    offsets[0 : 2 * n : 2] = pos
    offsets[1 : 2 * n : 2] = pos + length
    offsets[2 * n] = offsets[2 * n - 1] if n else 0
    np.maximum.accumulate(offsets, out=offsets)  # nulls become empty slices in place
    both = pa.Array.from_buffers(
        pa.large_string(), 2 * n, [None, pa.py_buffer(offsets), pa.py_buffer(buf)]
    )
    index = np.arange(0, 2 * n, 2, dtype=np.int64)
    picked = both.take(pa.array(index, mask=None if valid is None else ~valid))
    return pc.cast(picked, pa.string())


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
    value = np.zeros(len(pos), dtype=np.int64)
    last = len(buf) - 1
    for byte in range(8):
        take = byte < size
        b = buf[np.minimum(pos + byte, last)].astype(np.int64)
        value = np.where(take, (value << 8) | b, value)
    bits = np.maximum(size, 1) * 8
    signed = _SIGNED[type_] & (size < 8)
    neg = signed & ((value >> (bits - 1)) & 1 == 1)
    result: np.ndarray = np.where(neg, value - (np.int64(1) << bits), value)
    return result


def _doubles(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    index = np.minimum(pos, len(buf) - 8)[:, None] + np.arange(8)
    result: np.ndarray = buf[index].copy().view(">f8").reshape(-1).astype(np.float64)
    return result


class _Header:
    """Where each wanted header field is, per record (-1: absent)."""

    def __init__(self, steps: list[_Fields], buf: np.ndarray, n: int) -> None:
        self.pos = np.full((len(_WANTED), n), -1, dtype=np.int64)
        self.len = np.zeros((len(_WANTED), n), dtype=np.int64)
        self.type = np.full((len(_WANTED), n), -1, dtype=np.int64)
        last = len(buf) - 4
        for step in steps:
            p = np.minimum(step.name_pos, last)
            key = (buf[p].astype(np.int64) << 16) | (buf[p + 1].astype(np.int64) << 8) | buf[p + 2]
            key = np.where(step.name_len == 3, key, -1)
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


def _value_text(buf: np.ndarray, step: _Fields, bad: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """JSON text (for ``payload``) and map text (strings bare) of one payload field position."""
    t = step.type
    is_text = (t == _STRING) | (t == _URI)
    is_int = np.isin(t, _INT_TYPES)
    simple = is_text | is_int | (t == _BOOLEAN) | (t == _UDEF) | (t == _DOUBLE)
    simple &= ~((t == 11) & (buf[np.minimum(step.value_pos, len(buf) - 1)] >= 0x80))
    text = _slices(buf, step.value_pos, step.value_len, is_text)
    simple &= ~(is_text & _needs_escape(text))
    doubles = _doubles(buf, np.where(t == _DOUBLE, step.value_pos, 0))
    finite = np.isfinite(doubles)
    simple &= ~((t == _DOUBLE) & ~finite)
    bad[step.rec[~simple]] = True
    ints = pc.cast(pa.array(_ints(buf, step.value_pos, np.where(is_int, t, 10))), pa.string())
    safe = np.where(finite, doubles, 0.0)
    floats = pc.cast(pa.array(safe), pa.string())
    # Arrow and Python (repr) print the same shortest digits; they differ on when to use an
    # exponent, so those values take the slow path, and Python writes integral values as "3.0".
    exponent = pc.match_substring(floats, "e").to_numpy(zero_copy_only=False)
    bad[step.rec[(t == _DOUBLE) & exponent]] = True
    integral = (np.floor(safe) == safe) & (np.abs(safe) < 1e16)
    floats = pc.if_else(pa.array(integral), pc.binary_join_element_wise(floats, ".0", ""), floats)
    other = pc.if_else(
        pa.array(t == _BOOLEAN),
        pc.if_else(pa.array(buf[np.minimum(step.value_pos, len(buf) - 1)] > 0), "true", "false"),
        "null",
    )
    numbers = pc.if_else(pa.array(is_int), ints, pc.if_else(pa.array(t == _DOUBLE), floats, other))
    quoted = pc.binary_join_element_wise('"', text, '"', "")
    return pc.if_else(pa.array(is_text), quoted, numbers), pc.if_else(
        pa.array(is_text), text, numbers
    )


def _payload_columns(
    buf: np.ndarray, header: _Header, n: int, bad: np.ndarray
) -> tuple[pa.Array, pa.Array, pa.Array]:
    """``payload`` JSON, ``payload_map`` and the payload's CMD, for every record."""
    pos, length, type_ = header.column("PLD")
    has = type_ == _FRAME
    bad |= (type_ != -1) & ~has
    steps, malformed = _walk(buf, np.where(has, pos, 0), np.where(has, pos + length, 0))
    bad |= malformed
    pieces: list[pa.Array] = []
    keys: list[pa.Array] = []
    items: list[pa.Array] = []
    recs: list[np.ndarray] = []
    cmd_index = np.full(n, -1, dtype=np.int64)
    cmd_parts: list[pa.Array] = []
    base = 0
    for step in steps:
        bad[step.rec[step.name_len == 0]] = True  # unnamed fields: a JSON array, slow path
        names = _slices(buf, step.name_pos, step.name_len)
        bad[step.rec[_needs_escape(names)]] = True
        json_text, map_text = _value_text(buf, step, bad)
        piece = pc.binary_join_element_wise('"', names, '":', json_text, ",", "")
        pieces.append(pc.fill_null(_spread(piece, step.rec, n), ""))
        keys.append(names)
        items.append(map_text)
        recs.append(step.rec)
        is_cmd = pc.equal(names, "CMD").to_numpy(zero_copy_only=False) & (
            (step.type == _STRING) | (step.type == _URI)
        )
        unset = cmd_index[step.rec] == -1
        pick = is_cmd & unset
        cmd_index[step.rec[pick]] = base + np.nonzero(pick)[0]
        cmd_parts.append(map_text)
        base += len(step.rec)
    valid = pa.array(has)
    # each piece ends with a comma; the last comma is cut (join's null skipping drops rows)
    inner = pc.binary_join_element_wise(*pieces, "") if pieces else pa.array([""] * n)
    inner = pc.utf8_slice_codeunits(inner, 0, -1)
    payload = pc.binary_join_element_wise("{", inner, "}", "")
    payload = pc.if_else(valid, payload, pa.nulls(n, pa.string()))
    rec_all = np.concatenate(recs) if recs else np.zeros(0, dtype=np.int64)
    counts = np.bincount(rec_all, minlength=n)
    order = np.argsort(rec_all, kind="stable")  # steps were appended in field order
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    all_keys = pa.concat_arrays(keys) if keys else pa.array([], pa.string())
    all_items = pa.concat_arrays(items) if items else pa.array([], pa.string())
    mask = pa.array(~has)
    payload_map = pa.MapArray.from_arrays(
        pa.array(offsets), all_keys.take(order), all_items.take(order), mask=mask
    )
    cmd_source = pa.concat_arrays(cmd_parts) if cmd_parts else pa.array([], pa.string())
    cmd = cmd_source.take(pa.array(cmd_index, mask=cmd_index < 0))
    return payload, payload_map, cmd


def _spread(values: pa.Array, rec: np.ndarray, n: int) -> pa.Array:
    index = np.full(n, -1, dtype=np.int64)
    index[rec] = np.arange(len(rec))
    return values.take(pa.array(index, mask=index < 0))


def _fast(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[dict[str, pa.Array], np.ndarray]:
    n = len(starts)
    steps, bad = _walk(buf, starts, starts + lengths)
    header = _Header(steps, buf, n)
    columns: dict[str, pa.Array] = {}
    for name in HEADER_TEXT:
        if name not in ("CMD", "ENC"):
            columns[name], _ = _text_column(buf, header, name, bad)
    for name in HEADER_INTS:
        columns[name] = _int_column(buf, header, name, bad)
    payload, payload_map, payload_cmd = _payload_columns(buf, header, n, bad)
    header_cmd, has_cmd = _text_column(buf, header, "CMD", bad)
    columns["CMD"] = pc.if_else(pa.array(has_cmd), header_cmd, payload_cmd)
    columns["ENC"] = pa.array(np.full(n, "FRAM", dtype=object), pa.string())
    columns["payload"] = payload
    columns["payload_map"] = payload_map
    return columns, bad


def _slow_row(raw: bytes) -> dict[str, Any]:
    """One record through the full decoder (``bus.message.decode_message``)."""
    message = decode_message(raw)
    frame = message.frame
    row: dict[str, Any] = {}
    for name in HEADER_TEXT:
        value = frame.get(name)
        row[name] = None if value is None else str(value)
    row["CMD"] = message.cmd
    row["ENC"] = str(message.enc)
    for name in HEADER_INTS:
        value = frame.get(name)
        row[name] = value if isinstance(value, int) and not isinstance(value, bool) else None
    payload = frame.get("PLD")
    if isinstance(payload, DataFrame):
        row["payload"] = to_json(payload)
        row["payload_map"] = [(item.name, _map_text(item.value)) for item in payload.fields]
    else:
        row["payload"] = None if payload is None else to_json(DataFrame({"PLD": payload}))[7:-1]
        row["payload_map"] = None
    return row


def _map_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, DataFrame):
        return to_json(value)
    return to_json(DataFrame({"v": value}))[5:-1]


def decode_records(
    data: bytes | memoryview,
    starts: Sequence[int] | np.ndarray,
    lengths: Sequence[int] | np.ndarray,
    ts_us: Sequence[int] | np.ndarray,
    record_offsets: Sequence[int] | np.ndarray,
    segment: str,
    *,
    base_offset: int = 0,
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

    Returns:
        A batch with :data:`ARROW_SCHEMA`, one row per record, in order.
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    if len(buf) < 8:
        buf = np.concatenate([buf, np.zeros(8, dtype=np.uint8)])
    start_arr = np.asarray(starts, dtype=np.int64)
    len_arr = np.asarray(lengths, dtype=np.int64)
    n = len(start_arr)
    columns, bad = _fast(buf, start_arr, len_arr) if n else ({}, np.zeros(0, dtype=bool))
    fixed = {
        "ts": pa.array(np.asarray(ts_us, dtype=np.int64), pa.timestamp("us", tz="UTC")),
        "segment": pa.array(np.full(n, segment, dtype=object), pa.string()),
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
    fixed = batch.select(["ts", "segment", "offset", "size"]).take(pa.array(slow_index)).to_pylist()
    for i, extra in zip(slow_index, fixed, strict=True):
        row = _slow_row(data[starts[i] : starts[i] + lengths[i]])
        row.update(extra)
        rows.append(row)
    slow = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    good = pa.Table.from_batches([batch]).take(pa.array(good_index))
    merged = pa.concat_tables([good, slow])
    order = np.argsort(np.concatenate([good_index, slow_index]), kind="stable")
    return merged.take(pa.array(order)).combine_chunks().to_batches()[0]
