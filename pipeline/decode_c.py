"""The C accelerator of :mod:`pipeline.decode`: ``bus.native._journalscan`` and its Arrow glue.

When ``bus.native._journalscan`` was built at install time (like ``bus.native._speedups``), it fills
Arrow buffers directly; this module loads it (unless ``BUSGATE_PURE_PYTHON=1``) and turns its
buffers into the Arrow columns of :data:`pipeline.schema.ARROW_SCHEMA`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from bus.accelerators import accelerator
from pipeline.rows import HEADER_INTS, HEADER_TEXT
from pipeline.schema import ARROW_SCHEMA

__all__ = ["decode_columns", "load_accelerator"]


def load_accelerator() -> Any:
    """``bus.native._journalscan`` when it was built and not refused by ``BUSGATE_PURE_PYTHON``."""
    return accelerator("bus.native._journalscan")


# the C column order: HEADER_TEXT without ENC (bus/native/_journalscan.c WANTED)
_C_TEXT = tuple(name for name in HEADER_TEXT if name != "ENC")
_MAP_TYPE = ARROW_SCHEMA.field("payload_map").type


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


def decode_columns(
    accel: Any, data: bytes | memoryview, starts: np.ndarray, lengths: np.ndarray
) -> tuple[dict[str, pa.Array], np.ndarray] | None:
    """The columns and ``bad`` mask of the C accelerator ``accel`` (from :func:`load_accelerator`)
    for the bodies ``data[starts[i]:starts[i]+lengths[i]]``; ``None`` when a column would pass
    2 GiB."""
    out = accel.decode(data, starts, lengths)
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
