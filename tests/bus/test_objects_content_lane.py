"""The Object System's content lane (bus/objects/content_lane.py, bus/native/_hotpath_objects.c).

The lane must be invisible: the same bytes sent to a server with it and to a server without it
(the pure-Python path, its reference) reach every receiver as the same objects and the same
bytes, in the same order, and a bad object is refused the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Hashable
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bus.objects.codec import BusinessObject, ObjectDecoder
from bus.objects.content_lane import lane_for
from bus.objects.router import Router
from bus.objects.tcp import ObjectServer

pytestmark = pytest.mark.skipif(
    lane_for(Router()) is None, reason="no C accelerator: every object takes the general path"
)


class Recorder:
    """A local peer that keeps what it was sent."""

    def __init__(self, name: str, log: list[tuple[str, bytes, Any, bytes]]) -> None:
        self.name = name
        self.log = log

    def send(self, data: bytes, obj: BusinessObject) -> None:
        self.log.append((self.name, data, obj.metadata, obj.payload))

    def close(self, reason: str) -> None:
        self.log.append((self.name, b"close", reason, b""))


SUBSCRIPTIONS = {
    "sender": {"routing-id": "S", "receive-mode": "all"},  # echo: it gets its own objects
    "everything": {"routing-id": "R1", "receive-mode": "no_echo"},
    "typed": {"routing-id": "R2", "types": ["t1", "bench/tick"]},
}


def _run(chunks: list[bytes], *, lane: bool) -> tuple[list[Any], bool, int]:
    """Feed ``chunks`` from the sender to a server (with or without the lane): what every
    peer received, whether the sender was refused, and how many objects the lane took."""
    server = ObjectServer(Router(routing_id="srv"))
    if not lane:
        server._lane = None
    log: list[tuple[str, bytes, Any, bytes]] = []
    conns: dict[str, Hashable] = {}
    for name, subscription in SUBSCRIPTIONS.items():
        conns[name] = conn = server.attach(Recorder(name, log))
        server.receive(conn, BusinessObject({"event": "routing/subscribe", **subscription}, b""))
    log.clear()  # the subscriptions' replies and notices: not what is compared
    taken = 0
    if server._lane is not None:
        real = server._lane._run

        def counting(*args: Any) -> tuple[list[Any], int]:
            nonlocal taken
            items, end = real(*args)
            taken += len(items)
            return items, end

        server._lane._run = counting
    decoder = ObjectDecoder(max_metadata=2048, max_payload=4096)
    refused = False
    for chunk in chunks:
        decoder.receive_data(chunk)
        if not server._drain(conns["sender"], decoder):
            refused = True
            break
    return log, refused, taken


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _comparable(log: list[tuple[str, bytes, Any, bytes]]) -> list[tuple[str, bytes, bytes, bytes]]:
    # The objects the server writes itself (error replies, notices) carry fresh UUIDs.
    return [
        (name, _UUID.sub(b"<id>", data), _UUID.sub(b"<id>", repr(meta).encode()), payload)
        for name, data, meta, payload in log
    ]


def _same(chunks: list[bytes]) -> int:
    with_lane, refused, taken = _run(chunks, lane=True)
    reference, refused_too, _ = _run(chunks, lane=False)
    assert _comparable(with_lane) == _comparable(reference)
    assert refused == refused_too
    return taken


PAYLOAD = b'{"n":1,"text":"hello"}'


def _object(metadata: bytes, payload: bytes = b"") -> bytes:
    return metadata + b"\0" + payload


@pytest.mark.parametrize(
    ("metadata", "payload", "lane_takes"),
    [
        # what the lane is for: json.dumps' spaces, orjson's compact form, a payload
        (json.dumps({"type": "bench/tick", "size": len(PAYLOAD)}).encode(), PAYLOAD, True),
        (b'{"type":"t1","size":22}', PAYLOAD, True),
        (b"{}", b"", True),
        (b' {\n"type" :\t"t1" } ', b"", True),
        (b'{"type":"t1","id":"mine"}', b"", True),  # its own id kept
        (b'{"id":null,"type":"t1"}', b"", True),  # null: given one, in place
        (b'{"type":"t1","to":"R1"}', b"", True),
        (b'{"type":"t1","to":"nobody"}', b"", True),
        (b'{"type":null,"size":null}', b"", True),
        (b'{"a":[1,-2,{"b":[true,false,null]}],"c":{},"d":[]}', b"", True),
        ('{"text":"héllo ✓ 😀"}'.encode(), b"", True),
        (b'{"n":123456789012345678}', b"", True),
        # the general path's: the lane leaves them, the reference decides
        (b'{"text":"a\\"b"}', b"", False),  # an escape
        (b'{"text":"\\u00e9"}', b"", False),
        (b'{"x":1.5}', b"", False),  # a float
        (b'{"x":1e3}', b"", False),
        (b'{"x":-0}', b"", False),
        (b'{"n":1234567890123456789}', b"", False),  # 19 digits
        (b'{"a":1,"a":2}', b"", False),  # a name twice
        (b'{"type":"t1","size":0}', b"", False),  # size 0: the router drops it
        (b'{"type":"t1","id":""}', b"", False),
        (b'{"type":"t1","id":7}', b"", False),
        (b'{"type":7}', b"", False),
        (b'{"to":["R1","R2"]}', b"", False),
        (b'{"natures":["x"]}', b"", False),
        (b'{"route":["x"]}', b"", False),
        (b'{"event":"ping","id":"p1"}', b"", False),
        (b'{"event":"services/discovery","id":"d1"}', b"", False),
        ('{"bad":"\udcff"}'.encode("utf-8", "surrogatepass"), b"", False),
        (b'{"bad":"\xff"}', b"", False),  # not UTF-8: refused by the reference
        (b"[1,2]", b"", False),  # not an object: refused
        (b'{"size":-1}', b"", False),
        (b'{"size":true}', b"", False),
        (b'{"size":99999}', b"", False),  # over max_payload: refused
        (b'{"x":1}garbage', b"", False),
        (b'{"x":tru}', b"", False),
        (b'{"x":' + b"[" * 40 + b"]" * 40 + b"}", b"", False),  # deeper than the lane reads
    ],
)
def test_each_case_reaches_every_receiver_as_the_reference_sends_it(
    metadata: bytes, payload: bytes, lane_takes: bool
) -> None:
    before, after = _object(b'{"type":"t1","n":1}'), _object(b'{"type":"t1","n":2}')
    stream = before + _object(metadata, payload) + after
    taken = _same([stream])
    # the objects around it take the lane (unless the case got the sender refused)
    assert taken >= (3 if lane_takes else 1)
    if not lane_takes:
        assert taken <= 2


def test_the_lane_writes_the_route_and_id_where_the_reference_does() -> None:
    log, _, taken = _run([_object(b'{"type":"t1","size":2}', b"hi")], lane=True)
    assert taken == 1
    data = {name: data for name, data, _, _ in log}
    assert set(data) == {"sender", "everything", "typed"}
    assert data["everything"] == b'{"type":"t1","size":2,"route":["S","srv"],"id":"srv-1"}\0hi'


def test_a_stream_cut_anywhere_is_routed_as_a_whole() -> None:
    stream = b"".join(
        _object(json.dumps({"type": "t1", "n": n, "size": 3}).encode(), b"abc") for n in range(20)
    )
    for cut in range(1, len(stream), 7):
        assert _same([stream[:cut], stream[cut:]]) == 20


_names = st.sampled_from(["type", "to", "id", "size", "n", "text", "a", "é", "", "natures"])
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["t1", "bench/tick", "R1", "R2", "S", "mine"])
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_names, inner, max_size=3),
    max_leaves=8,
)


def _dumps(metadata: dict[str, Any], style: int) -> bytes:
    if style == 0:
        return orjson.dumps(metadata)
    if style == 1:
        return json.dumps(metadata).encode()
    if style == 2:
        return json.dumps(metadata, ensure_ascii=False, indent=1).encode()
    return json.dumps(metadata, separators=(",", ":")).encode()


@st.composite
def _objects(draw: st.DrawFn) -> bytes:
    metadata = draw(st.dictionaries(_names, _values, max_size=5))
    payload = draw(st.binary(max_size=8))
    if payload:
        metadata["size"] = len(payload)
    elif draw(st.booleans()):
        metadata.pop("size", None)
    try:
        text = _dumps(metadata, draw(st.integers(0, 3)))
    except (TypeError, ValueError, orjson.JSONEncodeError):
        text = b'{"type":"t1"}'
    size = metadata.get("size")
    if not (type(size) is int and 0 <= size <= 4096):
        payload = b""  # the framing follows "size": a bad one is refused without a payload
    elif len(payload) != size:
        payload = bytes(size)
    return _object(text, payload)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_objects(), min_size=1, max_size=6), st.integers(1, 64))
def test_any_objects_in_any_chunks_reach_everyone_as_the_reference_sends_them(
    objects: list[bytes], step: int
) -> None:
    stream = b"".join(objects)
    chunks = [stream[at : at + step] for at in range(0, len(stream), step)]
    _same(chunks)
