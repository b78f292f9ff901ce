"""The gateway's request lane in C (``bus.native._hotpath``): a plain request read whole
(``http_request``), the way ``gateway.process.http_protocol`` reads a ``POST`` that arrives in
one piece, and an ACK's whole HTTP answer (``http_answer``), as ``gateway.routes.request_direct``
writes it.

The reading's reference is uvicorn's parser (httptools, llhttp) and what uvicorn's callbacks
collect: for every input the accelerator either refuses (None: the bytes go to that parser) or
reads exactly what the parser reads, the target, the headers (names in lower case, in order),
the body and keep-alive. The answer's reference is ``render_response`` and the lines the gateway
writes around it. Tables of what clients and services send, then changed ones (Hypothesis).
"""

from __future__ import annotations

from typing import Any

import httptools
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from bus.frame.codec import DEFAULT_LIMITS
from bus.message.header import Header, header_of
from bus.message.message import Message, decode_message, read_message
from gateway.bridge import render_response
from gateway.routes.request_answers import _ANSWER_LINES

hotpath = pytest.importorskip("bus.native._hotpath")

Whole = tuple[bytes, list[tuple[bytes, bytes]], bytes, bool]


class _Collected:
    """What uvicorn's httptools callbacks collect of each request."""

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = b""
        self.begun = 0
        self.complete = 0
        self.parser: Any = None
        self.keep_alive = False

    def on_message_begin(self) -> None:
        self.begun += 1

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()  # (as uvicorn reads it: here)

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete += 1


def reference(data: bytes) -> Whole | None:
    """The request as uvicorn reads it when ``data`` is one whole plain POST, else None."""
    collected = _Collected()
    parser = collected.parser = httptools.HttpRequestParser(collected)
    try:
        parser.feed_data(data)
    except httptools.HttpParserError:
        return None
    except httptools.HttpParserUpgrade:
        return None
    if collected.begun != 1 or collected.complete != 1:
        return None
    if parser.get_method() != b"POST" or parser.get_http_version() != "1.1":
        return None
    return collected.url, collected.headers, collected.body, collected.keep_alive


def request(head: str = "", body: bytes = b'{"CMD":"echo","x":1}', **parts: Any) -> bytes:
    line = parts.get("line", "POST /v1/request/demo HTTP/1.1")
    length = parts.get("length", f"Content-Length: {len(body)}\r\n")
    return f"{line}\r\nHost: 127.0.0.1:8080\r\n{length}{head}\r\n".encode("latin-1") + body


#: (request, read whole by the accelerator?)
CASES: list[tuple[bytes, bool]] = [
    (request(), True),
    (request("Content-Type: application/json\r\nAccept: application/json\r\n"), True),
    (request("X-API-Key: k-ops\r\nX-Busgate-Timeout: 2.5\r\n"), True),
    (request("TraceParent: 00-0af7651916cd76836b0b0a2b5a7a6d2e-b7ad6b7169203331-01\r\n"), True),
    (request("Connection: close\r\n"), True),
    (request("Connection: Keep-Alive\r\n"), True),
    (request("X-Empty:\r\n"), True),
    (request("X-Spaced:   a  b\r\n"), True),
    (request("Authorization: Bearer a.b-c_d~e+f/g=\r\n"), True),
    (request(body=b""), True),
    (request(line="POST /v1/demo/echo HTTP/1.1", body=b'{"y":[1,2]}'), True),
    (request(line="POST /v1/request/a:b.c-d_e HTTP/1.1"), True),
    # what goes to uvicorn's parser instead
    (request(line="POST /v1/request/demo?timeout=1 HTTP/1.1"), False),
    (request(line="POST /v1/request/d%65mo HTTP/1.1"), False),
    (request(line="POST /v1/request/demo#x HTTP/1.1"), False),
    (request(line="POST http://h/v1/request/demo HTTP/1.1"), False),
    (request(line="GET /v1/request/demo HTTP/1.1"), False),
    (request(line="post /v1/request/demo HTTP/1.1"), False),
    (request(line="POST /v1/request/demo HTTP/1.0"), False),
    (request(line="POST  /v1/request/demo HTTP/1.1"), False),
    (request(line="POST /v1/request/demo HTTP/1.1 "), False),
    (request("Connection: upgrade\r\nUpgrade: websocket\r\n"), False),
    (request("Connection: keep-alive, te\r\n"), False),
    (request("Expect: 100-continue\r\n"), False),
    (request("Transfer-Encoding: chunked\r\n"), False),
    (request("Content-Length: 20\r\n"), False),  # a second one
    (request(length="Content-Length: +20\r\n"), False),
    (request(length="Content-Length: 2 0\r\n"), False),
    (request(length="Content-Length: 20 \r\n"), False),
    (request(length=""), False),
    (request("X-Folded: a\r\n b\r\n"), False),
    (request("X-Name : a\r\n"), False),
    (request("X-Latin: caf\xe9\r\n"), False),
    (request("X-Nul: a\x00b\r\n"), False),
    (request("X-Bare-LF: a\n"), False),
    (request("X-Trailing: a \r\n"), False),
    (request()[:-1], False),  # the body not all there
    (request()[:30], False),  # the head not all there
    (request() + b"x", False),  # more than the body
    (request() * 2, False),  # two requests: uvicorn's parser pipelines them
    (request("".join(f"X-{n}: {n}\r\n" for n in range(64))), False),  # more lines than taken
    (b"", False),
    (b"POST / HTTP/1.1\r\n\r\n", False),
]


@pytest.mark.parametrize(("data", "whole"), CASES)
def test_a_request_is_read_as_uvicorns_parser_reads_it_or_left_to_it(
    data: bytes, whole: bool
) -> None:
    read = hotpath.http_request(data)
    assert (read is not None) == whole
    if read is not None:
        assert read == reference(data)


def test_what_is_not_bytes_is_left_to_the_parser() -> None:
    assert hotpath.http_request(bytearray(request())) is None
    assert hotpath.http_request(memoryview(request())) is None


_VALID = [data for data, whole in CASES if whole]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(_VALID),
    edits=st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(0, 255), st.sampled_from("rid")),
        min_size=1,
        max_size=3,
    ),
)
def test_a_changed_request_is_refused_or_read_as_the_parser_reads_it(
    base: bytes, edits: list[tuple[int, int, str]]
) -> None:
    data = bytearray(base)
    for where, byte, how in edits:
        at = where % (len(data) + 1)
        if how == "r" and at < len(data):
            data[at] = byte
        elif how == "i":
            data.insert(at, byte)
        elif at < len(data):
            del data[at]
    read = hotpath.http_request(bytes(data))
    if read is not None:
        assert read == reference(bytes(data))


# -- an ACK's answer -------------------------------------------------------------------------

_DEFAULTS = b"date: Sun, 29 Nov 2026 11:00:00 GMT\r\nserver: uvicorn\r\n"
_MID = b"11058dcb-b383-49d9-a609-e2fe3f144d00"
_TRACE = b"00-0af7651916cd76836b0b0a2b5a7a6d2e-b7ad6b7169203331-01"
_INBOX = "_INBOX.gw1.abcdef"


def on_wire(raw: bytes) -> Message | None:
    """The ACK as the gateway's client receives it with the accelerator: still on the wire, its
    header read by peek (None: peek leaves it to the decoder)."""
    found = hotpath.peek(raw, DEFAULT_LIMITS.max_depth, DEFAULT_LIMITS.max_fields, False)
    return None if found is None else Message.on_wire(raw, Header(*found))


def answer_reference(raw: bytes, close: bytes) -> bytes:
    """The answer as the gateway writes it without ``http_answer``."""
    body = render_response(on_wire(raw) or read_message(raw))
    lines = _ANSWER_LINES % (len(body), _MID, _TRACE)
    return b"".join((STATUS_LINE[200], _DEFAULTS, lines, close, b"\r\n", body))


def answer_fast(raw: bytes, close: bytes) -> bytes | None:
    ack = on_wire(raw)
    if ack is None:
        return None  # decoded: request_direct writes it the reference way
    return hotpath.http_answer(raw, ack.header, STATUS_LINE[200], _DEFAULTS, _MID, _TRACE, close)


def ack(*members: str, pld: str | None = '{"CMD":"echo","x":1}') -> bytes:
    """An ACK's JSON body: ``members`` (``"NAME":value`` text), PLD where ``"PLD"`` stands."""
    parts = [f'"PLD":{pld}' if member == "PLD" else member for member in members]
    return ("{" + ",".join(parts) + "}").encode("latin-1")


_BASE = ('"RID":"r-1"', '"ENC":"JSON"', '"MID":"m-1"', '"TYP":"ACK"')
ACKS: list[tuple[bytes, bool]] = [
    (ack(f'"GRP":"{_INBOX}"', *_BASE, "PLD", '"SRC":"svc-1"', f'"TRC":"{_TRACE.decode()}"'), True),
    (ack(*_BASE, f'"GRP":"{_INBOX}"', "PLD"), True),  # GRP last before PLD, PLD last
    (ack(f'"GRP":"{_INBOX}"', "PLD", '"ENC":"JSON"'), True),  # GRP first, PLD not last
    (ack(f'"GRP":"{_INBOX}"', "PLD"), False),  # no ENC: the frame writes it
    (ack(*_BASE, "PLD", f'"GRP":"{_INBOX}"'), False),  # GRP after PLD: the reference
    (ack('"GRP":"other"', *_BASE, "PLD"), True),  # not an inbox: kept
    (ack(*_BASE, "PLD", '"MSG":"fine"', '"RCD":200'), True),
    (ack(*_BASE, "PLD", pld="{}"), False),  # a quirk: the frame writes it
    (ack(*_BASE, "PLD", pld='{"y":[1,{"z":null}],"s":"a\\"b"}'), True),
    (ack(f'"GRP":"{_INBOX}"', *_BASE), True),  # no PLD
    (ack(*_BASE), True),
    (ack(*_BASE, "PLD", pld='{"s":"caf\\u00e9"}'), True),  # an escape: ASCII
    (ack(*_BASE, "PLD", pld='{"s":"caf\xe9"}'), False),  # Latin-1: the reference transcodes
    (ack('"ENC":"JSON"', '"MID":"m"', '"TYP":"ACK"', '"PLD" : {"x":1}'), False),
    (b'{"ENC":"FRAM","MID":"m","TYP":"ACK"}', False),
]


@pytest.mark.parametrize("close", [b"", b"connection: close\r\n"])
@pytest.mark.parametrize(("raw", "accelerated"), ACKS)
def test_an_acks_answer_is_the_bytes_the_gateway_writes_or_left_to_it(
    raw: bytes, accelerated: bool, close: bytes
) -> None:
    fast = answer_fast(raw, close)
    assert (fast is not None) == accelerated
    if fast is not None:
        assert fast == answer_reference(raw, close)


def test_a_header_not_read_from_the_bytes_is_left_to_the_reference() -> None:
    raw = ACKS[0][0]
    decoded = header_of(decode_message(raw))  # no PLD bounds: the payload cannot be cut
    assert hotpath.http_answer(raw, decoded, STATUS_LINE[200], b"", _MID, _TRACE, b"") is None


_MEMBERS = [
    f'"GRP":"{_INBOX}"', '"GRP":"_INBOX.other"', '"GRP":"demo"', '"RID":"r-1"', '"ENC":"JSON"',
    '"MID":"m-1"', '"TYP":"ACK"', '"SRC":"svc"', '"MSG":"a,b"', '"RCD":200', "PLD",
]  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    members=st.lists(st.sampled_from(_MEMBERS), min_size=1, max_size=8, unique=True),
    payload=st.dictionaries(
        st.text(st.characters(max_codepoint=0x7F), min_size=1, max_size=4),
        st.one_of(
            st.integers(-5, 5), st.text(st.characters(max_codepoint=0xFF), max_size=4), st.none()
        ),  # fmt: skip
        max_size=3,
    ),
)
def test_every_ack_is_answered_as_render_response_answers_it_or_left_to_it(
    members: list[str], payload: dict[str, Any]
) -> None:
    names = [m.split(":")[0] for m in members]
    if len(set(names)) != len(names):
        return  # a repeated name: not a message the broker passes
    raw = ack(*members, pld=orjson.dumps({"CMD": "echo", **payload}).decode())
    if read_message(raw).typ is None:
        return
    fast = answer_fast(raw, b"")
    if fast is not None:
        assert fast == answer_reference(raw, b"")
