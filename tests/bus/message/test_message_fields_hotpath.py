"""bus/native/_hotpath_fields.c: a message's header fields read by the C ``__get__`` are what the
pure-Python reference in bus/message/message_fields.py reads, for messages on the wire and not."""

from __future__ import annotations

from typing import Any

import pytest

from bus.accelerators import accelerator
from bus.frame.enums import Encoding
from bus.message import message_fields
from bus.message.message import Message, encode_message, read_message

_hotpath = accelerator("bus.native._hotpath")
pytestmark = pytest.mark.skipif(_hotpath is None, reason="the accelerator is not in use")

FIELDS = ("mid", "rid", "grp", "rpy", "typ", "msg", "src", "tgt", "clr", "trc", "rcd", "xpy",
          "flg", "pri", "seq", "rpl")  # fmt: skip


def _messages() -> list[Message]:
    request = Message.request("demo", "echo", {"x": 1}, reply_to="_INBOX.a", trace=None)
    json_request = Message.request("demo", "echo", {"x": 1}, reply_to="_INBOX.b", enc="JSON")
    ack = request.ack({"y": 2}, more=True)
    ack.src, ack.rcd, ack.pri = "office-1", 70000, 3
    nak = request.nak("no", 404)
    event = Message.event("news", {"n": 1})
    event.seq, event.xpy = 2**40, 12
    built = [request, json_request, ack, nak, event]
    # the same messages as received: a Header read from the bytes answers most fields
    return built + [read_message(encode_message(m)) for m in built]


def _reference(descriptor: Any, message: Message) -> Any:
    # The pure-Python __get__, as BUSGATE_PURE_PYTHON runs it.
    head = message._head
    if head is not None and descriptor.index >= 0:
        return head[descriptor.index]
    return descriptor._read(message)


@pytest.mark.parametrize("message", _messages(), ids=lambda m: f"{m.typ}-{m._head is not None}")
def test_every_field_reads_as_the_reference_reads_it(message: Message) -> None:
    assert "__get__" not in message_fields._Text.__dict__  # HeadField.__get__ (C) answers
    for name in FIELDS:
        descriptor = Message.__dict__.get(name) or message_fields.HeaderFields.__dict__[name]
        assert getattr(message, name) == _reference(descriptor, message), name
    if message._head is not None:
        assert message.grp == message._head.grp and message.mid == message._head.mid


def test_a_field_set_is_read_back_and_the_class_gives_the_descriptor() -> None:
    message = read_message(encode_message(Message.request("demo", "echo", enc=Encoding.JSON)))
    message.grp = "other"  # written to the frame: the Header no longer answers
    assert message.grp == "other" and message._head is None
    message.rcd = None
    assert message.rcd is None
    assert isinstance(message_fields.HeaderFields.__dict__["grp"], _hotpath.HeadField)
    assert message_fields.HeaderFields.grp is message_fields.HeaderFields.__dict__["grp"]


def test_a_head_field_made_without_an_index_reads_the_frame() -> None:
    class Bare(_hotpath.HeadField):  # type: ignore[misc, name-defined]
        def _read(self, obj: object) -> str:
            return "from the frame"

    class Holder:
        _head = ("not", "consulted")
        field = Bare()

    assert Bare().index == -1 and Holder().field == "from the frame"
