"""An event's bytes with its journal sequence number (bus/broker/replay.py ``with_seq``)."""

from __future__ import annotations

import pytest

from bus.broker.replay import with_seq
from bus.frame.enums import Encoding, FieldType
from bus.frame.frame import Typed
from bus.message.message import Message, decode_message, encode_message

pytestmark = pytest.mark.loops  # busgate runs on uvloop: each test on both loops


@pytest.mark.parametrize("seq", [0, 1, 255, 2**32, 2**64 - 1])
@pytest.mark.parametrize("enc", [Encoding.FRAM, Encoding.JSON])
def test_seq_and_the_replayed_pattern_read_back_as_fields(enc: Encoding, seq: int) -> None:
    event = Message.event("sensor.temp", {"c": 21})
    event.enc = enc
    raw = encode_message(event)
    for replay in (None, "sensor.*"):
        message = decode_message(with_seq(raw, 0 if enc is Encoding.FRAM else 1, seq, replay))
        assert message.frame["SEQ"] == seq
        assert message.frame.get("RPL") == replay
        assert message.payload["c"] == 21 and message.grp == "sensor.temp"
        if enc is Encoding.FRAM:  # a U64, as the frame's own encoder writes it
            stamped = Message(decode_message(raw).frame)
            stamped.frame.add("SEQ", Typed(FieldType.U64, seq))
            if replay is not None:
                stamped.frame.add("RPL", replay)
            assert with_seq(raw, 0, seq, replay) == encode_message(stamped)
