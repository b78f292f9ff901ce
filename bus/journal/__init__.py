"""The journal: an append-only record of the messages the broker routes (PROTOCOL.md section 8).

A journal is a directory of *segment* files ``journal-00000001.seg``, ``journal-00000002.seg``, ...
Each segment starts with a header and holds records; each record holds one message in its
binary wire form (the bytes the broker routed), the time it was routed, its *sequence number*
(monotonic per directory, across restarts) and a CRC-32. A closed segment has an index file
beside it (``journal-00000001.idx``) with its time and sequence ranges, per block of records.

Layers (each module under ~500 lines):

- :mod:`bus.journal.format`: the sans-I/O codec: segment headers, records (v1 and v2), and
  :func:`scan_records`, which verifies records and resynchronises over damage;
- :mod:`bus.journal.index`: index files and the block tracker the writer feeds;
- :mod:`bus.journal.fields`: header fields without a full decode, and :class:`JournalFilter`;
- :mod:`bus.journal.segments`: files: names, headers and indexes, scanning in chunks;
- :mod:`bus.journal.reader`: :class:`JournalReader` (by time and by sequence number),
  :func:`read_segment`, :func:`verify_journal`;
- :mod:`bus.journal.writer`: :class:`Journal`, the writer (``append(raw, now) -> seq``), with
  :mod:`bus.journal.recovery` (reopening after a crash: the last number, a torn tail cut) and
  :mod:`bus.journal.reservation` (numbers reserved on disk before they are handed out, so none
  is used twice after a power loss) and :mod:`bus.journal.pending` (the records appended and
  not yet written, written with one ``write()`` per batch, and the window the broker's C
  confirm run appends within).

Damage never makes a reader fail: each damaged span is skipped and reported as a
:class:`Damage` naming the file and offset, and reading goes on with the next intact record.
"""

from bus.journal.fields import JournalFilter, header_fields
from bus.journal.format import (
    CURRENT_VERSION,
    DEFAULT_MAX_RECORD,
    RECORD_HEADER_SIZE,
    RECORD_HEADER_SIZE_V1,
    RECORD_MAGIC,
    RECORD_MAGIC_V1,
    SEGMENT_HEADER_SIZE,
    SEGMENT_HEADER_SIZE_V1,
    SEGMENT_MAGIC,
    SEGMENT_MAGIC_V1,
    Record,
    ScanResult,
    SegmentHeader,
    decode_record,
    encode_record,
    encode_segment_header,
    parse_segment_header,
    record_header_size,
    scan_records,
)
from bus.journal.index import (
    DEFAULT_INDEX_INTERVAL,
    Block,
    SegmentIndex,
    decode_index,
    encode_index,
)
from bus.journal.reader import JournalReader, VerifyReport, read_segment, verify_journal
from bus.journal.segments import (
    Damage,
    SegmentInfo,
    TornTail,
    closed_segments,
    index_path,
    list_segments,
    read_index,
    scan_file,
    segment_info,
    segment_name,
    segment_number,
)
from bus.journal.writer import (
    DEFAULT_FSYNC_INTERVAL,
    DEFAULT_MAX_SEGMENT_AGE,
    DEFAULT_MAX_SEGMENT_BYTES,
    FsyncPolicy,
    Journal,
)

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_FSYNC_INTERVAL",
    "DEFAULT_INDEX_INTERVAL",
    "DEFAULT_MAX_RECORD",
    "DEFAULT_MAX_SEGMENT_AGE",
    "DEFAULT_MAX_SEGMENT_BYTES",
    "RECORD_HEADER_SIZE",
    "RECORD_HEADER_SIZE_V1",
    "RECORD_MAGIC",
    "RECORD_MAGIC_V1",
    "SEGMENT_HEADER_SIZE",
    "SEGMENT_HEADER_SIZE_V1",
    "SEGMENT_MAGIC",
    "SEGMENT_MAGIC_V1",
    "Block",
    "Damage",
    "FsyncPolicy",
    "Journal",
    "JournalFilter",
    "JournalReader",
    "Record",
    "ScanResult",
    "SegmentHeader",
    "SegmentIndex",
    "SegmentInfo",
    "TornTail",
    "VerifyReport",
    "closed_segments",
    "decode_index",
    "decode_record",
    "encode_index",
    "encode_record",
    "encode_segment_header",
    "header_fields",
    "index_path",
    "list_segments",
    "parse_segment_header",
    "read_index",
    "read_segment",
    "record_header_size",
    "scan_file",
    "scan_records",
    "segment_info",
    "segment_name",
    "segment_number",
    "verify_journal",
]
