"""Message ids (bus/message/ids.py): random version-4 UUIDs, unique, and not shared with a fork;
the trace context's random ids from the same pool."""

from __future__ import annotations

import os
import uuid

import pytest

from bus.frame.frame import accelerator
from bus.message import ids
from bus.message import trace as bus_trace
from bus.message.ids import format_id, new_id, random_hex


def test_an_id_is_a_version_4_uuid_in_its_text_form() -> None:
    for _ in range(1000):
        text = new_id()
        parsed = uuid.UUID(text)
        assert str(parsed) == text and parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_ids_do_not_repeat_across_pool_refills() -> None:
    ids = {new_id() for _ in range(20_000)}  # 80 refills of the 4 KiB pool
    assert len(ids) == 20_000


def test_a_forked_child_does_not_reuse_the_parents_ids() -> None:
    new_id()  # the pool holds unused bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, "\n".join(new_id() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = set(os.read(read, 10_000).decode().split("\n"))
    os.close(read)
    parent = {new_id() for _ in range(10)}
    assert len(child) == 10 and not child & parent


def test_the_accelerators_text_is_the_references() -> None:
    hotpath = accelerator("bus.native._hotpath")
    if hotpath is None:
        pytest.skip("the C accelerator was not built")
    for pos in range(0, 64 - 16 + 1):
        for _ in range(50):
            block = os.urandom(64)
            assert hotpath.format_id(block, pos) == format_id(block, pos)
    every_nibble = bytes(range(256))
    for pos in range(0, 256 - 16 + 1):
        assert hotpath.format_id(every_nibble, pos) == format_id(every_nibble, pos)
    with pytest.raises(ValueError):
        hotpath.format_id(b"x" * 20, 5)  # fewer than 16 bytes left


def test_random_hex_is_hex_of_its_size_unique_and_never_all_zeros(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans = [random_hex(8) for _ in range(5000)]  # across pool refills, between message ids
    new_id()
    assert all(len(span) == 16 and int(span, 16) > 0 for span in spans)
    assert len(set(spans)) == 5000
    assert len(random_hex(16)) == 32
    monkeypatch.setattr(ids._pool, "data", bytes(64))  # a pool of zeros: still a valid id
    monkeypatch.setattr(ids._pool, "pos", 0)
    assert random_hex(8) == "0000000000000001"


def test_trace_ids_are_valid_traceparents() -> None:
    for _ in range(200):
        made = bus_trace.new()
        assert bus_trace.parse(made) == made
        child = bus_trace.child(made)
        assert bus_trace.parse(child) == child
        assert child[:36] == made[:36] and child[52:] == made[52:] and child != made
