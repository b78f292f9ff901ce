"""``GET /v1/history/{type}`` and ``?last=1`` on ``GET /v1/subscribe``
(gateway/routes/routes_history.py,
PROTOCOL.md 9.10): the same pages on two gateway processes, from the broker's journal or the
JetStream stream; a 409 naming the journal's filter; the README's curl lines as printed."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.access.auth import ApiKey
from tests.gateway.conftest import Stack, base_settings, running_stack
from tests.gateway.events.test_events_resume import two_gateways
from tests.gateway.routes.test_events import SseReader

__all__ = ["two_gateways"]  # the fixture, shared with the SSE resume tests

README = Path(__file__).resolve().parents[3] / "README.md"


async def _publish(http: httpx.AsyncClient, url: str, type_: str, i: int) -> int:
    answer = await http.post(f"{url}/v1/publish/{type_}?confirm=1", json={"i": i})
    assert answer.status_code == 200, answer.text
    seq: int = answer.json()["seq"]
    return seq


def _ids(body: dict[str, object]) -> list[tuple[str, int]]:
    return [(e["type"], e["payload"]["i"]) for e in body["events"]]  # type: ignore[attr-defined,index]


async def test_two_gateways_give_the_same_pages_and_last_values(
    two_gateways: tuple[Stack, str],
) -> None:
    stack, other = two_gateways
    async with httpx.AsyncClient(timeout=15.0) as http:
        seqs = []
        for i in range(4):
            for type_ in ("kiln.temp", "kiln.door", "press.on"):
                seqs.append(await _publish(http, stack.url, type_, i))
        url = "/v1/history/kiln.temp?limit=2"
        mine, theirs = (await http.get(stack.url + url)), (await http.get(other + url))
        assert mine.status_code == theirs.status_code == 200
        assert mine.json() == theirs.json()  # any gateway gives the same answer
        body = mine.json()
        assert _ids(body) == [("kiln.temp", 2), ("kiln.temp", 3)]  # the newest, oldest first
        event = body["events"][0]
        assert set(event) == {"seq", "type", "time", "header", "payload"}
        assert event["seq"] == seqs[6] and event["header"]["TYP"] == "EVT"
        assert body["more"] is True and body["next"] == {"before": seqs[6]}
        assert body["seq"] >= seqs[-1]
        back = (await http.get(f"{other}/v1/history/kiln.temp", params=body["next"])).json()
        assert _ids(back) == [("kiln.temp", 0), ("kiln.temp", 1)]
        ahead = await http.get(f"{other}/v1/history/kiln.*", params={"since": seqs[7]})
        assert _ids(ahead.json()) == [("kiln.temp", 3), ("kiln.door", 3)]
        timed = await http.get(f"{other}/v1/history/press", params={"since": "10m"})
        assert _ids(timed.json()) == [("press.on", i) for i in range(4)]
        # ?last=1: the last event of each type, then live; its ids are sequence numbers
        async with http.stream(
            "GET", f"{other}/v1/subscribe", params={"types": "kiln.*", "last": "1"}
        ) as stream:
            assert stream.status_code == 200
            reader = SseReader(stream)
            first = [await reader.next_event(10) for _ in range(2)]
            assert [e["id"] for e in first] == [str(seqs[9]), str(seqs[10])]
            live_seq = await _publish(http, stack.url, "kiln.door", 9)
            live = await reader.next_event(10)
        got = [json.loads(e["data"])["payload"]["i"] for e in [*first, live]]
        assert got == [3, 3, 9] and live["id"] == str(live_seq)


@pytest.fixture(scope="module")
def filtered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A gateway whose broker journals ``kiln.>`` only, with a key limited to ``kiln.*``."""
    keys = (ApiKey("ops", "k-ops"), ApiKey("ci", "k-ci", groups=("demo",), types=("kiln.*",)))
    settings = base_settings(api_keys=keys)
    journal = str(tmp_path_factory.mktemp("journal"))
    with running_stack(
        settings, demo=False, journal=journal, journal_fsync="none", journal_filter="kiln.>"
    ) as stack:
        yield stack


async def test_a_type_the_journal_leaves_out_is_409_naming_the_filter(filtered: Stack) -> None:
    ops = {"X-API-Key": "k-ops"}
    async with httpx.AsyncClient(base_url=filtered.url, timeout=15.0, headers=ops) as http:
        refused = await http.get("/v1/history/press.on")
        assert refused.status_code == 409
        error = refused.json()["error"]
        assert error["code"] == "not_journaled"
        assert "press.on" in error["message"] and "--journal-filter kiln.>" in error["message"]
        sse = await http.get("/v1/subscribe", params={"types": "press.*", "last": "1"})
        assert sse.status_code == 409 and sse.json()["error"]["code"] == "not_journaled"
        partly = (await http.get("/v1/history/kiln")).json()  # kiln.> kept, not kiln itself
        assert partly["events"] == [] and partly["journal_filter"] == "--journal-filter kiln.>"


@pytest.mark.parametrize(
    ("path", "wanted"),
    [
        ("/v1/history/kiln.temp?limit=1001", 400),
        ("/v1/history/kiln.temp?limit=x", 400),
        ("/v1/history/kiln.temp?before=-1", 400),
        ("/v1/history/kiln.temp?since=yesterday-ish", 400),
        ("/v1/history/kiln.%3E.x", 400),
        ("/v1/subscribe?types=kiln.*&last=maybe", 400),
        ("/v1/history/press.on", 403),  # the key may not read press.*
        ("/v1/history/kiln.temp", 200),
    ],
)
async def test_bad_queries_are_400_and_other_types_403(
    filtered: Stack, path: str, wanted: int
) -> None:
    headers = {"X-API-Key": "k-ci"}
    async with httpx.AsyncClient(base_url=filtered.url, timeout=15.0, headers=headers) as http:
        answer = await http.get(path)
    assert answer.status_code == wanted, answer.text
    if wanted != 200:
        assert answer.json()["error"]["code"] in ("bad_request", "forbidden")


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    journal = str(tmp_path_factory.mktemp("journal"))
    with running_stack(base_settings(), journal=journal, journal_fsync="none") as stack:
        yield stack


def test_the_readmes_history_curl_lines_work_as_printed(journaled: Stack) -> None:
    block = README.read_text().split("**History and last values.**", 1)[1].split("```sh", 1)[1]
    lines = [line for line in block.split("```", 1)[0].splitlines() if line.startswith("curl")]
    assert len(lines) == 4
    for line in lines:
        command, comment = line.split("#", 1)
        wanted = int(comment.split()[0])
        args = shlex.split(command.replace("localhost:8080", journaled.url))
        done = subprocess.run(  # the SSE stream does not end: it is cut after a second
            [*args, "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "1"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert int(done.stdout) == wanted, line


async def test_without_a_journal_history_and_last_are_409() -> None:
    with running_stack(base_settings(), demo=False) as stack:
        async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
            answer = await http.get("/v1/history/kiln.temp")
            assert answer.status_code == 409
            assert "keeps no journal" in answer.json()["error"]["message"]
            last = await http.get("/v1/subscribe", params={"types": "kiln.temp", "last": "1"})
            assert last.status_code == 409
