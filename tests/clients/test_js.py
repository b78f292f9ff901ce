"""The JavaScript client (``clients/js``): its own tests under Node, and its build.

``node --test`` runs ``clients/js/test/*.test.mjs``: the sans-I/O units, and the client against
a real broker (with a journal), demo service and gateways that the test starts as processes on
free ports, with this venv's ``busgate`` (``BUSGATE_BIN``), killing and restarting a gateway
under a subscription and an Object System connection. The module they import is the one the
gateway serves and the Python package ships, ``gateway/sdk/``; the second test checks that it is
exactly what TypeScript makes of ``clients/js/src`` (``npm run build`` refreshes it).
"""

from __future__ import annotations

import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.conftest import base_settings, running_stack

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "js"
SDK = ROOT / "gateway" / "sdk"
NODE = shutil.which("node")
TSC = PACKAGE / "node_modules" / ".bin" / "tsc"
README = ROOT / "README.md"

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (make install)")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_node_suite_passes() -> None:
    tests = sorted(str(path.relative_to(PACKAGE)) for path in (PACKAGE / "test").glob("*.test.mjs"))
    assert tests, "no Node test files"
    env = {**os.environ, "BUSGATE_BIN": str(Path(sys.prefix) / "bin" / "busgate")}
    done = subprocess.run(
        [str(NODE), "--test", "--test-force-exit", "--test-reporter=spec", *tests],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-12000:]
    assert "ℹ fail 0" in report and "ℹ pass 0" not in report, report[-3000:]


@pytest.mark.timeout(300)
def test_served_module_is_the_build_of_the_sources(tmp_path: Path) -> None:
    assert TSC.exists(), "TypeScript is not installed: make install (npm ci in clients/js)"
    out = tmp_path / "dist"
    done = subprocess.run(
        [str(TSC), "-p", "tsconfig.json", "--outDir", str(out)],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    built = sorted(p.name for p in out.iterdir())
    served = sorted(p.name for p in SDK.iterdir() if p.name.endswith((".js", ".d.ts")))
    assert served == built, "gateway/sdk/ is stale: run `npm run build` in clients/js"
    _, stale, errors = filecmp.cmpfiles(out, SDK, built, shallow=False)
    assert not stale and not errors, f"stale in gateway/sdk/ (npm run build in clients/js): {stale}"


def _node_quick_start() -> str:
    section = README.read_text(encoding="utf-8").split("## JavaScript and TypeScript", 1)[1]
    after = section.split("In Node, install the package", 1)[1]
    return after.split("```sh\n", 1)[1].split("```", 1)[0]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_readmes_node_quick_start_works_as_printed(tmp_path: Path) -> None:
    assert TSC.exists(), "TypeScript is not installed: make install (npm ci in clients/js)"
    # A copy of clients/js (its node_modules linked), so the work tree stays as it was.
    work = tmp_path / "busgate"
    shutil.copytree(
        PACKAGE,
        work / "clients" / "js",
        ignore=shutil.ignore_patterns("node_modules", "dist", "*.tgz"),
    )
    (work / "clients" / "js" / "node_modules").symlink_to(PACKAGE / "node_modules")
    with running_stack(base_settings()) as stack:
        script = _node_quick_start().replace("http://localhost:8080", stack.url)
        script = script.replace("localhost:8080", stack.url)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work,
            capture_output=True,
            text=True,
            timeout=540,
            check=False,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = done.stdout.splitlines()
    assert printed[-5:] == ["{ x: 1 }", "{ i: 1, n: 2 }", "{ i: 2, n: 2 }", "409 nak", "UTC"], (
        done.stdout
    )
    declarations = (work / "hello" / "busgate-services.d.ts").read_text(encoding="utf-8")
    assert '"demo": {' in declarations and '"time": Command<' in declarations
