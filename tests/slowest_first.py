"""The order ``make test`` hands test files to its workers: the longest first.

``make test`` runs ``--dist loadfile``: pytest-xdist gives each worker a whole file at a time, in
the order of the collection, to whichever worker is free. xdist's own order (most tests first)
put the files of few but long tests last: Spark, packaging, the pure-Python reruns; one worker
ran them for minutes while the other had finished. Longest first, the short files fill in at
the end and the two workers end within about the length of the last short file.

``make test`` passes ``--no-loadscope-reorder`` so that xdist keeps this order. A file's cost is
:data:`SECONDS` (its wall time in a ``make test`` on two loaded cores; a rough figure, only the
order matters); a file not in the table costs :data:`UNLISTED_SLOW` when any of its tests is
marked ``slow``, else :data:`PER_TEST` per test. Within a file the order is untouched.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

__all__ = ["PER_TEST", "SECONDS", "UNLISTED_SLOW", "order_files", "slowest_first"]

#: Seconds per file in a ``make test`` on two cores (2026-11-29; the longest tests from its
#: ``--durations``, the rest from a run on a loaded machine, scaled): a stale figure only costs
#: some balance. Files of a few seconds are left to :data:`PER_TEST`.
SECONDS: dict[str, float] = {
    "tests/test_package.py": 220,
    "tests/pipeline/test_standalone_cluster.py": 210,
    "tests/bus/frame/test_codec_pure.py": 175,
    "tests/pipeline/test_connect.py": 150,
    "tests/pipeline/test_run_spark.py": 140,
    "tests/bus/frame/test_codec_fuzz.py": 70,
    "tests/pipeline/test_stream_restart.py": 100,
    "tests/pipeline/test_report_cli.py": 75,
    "tests/gateway/websocket/test_ws.py": 70,
    "tests/pipeline/test_source.py": 60,
    "tests/bus/asyncio/test_nats_journal.py": 60,
    "tests/test_cluster_failover.py": 50,
    "tests/bus/test_cli_client.py": 45,
    "tests/pipeline/test_jvm_files.py": 40,
    "tests/web/test_console.py": 40,
    "tests/pipeline/test_session_warnings.py": 35,
    "tests/pipeline/test_ship.py": 35,
    "tests/bus/asyncio/test_durable.py": 35,
    "tests/test_topology.py": 35,
    "tests/bus/message/test_message_binary.py": 30,
    "tests/bus/message/test_header.py": 28,
    "tests/pipeline/test_decode.py": 25,
    "tests/gateway/routes/test_streams.py": 25,
    "tests/gateway/routes/test_docs_page.py": 25,
    "tests/bus/test_cli_reply.py": 25,
    "tests/bus/asyncio/test_receipts.py": 25,
    "tests/bus/asyncio/test_nats.py": 25,
    "tests/clients/test_js.py": 20,
}

#: The cost of a file not in the table that holds a test marked ``slow``.
UNLISTED_SLOW = 30.0
#: The cost per test of any other file not in the table.
PER_TEST = 0.1


def order_files(files: Iterable[tuple[str, int, bool]]) -> list[str]:
    """File paths, longest first: ``files`` are (path, number of tests, any marked slow), in
    the collection's order, which breaks ties."""
    listed = list(files)

    def cost(entry: tuple[int, tuple[str, int, bool]]) -> tuple[float, int]:
        index, (path, tests, slow) = entry
        seconds = SECONDS.get(path)
        if seconds is None:
            seconds = UNLISTED_SLOW if slow else PER_TEST * tests
        return -seconds, index

    return [path for _, (path, _, _) in sorted(enumerate(listed), key=cost)]


def slowest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: whole files, longest first (see the module doc)."""
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    files = [
        (path, len(tests), any(test.get_closest_marker("slow") for test in tests))
        for path, tests in by_file.items()
    ]
    items[:] = [item for path in order_files(files) for item in by_file[path]]
