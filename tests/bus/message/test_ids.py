"""Message ids (bus/message/ids.py): random version-4 UUIDs, unique, and not shared with a fork."""

from __future__ import annotations

import os
import uuid

import pytest

from bus.frame.frame import accelerator
from bus.message.ids import format_id, new_id


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
