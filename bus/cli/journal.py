"""``busgate journal cat|tail|replay``: read a journal, print it as JSON lines, replay it.

::

    busgate journal cat  DIR [--since T] [--until T] [--since-seq N] [--until-seq N]
                                                          every record, one JSON object a line
    busgate journal tail DIR [-n 10] [--follow]           the last records (and new ones)
    busgate journal verify DIR                            every damaged span; exit 1 if any
    busgate journal compact DIR                           closed segments as Parquet beside them
    busgate journal replay DIR --since T [--until T] [--bus URL] [--type RQS ...] [--group PAT]
    busgate journal record DIR --bus nats://HOST:4222 [--group PAT ...] [--type RQS ...]
                           [--name NAME] [--lease S] [--since SEQ|TIME] [--fsync POLICY]
    busgate journal ship DIR hdfs://NAMENODE/PATH [--follow]   closed segments to a Hadoop FS

A line is ``{"ts": "...Z", "seq": N, "segment": NAME, "offset": N, "size": N, "message": {...}}``
where ``message`` is the whole message in Kestrel's JSON mapping (``bus.frame.jsonmap.to_json``) and
``seq`` the record's sequence number (``null`` in v1 segments).
Times (``T``) are ISO 8601 (``2026-11-22T14:00:00``, UTC unless an offset is given), epoch
seconds, or a duration before now (``90s``, ``15m``, ``2h``, ``1d``).

Damage never stops a reader: ``cat`` and ``tail`` print every intact record, name each damaged
span on stderr (file, offset, bytes skipped, records lost) and then exit 1; ``verify`` lists
every damaged span and torn tail. A torn tail alone (a crash mid-write) is reported and exits 0.
Exit codes: 0 success, 1 damaged journal or bus failure, 2 bad input.
"""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
import sys
import time
from collections import deque
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bus.errors import BusError, JournalError
from bus.journal import (
    Damage,
    FsyncPolicy,
    JournalReader,
    Record,
    TornTail,
    header_fields,
    list_segments,
    read_segment,
    segment_info,
    verify_journal,
)
from bus.journal.times import parse_time

__all__ = ["parse_time", "record_json", "register"]


def record_json(record: Record) -> str:
    """One record as a JSON line (without the newline).

    Args:
        record: the record.

    Returns:
        ``{"ts", "seq", "segment", "offset", "size", "message"}`` as compact JSON.
    """
    from bus.frame.jsonmap import to_json
    from bus.message.message import decode_message

    stamp = datetime.fromtimestamp(record.ts_us // 1_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    head = orjson.dumps(
        {
            "ts": f"{stamp}.{record.ts_us % 1_000_000:06d}Z",
            "seq": record.seq,
            "segment": Path(record.path).name,
            "offset": record.offset,
            "size": len(record.raw),
        }
    ).decode()
    return f'{head[:-1]},"message":{to_json(decode_message(record.raw).frame)}}}'


def _times(args: argparse.Namespace) -> tuple[float | None, float | None]:
    now = time.time()
    since = parse_time(args.since, now) if getattr(args, "since", None) else None
    until = parse_time(args.until, now) if getattr(args, "until", None) else None
    return since, until


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")


def _seqs(args: argparse.Namespace) -> tuple[int | None, int | None]:
    return getattr(args, "since_seq", None), getattr(args, "until_seq", None)


def _cmd_cat(args: argparse.Namespace) -> int:
    since, until = _times(args)
    since_seq, until_seq = _seqs(args)
    reader = JournalReader(args.directory)
    for record in reader.records(since, until, since_seq=since_seq, until_seq=until_seq):
        _print(record_json(record))
    return _report(reader.torn_tails, reader.damage)


def _report(torn_tails: list[TornTail], damage: list[Damage]) -> int:
    """Name torn tails and damaged spans on stderr; 1 when anything was damaged."""
    sys.stdout.flush()
    for torn in torn_tails:
        print(
            f"busgate journal: torn tail in {torn.path} at offset {torn.offset} "
            f"({torn.size} bytes of an incomplete record skipped)",
            file=sys.stderr,
        )
    for found in damage:
        print(f"busgate journal: damaged: {found}", file=sys.stderr)
    return 1 if damage else 0


def _follow(
    directory: Path, seen: dict[str, int], interval: float, damage: list[Damage]
) -> Iterator[Record]:
    """Poll for records appended after what ``seen`` (segment -> next offset) has covered.

    The newest segment may be being written: an incomplete record at its end is waited for,
    never looked past; once a newer segment exists, the older one is read to its end.
    """
    while True:
        segments = list_segments(directory)
        for position, seg in enumerate(segments):
            newest = position == len(segments) - 1
            info = segment_info(seg)
            start = seen.get(str(seg), info.first_record)
            if start >= info.size:
                continue
            found: list[Damage] = []
            for record in read_segment(
                seg, start=start, final=not newest, newest=newest, damage=found, info=info
            ):
                seen[str(seg)] = record.end
                yield record
            for item in found:
                if item.offset >= start and item not in damage:
                    damage.append(item)
                    print(f"busgate journal: damaged: {item}", file=sys.stderr)
                    seen[str(seg)] = max(seen.get(str(seg), 0), item.offset + item.size)
        time.sleep(interval)


def _cmd_tail(args: argparse.Namespace) -> int:
    reader = JournalReader(args.directory)
    last: deque[Record] = deque(maxlen=max(args.lines, 0) or None)
    seen: dict[str, int] = {}
    for record in reader.records():
        seen[record.path] = record.end
        if args.lines > 0:
            last.append(record)
    for record in last:
        _print(record_json(record))
    status = _report(reader.torn_tails, reader.damage)
    sys.stdout.flush()
    if args.follow:
        for found in reader.damage:
            seen[found.path] = max(seen.get(found.path, 0), found.offset + found.size)
        try:
            for record in _follow(Path(args.directory), seen, args.interval, list(reader.damage)):
                _print(record_json(record))
                sys.stdout.flush()
        except KeyboardInterrupt:
            return status
    return status


def _cmd_verify(args: argparse.Namespace) -> int:
    report = verify_journal(args.directory)
    for found in report.damage:
        _print(f"damaged: {found}")
    for torn in report.torn_tails:
        _print(f"torn tail: {torn.path} at offset {torn.offset} ({torn.size} bytes)")
    lost = sum(d.missing or 0 for d in report.damage)
    skipped = sum(d.size for d in report.damage)
    seqs = "" if report.first_seq is None else f", seq {report.first_seq}..{report.last_seq}"
    _print(
        f"{report.segments} segments, {report.records} intact records{seqs}; "
        f"{len(report.damage)} damaged spans, {skipped} bytes skipped, "
        f"{lost} records known lost, {len(report.torn_tails)} torn tails"
    )
    return 0 if report.ok else 1


def _cmd_compact(args: argparse.Namespace) -> int:
    """Write (and check) the Parquet form of closed segments (needs the pipeline extra)."""
    try:
        from pipeline.compact import compact
    except ImportError as exc:  # pragma: no cover - without pyarrow
        raise ValueError(f"compact needs the pipeline extra (pyarrow): {exc}") from exc
    for done in compact(args.directory):
        state = "written and checked" if done.written else "already there"
        _print(f"{done.segment.name}: {done.records} records -> {done.parquet.name} ({state})")
    return 0


def _selected(record: Record, types: list[str] | None, group: str | None) -> bool:
    if not types and not group:
        return True
    fields = header_fields(record.raw, ("GRP", "TYP"))
    if types and fields.get("TYP") not in types:
        return False
    grp = fields.get("GRP")
    return not group or (isinstance(grp, str) and fnmatch.fnmatchcase(grp, group))


async def _replay(args: argparse.Namespace, since: float | None, until: float | None) -> int:
    from bus.asyncio.client import connect
    from bus.message.message import decode_message

    client = await connect(args.bus, name=args.name, secret=args.secret)
    sent = 0
    reader = JournalReader(args.directory)
    try:
        previous: float | None = None
        for record in reader.records(since, until):
            if not _selected(record, args.type, args.group):
                continue
            if args.speed > 0 and previous is not None:
                await asyncio.sleep(max(0.0, (record.ts - previous) / args.speed))
            previous = record.ts
            message = decode_message(record.raw)
            for name in ("SEQ", "RPL"):  # positions in the journal's source, not on this bus
                message.frame.remove(name)
            await client.send(message)
            sent += 1
    finally:
        await client.close()
    print(f"busgate journal: replayed {sent} messages", file=sys.stderr)
    return _report(reader.torn_tails, reader.damage)


def _cmd_replay(args: argparse.Namespace) -> int:
    since, until = _times(args)
    return asyncio.run(_replay(args, since, until))


def _cmd_record(args: argparse.Namespace) -> int:
    """Record from NATS (the broker records itself: ``busgate broker --journal DIR``)."""
    import signal

    from bus.journal import FsyncPolicy, Journal, JournalFilter

    if not args.bus.startswith("nats://"):
        raise ValueError("record needs --bus nats://...; a broker records with --journal DIR")
    from bus.asyncio.nats_journal import RecorderOptions, record_journal

    groups = tuple(args.group) if args.group else None
    types = frozenset(args.type) if args.type else None
    policy = FsyncPolicy(args.fsync)
    options = RecorderOptions(name=args.journal_name, lease_ttl=args.lease, since=_since(args))

    def open_journal() -> Journal:
        return Journal(
            args.directory,
            filter=JournalFilter(groups=groups, types=types),
            fsync=policy,
            fsync_interval=args.fsync_interval_ms / 1000,
            group_commit=True,  # under always: one fsync per batch, before its acks
        )

    async def run() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        return await record_journal(
            args.bus,
            args.directory,
            open_journal,
            stop,
            options,
            say=lambda line: print(line, flush=True),
        )

    recorded = asyncio.run(run())
    print(f"busgate journal: recorded {recorded} messages", file=sys.stderr)
    return 0


def _since(args: argparse.Namespace) -> int | float | None:
    """``--since``: a stream sequence (digits) or a time."""
    text = args.since
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    return float(parse_time(text, time.time()))


def _guard(func: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(func(args))
        except ValueError as exc:
            if isinstance(exc, BusError):
                print(f"busgate journal: {exc}", file=sys.stderr)
                return 1
            print(f"busgate journal: bad input: {exc}", file=sys.stderr)
            return 2
        except (JournalError, BusError) as exc:
            print(f"busgate journal: {exc}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            return 0

    return run


def register(subparsers: Any) -> None:
    """Add ``busgate journal`` and its subcommands.

    Args:
        subparsers: the top-level ``add_subparsers()`` object.
    """
    parser = subparsers.add_parser("journal", help="read, tail and replay the broker's journal")
    sub = parser.add_subparsers(dest="journal_command", metavar="ACTION", required=True)

    cat = sub.add_parser("cat", help="print records as JSON lines")
    cat.add_argument("directory", help="the journal directory (or one segment file)")
    cat.add_argument("--since", help="first time (ISO 8601, epoch seconds, or 15m/2h/1d ago)")
    cat.add_argument("--until", help="end time, excluded")
    cat.add_argument("--since-seq", type=int, help="first sequence number")
    cat.add_argument("--until-seq", type=int, help="end sequence number, excluded")
    cat.set_defaults(func=_guard(_cmd_cat))

    tail = sub.add_parser("tail", help="print the last records, and new ones with --follow")
    tail.add_argument("directory")
    tail.add_argument("-n", "--lines", type=int, default=10, help="how many (default 10)")
    tail.add_argument("-f", "--follow", action="store_true", help="keep printing new records")
    tail.add_argument("--interval", type=float, default=0.5, help="poll interval, s")
    tail.set_defaults(func=_guard(_cmd_tail))

    verify = sub.add_parser("verify", help="check every record; list damaged spans (exit 1)")
    verify.add_argument("directory", help="the journal directory (or one segment file)")
    verify.set_defaults(func=_guard(_cmd_verify))

    compact = sub.add_parser(
        "compact", help="write closed segments as Parquet beside them (read instead of them)"
    )
    compact.add_argument("directory", help="the journal directory")
    compact.set_defaults(func=_guard(_cmd_compact))

    replay = sub.add_parser("replay", help="re-publish a time range to the bus")
    replay.add_argument("directory")
    replay.add_argument("--since", required=True, help="first time")
    replay.add_argument("--until", help="end time, excluded (default: now)")
    replay.add_argument("--bus", default="bus://127.0.0.1:4000", help="bus URL")
    replay.add_argument("--name", help="post office name")
    replay.add_argument("--secret", help="post office secret")
    replay.add_argument("--type", action="append", help="only this TYP (repeatable)")
    replay.add_argument("--group", help="only groups matching this shell pattern")
    replay.add_argument(
        "--speed", type=float, default=0.0, help="1 = original pace, 0 = as fast as possible"
    )
    replay.set_defaults(func=_guard(_cmd_replay))

    record = sub.add_parser(
        "record",
        help="record the bus on NATS: events from JetStream exactly once, the rest as it passes",
    )
    record.add_argument("directory")
    record.add_argument("--bus", required=True, help="nats://host:4222 (or several: a,b,c)")
    record.add_argument("--group", action="append", help="only GRP matching (repeatable)")
    record.add_argument("--type", action="append", help="only this TYP (repeatable)")
    record.add_argument(
        "--name",
        dest="journal_name",
        default="journal",
        type=_token,
        help="the journal's name: recorders of one name share a lease, one records, the "
        "others stand by (default %(default)s)",
    )
    record.add_argument(
        "--lease",
        type=_seconds,
        default=5.0,
        help="seconds before a standby takes over from a recorder that died (default 5; "
        "the lease bucket keeps the value it was made with)",
    )
    record.add_argument(
        "--since",
        metavar="SEQ|TIME",
        help="where a journal without stream events begins: after stream sequence SEQ, or "
        "at a time (default: the oldest event the stream holds)",
    )
    record.add_argument(
        "--fsync", choices=[p.value for p in FsyncPolicy], default="interval",
        help="when records go to disk before JetStream is told (default interval)",
    )  # fmt: skip
    record.add_argument(
        "--fsync-interval-ms", type=int, default=1000, help="under interval (default 1000)"
    )
    record.set_defaults(func=_guard(_cmd_record))

    from bus.cli.journal_ship import register_ship

    register_ship(sub)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1.0 <= value <= 3600.0:
        raise argparse.ArgumentTypeError(f"{text!r}: seconds from 1 to 3600")
    return value


def _token(text: str) -> str:
    if not text or not all(c.isalnum() or c in "_-" for c in text) or not text.isascii():
        raise argparse.ArgumentTypeError(f"{text!r}: one token, [A-Za-z0-9_-]")
    return text
