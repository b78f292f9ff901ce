"""The numpy fast path of :mod:`pipeline.decode`: journal message bodies to Arrow columns.

It walks the top-level fields of every record in lock step (one numpy pass per field position,
not per record), picks the header fields by name, and turns the payload's fields into JSON text
and a map with Arrow compute kernels. No Python object is made per record. Records it cannot
take (nested payload values, text that needs escaping, ...) are marked in the ``bad`` mask that
:func:`decode_columns` returns, for :mod:`pipeline.decode` to give to the full decoder.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.rows import HEADER_INTS, HEADER_TEXT

__all__ = ["PAD", "decode_columns"]

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


PAD = 8  # zero bytes after the data, so fixed-width reads never run off the end


def _word(buf: np.ndarray, pos: np.ndarray, width: int, dtype: str) -> np.ndarray:
    """The ``width``-byte big-endian words at ``pos``: one gather from a byte-strided view."""
    words = np.ndarray((len(buf) - width + 1,), dtype=dtype, buffer=buf, strides=(1,))
    result: np.ndarray = words[np.minimum(pos, len(buf) - PAD)]
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


def decode_columns(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> tuple[dict[str, pa.Array], np.ndarray]:
    """The columns of the bodies ``buf[starts[i]:starts[i]+lengths[i]]`` and the ``bad`` mask of
    the records the full decoder must take instead.

    ``buf`` must end with :data:`PAD` zero bytes (fixed-width reads never run off the end).
    """
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
