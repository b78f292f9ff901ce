"""What a newcomer trips over at the HTTP edges (issue 15): methods, slashes, error texts,
the served document's address, the stats' clock, and content negotiation."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest

from bus.errors import DecodeError
from gateway.process.settings import GatewaySettings
from gateway.routes.negotiate import REQUEST_OFFERS, preferred
from gateway.routes.payload import parse_body
from tests.gateway.conftest import Stack, base_settings

WEB_DIR = GatewaySettings().web_dir


@pytest.fixture(scope="module")
def site() -> Iterator[Stack]:
    """Broker, demo service and a gateway that serves the console too (as `busgate run`)."""
    stack = Stack(base_settings())
    stack.settings = replace(stack.settings, web_dir=WEB_DIR)
    try:
        yield stack.start()
    finally:
        stack.stop()


# -- methods and paths -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/request/demo", "POST"),
        ("PUT", "/v1/request/demo", "POST"),
        ("GET", "/v1/publish/sensor.temp", "POST"),
        ("POST", "/v1/services", "GET, HEAD"),
        ("POST", "/v1/subscribe", "GET, HEAD"),
        ("DELETE", "/healthz", "GET, HEAD"),
        ("POST", "/openapi.json", "GET, HEAD"),
        ("POST", "/", "GET, HEAD"),  # the console's own
    ],
)
def test_a_wrong_method_is_405_with_the_routes_own_allow(
    site: Stack, method: str, path: str, allow: str
) -> None:
    response = httpx.request(method, site.url + path)
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == allow
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_curl_without_d_on_a_request_url_is_405_not_404(site: Stack) -> None:
    response = httpx.get(f"{site.url}/v1/request/demo")
    assert (response.status_code, response.headers["allow"]) == (405, "POST")


def test_a_trailing_slash_on_an_api_path_is_the_same_resource(site: Stack) -> None:
    body = {"CMD": "echo", "x": 1}
    slashed = httpx.post(f"{site.url}/v1/request/demo/", json=body)
    assert slashed.status_code == 200, slashed.text
    assert slashed.json()["payload"] == {"x": 1}
    assert httpx.get(f"{site.url}/v1/services/").json()["services"][0]["group"] == "demo"


def test_an_unknown_api_path_is_a_json_404_whatever_the_method(site: Stack) -> None:
    for method in ("GET", "POST"):
        response = httpx.request(method, f"{site.url}/v1/nothing-here")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert httpx.get(f"{site.url}/").status_code == 200  # the console is still at /


# -- bodies: error texts that point at the bad value ---------------------------------------


def publish(site: Stack, body: bytes) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    return httpx.post(f"{site.url}/v1/publish/sensor.temp", content=body, headers=headers)


def test_a_member_named_empty_is_refused_where_it_is(site: Stack) -> None:
    response = publish(site, b'{"c": 1, "": 2}')
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message == 'a member named "" is not allowed: every argument needs a name at byte 9'


def test_a_utf8_bom_is_accepted(site: Stack) -> None:
    assert publish(site, b'\xef\xbb\xbf{"c": 1}').status_code == 202


def test_errors_give_the_byte_offset_of_the_bad_value(site: Stack) -> None:
    # "é" is two bytes: offsets count bytes of the body, not characters.
    big = publish(site, '{"é": 1, "n": 18446744073709551616}'.encode())
    assert big.status_code == 400
    assert big.json()["error"]["message"].endswith("does not fit in 64 bits "
                                                   "(-2**63 .. 2**64-1) at byte 15")  # fmt: skip
    syntax = publish(site, '{"é": 1, "n": }'.encode())
    assert syntax.json()["error"]["message"] == "not JSON: Expecting value at byte 15"


def test_huge_numbers_name_the_64_bit_limit_not_a_python_setting(site: Stack) -> None:
    response = publish(site, b'{"n": ' + b"9" * 5000 + b"}")
    message = response.json()["error"]["message"]
    assert response.status_code == 400
    assert "64 bits" in message and message.endswith("at byte 6")
    assert "sys." not in message and "int_max_str_digits" not in message


def test_too_deep_names_the_depth_limit_and_where(site: Stack) -> None:
    body = b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}"
    message = publish(site, body).json()["error"]["message"]
    assert message.startswith("JSON nested deeper than max_depth (32 levels") and message.endswith(
        "at byte 37"
    )


def test_empty_and_non_object_bodies_say_what_came(site: Stack) -> None:
    assert publish(site, b"").json()["error"]["message"].startswith("body is empty")
    assert publish(site, b"  [1]").json()["error"]["message"] == (
        "body must be a JSON object, not an array at byte 2"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"CMD":"echo","":1}', 'a member named "" is not allowed'),
        (b'\xef\xbb\xbf{"CMD":"echo"}', None),
        (b'\xef\xbb\xbf{"CMD":"echo",}', "at byte 17"),
        (b'{"a":"\xff"}', "body is not UTF-8 at byte 6"),
        (b'{"CMD":"echo","s":"\xc4\x80"}', "at byte 19"),  # U+0100: no Latin-1
        (b'{"x":' + b"[" * 32 + b"]" * 32 + b"}", "in it) at byte 36"),
        (b'{"x": 1}', 'body must have a "CMD" text field'),
    ],
)
def test_parse_body_for_the_request_route(body: bytes, message: str | None) -> None:
    if message is None:
        assert parse_body(body, need_cmd=True)["CMD"] == "echo"
        return
    with pytest.raises(DecodeError) as refused:
        parse_body(body, need_cmd=True)
    assert message in str(refused.value)


# -- what the gateway says about itself ------------------------------------------------------


def test_the_served_document_names_the_address_it_was_fetched_from(site: Stack) -> None:
    document = httpx.get(f"{site.url}/openapi.json").json()
    assert document["servers"][0]["url"] == site.url
    other = httpx.get(f"{site.url}/openapi.json", headers={"Host": "gw.example:9000"}).json()
    assert other["servers"][0]["url"] == "http://gw.example:9000"


def test_stats_times_are_wall_clock_epoch_seconds(site: Stack) -> None:
    httpx.post(f"{site.url}/v1/request/demo", json={"CMD": "echo"})
    before = time.time()
    stats = httpx.get(f"{site.url}/v1/stats?history=1").json()
    assert abs(stats["as_of"] - before) < 5
    assert stats["series"] and all(abs(point["t"] - before) < 70 for point in stats["series"])
    minutes = stats["history"]
    assert minutes and abs(minutes[-1]["t"] - before) < 70
    assert minutes[-1]["groups"]["demo"]["outcomes"]["ack"] >= 1


# -- content negotiation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        ("", "application/json"),
        ("*/*", "application/json"),
        ("application/x-ndjson", "application/x-ndjson"),
        ("application/x-ndjson;q=0.5, application/json", "application/json"),
        ("application/json;q=0.1, text/event-stream", "text/event-stream"),
        ("text/event-stream, application/x-ndjson;q=0.9", "text/event-stream"),
        ("application/x-ndjson, text/event-stream", "application/x-ndjson"),
        ("application/*;q=0.3, text/event-stream;q=0.2", "application/json"),
        ("application/x-ndjson;q=0, */*;q=0.1", "application/json"),
        ("text/event-stream;q=0", None),
        ("text/html", None),
        ("application/x-ndjson;q=bogus, application/json", "application/json"),
    ],
)
def test_accept_q_values_are_honoured(accept: str, chosen: str | None) -> None:
    assert preferred(accept, REQUEST_OFFERS) == chosen


# -- the request route itself (wired in gateway/routes/routes_request.py)
# ----------------------------


def test_the_request_route_reads_a_bom_and_refuses_an_empty_name(site: Stack) -> None:
    bom = httpx.post(f"{site.url}/v1/request/demo", content=b'\xef\xbb\xbf{"CMD":"echo","x":1}')
    assert (bom.status_code, bom.json()["payload"]) == (200, {"x": 1})
    empty = httpx.post(f"{site.url}/v1/request/demo", content=b'{"CMD":"echo","":1}')
    assert empty.status_code == 400
    assert '""' in empty.json()["error"]["message"]


def test_the_request_route_honours_q_values(site: Stack) -> None:
    body = {"CMD": "count", "n": 2}
    ndjson_less = "application/x-ndjson;q=0.1, application/json"
    one = {"CMD": "echo", "n": 2}  # a stream to a JSON request is NDJSON all the same (9.4)
    answer = httpx.post(f"{site.url}/v1/request/demo", json=one, headers={"Accept": ndjson_less})
    assert answer.headers["content-type"].startswith("application/json")
    sse_more = "application/x-ndjson;q=0.5, text/event-stream"
    answer = httpx.post(f"{site.url}/v1/request/demo", json=body, headers={"Accept": sse_more})
    assert answer.headers["content-type"].startswith("text/event-stream")


def test_answers_do_not_show_the_gateways_own_inbox(site: Stack) -> None:
    ack = httpx.post(f"{site.url}/v1/request/demo", json={"CMD": "echo", "x": 1})
    nak = httpx.post(f"{site.url}/v1/request/demo", json={"CMD": "fail", "rcd": 409})
    stream = httpx.post(
        f"{site.url}/v1/request/demo",
        json={"CMD": "count", "n": 1},
        headers={"Accept": "application/x-ndjson"},
    )
    for text in (ack.text, nak.text, stream.text):
        assert "_INBOX" not in text
    assert ack.json()["header"]["TYP"] == "ACK" and "RID" in ack.json()["header"]


def test_the_timeout_marker_is_compact_json_like_every_other_line(site: Stack) -> None:
    stream = httpx.post(
        f"{site.url}/v1/request/demo?timeout=0.3",
        json={"CMD": "count", "n": 5, "interval": 1},
        headers={"Accept": "application/x-ndjson"},
        timeout=10,
    )
    last = stream.text.strip().splitlines()[-1]
    assert '"event":"timeout"' in last and ": " not in last and ", " not in last


# -- what receivers refuse, the sender refuses (issue 12) ------------------------------------


@pytest.mark.parametrize("path", ["/v1/request/demo", "/v1/publish/sensor.temp"])
def test_a_number_beyond_a_double_is_a_400_on_every_path(site: Stack, path: str) -> None:
    # 1e400 must not become null on its way: a 400 like NaN, on requests and publishes alike.
    for number in (b"1e400", b"-1e400"):
        response = httpx.post(site.url + path, content=b'{"CMD":"echo","x":' + number + b"}")
        assert response.status_code == 400, response.text
        assert "at byte 18" in response.json()["error"]["message"]


def test_json_nested_32_deep_is_answered_not_lost(site: Stack) -> None:
    # The deepest body the gateway takes is one every receiver decodes: the echo comes back.
    inner = b"[" * 31 + b"1" + b"]" * 31
    response = httpx.post(
        site.url + "/v1/request/demo", content=b'{"CMD":"echo","x":' + inner + b"}", timeout=10
    )
    assert response.status_code == 200, response.text
    value = response.json()["payload"]["x"]
    for _ in range(30):
        value = value[0]
    assert value == [1]
    # one level deeper: every receiver would refuse it, so the gateway does (a request timed
    # out after 5 s, a publish was 202 and never delivered)
    deeper = b'{"CMD":"echo","x":[' + inner + b"]}"
    for path in ("/v1/request/demo", "/v1/publish/sensor.temp"):
        refused = httpx.post(site.url + path, content=deeper)
        assert refused.status_code == 400, refused.text
        assert "max_depth (32 levels" in refused.json()["error"]["message"]
