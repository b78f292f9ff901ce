"""``gateway/routes/sdk.py``: the JavaScript client at ``/sdk/`` and ``GET /v1/typescript``.

The declarations are checked the way a user meets them: TypeScript (the pinned compiler of
``clients/js``) compiles a file that calls the demo service through ``bus.service("demo")``
with them, and refuses one that passes a wrong argument or calls a command nobody declares.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.process.settings import ApiKey
from gateway.routes.sdk import SDK_DIR
from tests.gateway.conftest import Stack, base_settings, running_stack

ROOT = Path(__file__).resolve().parents[3]
TSC = ROOT / "clients" / "js" / "node_modules" / ".bin" / "tsc"
KEY = "k-sdk-test"
AUTH = {"X-API-Key": KEY}


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """Authentication on: the module needs none, the declarations do."""
    with running_stack(base_settings(api_keys=(ApiKey("ops", KEY),))) as running:
        yield running


def test_the_module_and_everything_it_imports_is_served_to_any_origin(stack: Stack) -> None:
    seen: set[str] = set()
    wanted = ["busgate.js"]
    with httpx.Client(base_url=f"{stack.url}/sdk/") as http:
        while wanted:
            name = wanted.pop()
            if name in seen:
                continue
            seen.add(name)
            answer = http.get(name, headers={"Origin": "https://elsewhere.example"})
            assert answer.status_code == 200, name  # no key needed
            assert answer.headers["content-type"].startswith("text/javascript")
            assert answer.headers["access-control-allow-origin"] == "*"
            assert answer.headers["x-typescript-types"] == name.removesuffix(".js") + ".d.ts"
            assert answer.text == (SDK_DIR / name).read_text(encoding="utf-8")
            # Static imports and the Node-only dynamic one (websocket.ts) are relative .js paths.
            wanted += re.findall(r'from "\./([\w-]+\.js)"', answer.text)
            wanted += re.findall(r'new URL\("\./([\w-]+\.js)"', answer.text)
        assert {"client.js", "subscription.js", "objects.js", "node-websocket.js"} <= seen
        types = http.get("busgate.d.ts")
        assert types.headers["content-type"] == "application/typescript; charset=utf-8"
        assert "export { Admin, Busgate" in types.text
        missing = http.get("nope.js")
        assert missing.status_code == 404
        assert missing.json()["error"]["code"] == "not_found"


def test_typescript_needs_credentials_and_lists_the_live_commands(stack: Stack) -> None:
    with httpx.Client(base_url=stack.url) as http:
        assert http.get("/v1/typescript").status_code == 401
        deadline = time.monotonic() + 30  # the demo's schemas are found after it starts
        while True:
            answer = http.get("/v1/typescript", headers=AUTH)
            assert answer.status_code == 200
            assert answer.headers["content-type"] == "application/typescript; charset=utf-8"
            text = answer.text
            if '"count": Command<' in text or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert 'declare module "busgate"' in text
        for command in ("count", "echo", "fail", "sleep", "time"):
            assert f'"{command}": Command<' in text
        assert "/** The server's time (UTC). */" in text
        none = http.get("/v1/typescript?group=nobody*", headers=AUTH).text
        assert '"demo"' not in none and "interface Services {" in none


def test_the_cli_writes_the_same_declarations(stack: Stack, tmp_path: Path) -> None:
    out = tmp_path / "services.d.ts"
    busgate = Path(sys.prefix) / "bin" / "busgate"
    argv = [str(busgate), "typescript", "--bus", stack.settings.bus_url, "--group", "demo"]
    done = subprocess.run(
        [*argv, "--out", str(out)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    served = httpx.get(f"{stack.url}/v1/typescript?group=demo", headers=AUTH).text
    # Only the first line differs: where the services were read.
    assert out.read_text().splitlines()[1:] == served.splitlines()[1:]
    assert stack.settings.bus_url in out.read_text().splitlines()[0]


GOOD = """
import { Busgate } from "busgate";
const bus = new Busgate("http://localhost:8080");
export async function use(): Promise<number> {
  const demo = await bus.service("demo");
  const now: { epoch_ms: number; iso: string; zone: string } = await demo.time();
  const slept: number = (await demo.sleep({ seconds: 0.1 })).slept;
  let sum = now.epoch_ms + slept;
  for await (const part of demo.count.stream({ n: 2 })) sum += part.i;
  await demo.fail({ rcd: 409, msg: "busy" });
  const other = await bus.service("not-declared");
  await other.anything({ x: 1 });
  return sum;
}
"""

BAD = """
import { Busgate } from "busgate";
const bus = new Busgate("http://localhost:8080");
export async function use(): Promise<void> {
  const demo = await bus.service("demo");
  await demo.fail({ rcd: "409" });
  await demo.nope();
  const wrong: string = (await demo.time()).epoch_ms;
}
"""


def _compile(folder: Path, declarations: str, usage: str) -> subprocess.CompletedProcess[str]:
    folder.mkdir()
    (folder / "services.d.ts").write_text(declarations, encoding="utf-8")
    (folder / "use.ts").write_text(usage, encoding="utf-8")
    config = {
        "compilerOptions": {
            "target": "ES2022",
            "module": "ES2022",
            "moduleResolution": "Bundler",
            "lib": ["ES2022", "DOM", "DOM.Iterable"],
            "types": [],
            "strict": True,
            "noEmit": True,
            "skipLibCheck": True,
            "paths": {"busgate": [str(SDK_DIR / "busgate.d.ts")]},
        },
        "files": ["services.d.ts", "use.ts"],
    }
    (folder / "tsconfig.json").write_text(json.dumps(config), encoding="utf-8")
    return subprocess.run(
        [str(TSC), "-p", str(folder / "tsconfig.json")],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.timeout(600)
def test_the_declarations_type_the_service_calls_in_typescript(
    stack: Stack, tmp_path: Path
) -> None:
    assert TSC.exists(), "TypeScript is not installed: make install (npm ci in clients/js)"
    declarations = httpx.get(f"{stack.url}/v1/typescript", headers=AUTH).text
    good = _compile(tmp_path / "good", declarations, GOOD)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _compile(tmp_path / "bad", declarations, BAD)
    errors = bad.stdout
    assert bad.returncode != 0
    assert re.search(r"use\.ts\(6,.*Type 'string' is not assignable to type 'number'", errors)
    assert re.search(r"use\.ts\(7,.*Property 'nope' does not exist", errors)
    assert re.search(r"use\.ts\(8,.*Type 'number' is not assignable to type 'string'", errors)
