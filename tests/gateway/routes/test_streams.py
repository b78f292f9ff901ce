"""Several responses to one request: NDJSON and SSE, with the final event marked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.gateway.conftest import Stack, eventually

pytestmark = [
    pytest.mark.transports,
    pytest.mark.stack_loops,
]  # broker and NATS, each on both loops

NDJSON = {"Accept": "application/x-ndjson"}
SSE = {"Accept": "text/event-stream"}


@pytest.fixture
async def http(stack: Stack) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        yield client


async def ndjson_lines(
    http: httpx.AsyncClient, body: dict[str, object], **params: float
) -> list[dict[str, object]]:
    lines = []
    async with http.stream(
        "POST", "/v1/request/demo", json=body, headers=NDJSON, params=params
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        async for line in r.aiter_lines():
            if line:
                lines.append(json.loads(line))
    return lines


def sse_events(text: str) -> list[dict[str, str]]:
    events = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            fields[name] = value
        if "data" in fields:
            events.append(fields)
    return events


async def test_ndjson_streams_every_response_and_marks_the_last(http: httpx.AsyncClient) -> None:
    lines = await ndjson_lines(http, {"CMD": "count", "n": 4, "interval": 0.05})
    *responses, end = lines
    assert [line["payload"] for line in responses] == [{"i": i, "n": 4} for i in range(1, 5)]
    assert all(line["event"] == "response" and line["final"] is False for line in responses)
    assert end["event"] == "end" and end["final"] is True  # the service closed its stream


async def test_ndjson_single_answer_is_one_final_line(http: httpx.AsyncClient) -> None:
    lines = await ndjson_lines(http, {"CMD": "echo", "a": 1})
    assert len(lines) == 1 and lines[0]["final"] is True and lines[0]["payload"] == {"a": 1}


async def test_ndjson_nak_is_the_final_line(http: httpx.AsyncClient) -> None:
    lines = await ndjson_lines(http, {"CMD": "fail", "rcd": 409})
    assert lines[-1]["final"] is True
    header = lines[-1]["header"]
    assert isinstance(header, dict) and header["TYP"] == "NAK" and header["RCD"] == 409


async def test_ndjson_timeout_mid_stream_ends_with_a_timeout_marker(
    http: httpx.AsyncClient,
) -> None:
    lines = await ndjson_lines(http, {"CMD": "count", "n": 5, "interval": 0.3}, timeout=1.1)
    assert lines[0]["payload"] == {"i": 1, "n": 5}
    last = lines[-1]
    assert last["event"] == "timeout" and last["final"] is True
    error = last["error"]
    assert isinstance(error, dict) and error["code"] == "timeout"
    assert all(line["final"] is False for line in lines[:-1])
    # the marker says the timeout bounds the whole stream, and how much arrived before it
    assert error["received"] == len(lines) - 1
    assert "bounds the whole stream" in str(error["message"])


@pytest.mark.parametrize(
    "accept",
    [None, "*/*", "application/json, application/x-ndjson;q=0.5"],
    ids=["no-accept", "any", "json-first"],
)
async def test_a_plain_json_request_to_a_stream_gets_every_response_as_ndjson(
    http: httpx.AsyncClient, accept: str | None
) -> None:
    """Issue 30 item 13: a plain-JSON request (no Accept, or application/json) to a command
    that streams got its first response only, the rest dropped unless the client read FLG.
    Once the first response says more follow, the answer is NDJSON, every response in it
    (as grpc-gateway streams); one answer stays one JSON object."""
    headers = {} if accept is None else {"Accept": accept}
    body = {"CMD": "count", "n": 3, "interval": 0.05}
    response = await http.post("/v1/request/demo", json=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines() if line]
    assert [line["payload"] for line in lines[:3]] == [{"i": i, "n": 3} for i in (1, 2, 3)]
    assert lines[-1]["final"] is True and all(line["final"] is False for line in lines[:-1])
    single = await http.post("/v1/request/demo", json={"CMD": "echo", "a": 1}, headers=headers)
    assert single.headers["content-type"].startswith("application/json")
    assert single.json()["payload"] == {"a": 1}


async def test_a_client_that_takes_json_only_gets_the_first_response_marked_more(
    http: httpx.AsyncClient,
) -> None:
    """``Accept: application/json`` alone cannot read NDJSON: it gets the first response as
    before, its FLG saying more followed (2.3), and the gateway drops the rest."""
    body = {"CMD": "count", "n": 3, "interval": 0.05}
    response = await http.post(
        "/v1/request/demo", json=body, headers={"Accept": "application/json"}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    answer = response.json()
    assert answer["payload"] == {"i": 1, "n": 3} and answer["header"]["FLG"] & 2
    after = await http.post("/v1/request/demo", json={"CMD": "echo", "a": 2})
    assert after.json()["payload"] == {"a": 2}  # nothing of the dropped rest in the way


async def test_sse_streams_responses_then_a_final_event(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/demo", json={"CMD": "count", "n": 3}, headers=SSE)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert [e["event"] for e in events] == ["response", "response", "response", "end"]
    assert [json.loads(e["data"])["payload"]["i"] for e in events[:3]] == [1, 2, 3]
    assert [e["id"] for e in events] == ["1", "2", "3", "4"]


async def test_stream_without_any_answer_is_a_plain_error(http: httpx.AsyncClient) -> None:
    response = await http.post("/v1/request/nobody", json={"CMD": "count"}, headers=NDJSON)
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "no_responders"
    response = await http.post(
        "/v1/request/demo",
        json={"CMD": "sleep", "seconds": 2},
        headers=SSE,
        params={"timeout": 0.2},
    )
    assert response.status_code == 504


async def test_metrics_show_an_open_stream(http: httpx.AsyncClient) -> None:
    body = {"CMD": "count", "n": 3, "interval": 0.3}
    async with http.stream("POST", "/v1/request/demo", json=body, headers=NDJSON) as response:
        lines = response.aiter_lines()
        assert json.loads(await anext(lines))["payload"]["i"] == 1
        metrics = (await http.get("/metrics")).text
        assert "\nbusgate_gateway_open_streams 1.0\n" in metrics
        assert [json.loads(line)["final"] async for line in lines] == [False, False, True]


async def test_open_streams_gauge_returns_to_zero(http: httpx.AsyncClient, stack: Stack) -> None:
    await ndjson_lines(http, {"CMD": "count", "n": 2})

    async def closed() -> bool:
        assert stack.gateway is not None
        return stack.gateway.metrics.open_streams == 0

    await eventually(closed)


async def test_client_leaving_mid_stream_releases_everything(
    http: httpx.AsyncClient, stack: Stack
) -> None:
    body = {"CMD": "count", "n": 20, "interval": 0.2}
    async with http.stream("POST", "/v1/request/demo", json=body, headers=NDJSON) as response:
        async for line in response.aiter_lines():
            assert json.loads(line)["payload"]["i"] == 1
            break  # leave after the first response

    async def released() -> bool:
        gateway = stack.gateway
        assert gateway is not None
        return gateway.bridge.in_flight == 0 and gateway.metrics.open_streams == 0

    await eventually(released)


@pytest.mark.slow
async def test_an_answer_stream_to_a_client_that_reads_nothing_is_cut_after_its_timeout() -> None:
    # Issue 12: the timeout bounds a stream, but a stream blocked writing to a client that reads
    # nothing never reached its timeout line and stayed open. Now it is cut SLOW_CUT_S past it.
    import asyncio
    import contextlib
    import socket
    import time
    from typing import Any

    from bus.asyncio.service import Request, Service
    from gateway.process.cycle import SLOW_CUT_S
    from tests.gateway.conftest import base_settings, running_stack

    timeout = 2.0
    with running_stack(base_settings(), demo=False) as stack:
        gateway = stack.gateway
        assert gateway is not None

        async def scenario() -> float:
            client = await stack.bus_client()
            service = Service(client, "big", heartbeat_interval=1.0)

            @service.command("flood")
            async def flood(req: Request) -> AsyncIterator[dict[str, Any]]:
                for i in range(2000):  # 16 MB: more than every buffer on the way
                    yield {"i": i, "pad": "x" * 8000}

            await service.start()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", stack.settings.port))
            reader, writer = await asyncio.open_connection(sock=sock)
            body = b'{"CMD":"flood"}'
            writer.write(
                b"POST /v1/request/big?timeout=%g HTTP/1.1\r\nHost: x\r\n" % timeout
                + b"Accept: application/x-ndjson\r\nContent-Type: application/json\r\n"
                + b"Content-Length: %d\r\n\r\n" % len(body)
                + body
            )
            started = time.monotonic()
            try:
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
                async with asyncio.timeout(timeout + SLOW_CUT_S + 10):
                    while not gateway.metrics.open_streams:
                        await asyncio.sleep(0.01)
                    while gateway.metrics.open_streams:
                        await asyncio.sleep(0.05)
                ended = time.monotonic() - started
                async with asyncio.timeout(5):
                    with contextlib.suppress(ConnectionError):
                        while await reader.read(1 << 20):
                            pass
            finally:
                writer.close()
                await service.stop()
                await client.close()  # left open, it reconnected after the stack had stopped
            return ended

        assert await stack.run(scenario(), timeout=60) >= timeout
