"""The columns of the ``busjournal`` data source, as Arrow and as Spark see them.

One row per journal record: see :mod:`pipeline.decode` for what each column holds. The JVM
reader (``pipeline/jvm/.../Schema.java``) and the C accelerator (``bus/native/_journalscan.c``)
give the same columns in the same order.
"""

from __future__ import annotations

import pyarrow as pa

from pipeline.rows import HEADER_INTS, HEADER_TEXT

__all__ = ["ARROW_SCHEMA", "SPARK_SCHEMA"]

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
