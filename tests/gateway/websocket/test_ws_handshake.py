"""The WebSocket opening handshake, sans-I/O (gateway/websocket/ws_handshake.py; RFC 6455 4.2)."""

from __future__ import annotations

import pytest

from gateway.websocket.ws_handshake import (
    HandshakeError,
    accept_key,
    accept_response,
    check_upgrade,
    refusal,
)

KEY = b"dGhlIHNhbXBsZSBub25jZQ=="  # RFC 6455 1.3's example


def test_the_accept_key_of_the_rfc_example() -> None:
    assert accept_key(KEY) == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_a_good_request_gives_its_key_and_the_101() -> None:
    headers = [(b"host", b"x"), (b"sec-websocket-key", KEY), (b"sec-websocket-version", b"13")]
    assert check_upgrade(headers) == KEY
    answer = accept_response(KEY, [(b"server", b"busgate")])
    assert answer.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
    assert b"sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in answer
    assert b"server: busgate\r\n" in answer and answer.endswith(b"\r\n\r\n")
    assert b"sec-websocket-extensions" not in answer  # declined: nothing named


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ([(b"sec-websocket-key", KEY)], 426),  # no version
        ([(b"sec-websocket-key", KEY), (b"sec-websocket-version", b"8")], 426),
        (
            [
                (b"sec-websocket-key", KEY),
                (b"sec-websocket-version", b"13"),
                (b"sec-websocket-version", b"8"),
            ],
            426,
        ),  # fmt: skip
        ([(b"sec-websocket-version", b"13")], 400),  # no key
        ([(b"sec-websocket-key", b"not base64!"), (b"sec-websocket-version", b"13")], 400),
        ([(b"sec-websocket-key", b"c2hvcnQ="), (b"sec-websocket-version", b"13")], 400),
        (
            [
                (b"sec-websocket-key", KEY),
                (b"sec-websocket-key", KEY),
                (b"sec-websocket-version", b"13"),
            ],
            400,
        ),  # fmt: skip
    ],
)
def test_a_bad_request_is_refused_with_its_status(
    headers: list[tuple[bytes, bytes]], status: int
) -> None:
    with pytest.raises(HandshakeError) as info:
        check_upgrade(headers)
    assert info.value.status == status
    if status == 426:  # RFC 6455 4.4: say which version the server speaks
        assert info.value.headers == ((b"sec-websocket-version", b"13"),)


def test_a_refusal_is_a_complete_http_answer() -> None:
    answer = refusal(426, "speak 13", [(b"sec-websocket-version", b"13")])
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 426 Upgrade Required\r\n")
    assert b"sec-websocket-version: 13" in head and b"content-length: 8" in head
    assert body == b"speak 13"
