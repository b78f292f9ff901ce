"""busgate as a user installs it: ``pip install`` of the sdist or the wheel, and the Docker image.

``python -m build`` makes the sdist, then the wheel from that sdist (as a release would), from a
copy of this source tree. Each is installed with pip into a fresh venv outside the source tree
(the wheel with the ``pipeline`` extra, the sdist without, compiling the C accelerators), from a
local wheelhouse of the dependencies (``--no-index``: no network, no source tree on the path).
Then, from an empty directory elsewhere, with nothing else on disk:

- the modules load from the venv, with the C accelerators;
- ``busgate run`` on free ports serves the console (``GET /`` and its scripts), the OpenAPI
  document and its ``/docs`` page, the JavaScript client (``/sdk/busgate.js``), and the demo
  service's echo (``POST /v1/request/demo``);
- ``busgate gateway`` on its own, on that bus, serves the same;
- from the wheel, ``busgate report`` runs Spark over a journal that ``busgate broker`` recorded
  of real requests; from the sdist (no ``pipeline`` extra) it says in one line what to install.

The Dockerfile builds and installs the same wheel; where a Docker engine answers, the image is
built and its default command run. Where only the Docker client is installed (our development
machines), that one test skips, saying why (README, "Docker").
"""

from __future__ import annotations

import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
import venv
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

# Whichever test first needs a fixture pays for the build, the wheelhouse or an install.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parent.parent
# Bounds on steps that take seconds on an idle machine, not speed checks (two shared cores).
WAIT = 90.0
INSTALL_TIMEOUT = 600
#: Files the product serves or needs, as paths inside an installed package.
SERVED = [
    "gateway/web/index.html",
    "gateway/web/app.js",
    "gateway/web/style.css",
    "gateway/openapi/openapi.json",
    "gateway/openapi/docs.html",
    "gateway/web/vendor/swagger-ui/swagger-ui-bundle.js",
    "gateway/web/vendor/swagger-ui/LICENSE",
    "gateway/sdk/busgate.js",
    "gateway/sdk/busgate.d.ts",
    "gateway/sdk/node-websocket.js",
    "bus/py.typed",
    "gateway/py.typed",
    "pipeline/py.typed",
    "bus/native/_speedups.pyi",
    "bus/native/_journalscan.pyi",
]
C_SOURCES = ["bus/native/_speedups.c", "bus/native/_journalscan.c"]
ACCELERATORS = ["bus.native._speedups", "bus.native._journalscan"]
# Left out of the copy the distributions are built from: what no checkout has.
_NOT_SOURCE = {
    ".git",
    ".venv",
    "build",
    "dist",
    "htmlcov",
    "var",
    "spark-warehouse",
    "metastore_db",
}
_NOT_SOURCE_ANYWHERE = (
    "__pycache__",
    "node_modules",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
)


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


def run(argv: Sequence[str | Path], *, timeout: float = INSTALL_TIMEOUT, **kwargs: Any) -> str:
    """Run a command; on failure the test fails showing its output."""
    done = subprocess.run(
        [str(arg) for arg in argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **kwargs,
    )
    output = done.stdout + done.stderr
    if done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{output[-6000:]}")
    return output


def _ignore_not_source(folder: str, names: list[str]) -> set[str]:
    top = Path(folder).resolve() == ROOT
    return {
        name
        for name in names
        if (top and name in _NOT_SOURCE)
        or name in _NOT_SOURCE_ANYWHERE
        or name.endswith((".egg-info", ".so", ".pyc"))
    }


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """The sdist and the wheel ``python -m build`` makes (the wheel built from the sdist)."""
    work = tmp_path_factory.mktemp("build")
    source = work / "busgate"
    shutil.copytree(ROOT, source, ignore=_ignore_not_source)
    out = work / "dist"
    # --no-isolation: setuptools and wheel of the dev venv (the dev extra pins what
    # [build-system] requires), so building needs no network.
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, source])
    (sdist,) = out.glob("busgate-*.tar.gz")
    (wheel,) = out.glob("busgate-*.whl")
    return Dists(sdist, wheel)


@pytest.fixture(scope="module")
def wheelhouse(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wheels of every dependency (and of the sdist's build requirements), pinned to the dev venv.

    Kept in the dev venv (``make clean`` removes it): once filled, later runs need no network.
    """
    house = Path(sys.prefix) / "wheelhouse"
    house.mkdir(exist_ok=True)
    frozen = run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"])
    pins = [line for line in frozen.splitlines() if re.fullmatch(r"[\w.-]+==[\w.+!-]+", line)]
    constraints = tmp_path_factory.mktemp("pins") / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n", encoding="utf-8")
    wanted = [f"{dists.wheel}[pipeline]", "setuptools>=77", "wheel"]
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", house]
    pip_wheel += ["--find-links", house, "-c", constraints, *wanted]
    offline = subprocess.run(
        [str(arg) for arg in [*pip_wheel, "--no-index"]],
        capture_output=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    if offline.returncode != 0:  # the first run, or a new dependency: fetch what is missing
        run(pip_wheel)
    for stale in house.glob("busgate-*"):  # only the dependencies stay
        stale.unlink()
    return house


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything pointing at the source tree or a busgate setting."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("BUSGATE_", "PYTHON", "VIRTUAL_ENV", "PIP_", "SPARK_", "PYSPARK_"))
    }
    # Bytecode is written (into the venv, the only Python on the path): the installs skip
    # compiling (see install()), so each process would else compile every module it imports.
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


@dataclass(frozen=True)
class Installed:
    """A fresh venv with busgate installed by pip, and an empty directory to run it from."""

    venv: Path
    workdir: Path

    def bin(self, name: str) -> Path:
        return self.venv / "bin" / name

    def run(self, *argv: str | Path, timeout: float = WAIT) -> str:
        return run(argv, cwd=self.workdir, env=clean_env(), timeout=timeout)


def install(target: Path, wheelhouse: Path, tmp: Path, extras: str = "") -> Installed:
    """``python -m venv`` then ``pip install TARGET[EXTRAS]``, the wheelhouse as the only index."""
    home = tmp / "venv"
    # The test run's pip installs into the venv (``pip --python``): the same install, without
    # ensurepip's copy of pip in each venv (~10 s of CPU). --no-compile: pip would byte-compile
    # every module of every dependency (pyspark, pandas, matplotlib: ~35 s of CPU, most never
    # imported here); the venv's processes compile what they import as they import it.
    venv.EnvBuilder(with_pip=False, clear=True).create(home)
    pip = [sys.executable, "-m", "pip", "--python", home / "bin" / "python", "install", "-q"]
    pip += ["--disable-pip-version-check", "--no-compile"]
    # --no-index: the dependencies (and, for the sdist, setuptools and wheel for pip's isolated
    # build) come from the wheelhouse; busgate from TARGET alone.
    wanted = f"{target}[{extras}]" if extras else str(target)
    run([*pip, "--no-index", "--find-links", wheelhouse, wanted], cwd=tmp, env=clean_env())
    workdir = tmp / "elsewhere"
    workdir.mkdir()
    return Installed(home, workdir)


@pytest.fixture(scope="module")
def from_wheel(
    dists: Dists, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel-install")
    return install(dists.wheel, wheelhouse, tmp, extras="pipeline")


@pytest.fixture(scope="module")
def from_sdist(
    dists: Dists, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Installed:
    return install(dists.sdist, wheelhouse, tmp_path_factory.mktemp("sdist-install"))


# --- a running process and HTTP ------------------------------------------------------------------


class Process:
    """A child process whose output lines are read as they come (stderr merged into stdout)."""

    def __init__(self, argv: Sequence[str | Path], cwd: Path, env: Mapping[str, str]) -> None:
        self.popen = subprocess.Popen(
            [str(arg) for arg in argv],
            cwd=cwd,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        assert self.popen.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.popen.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._new.put(line)
        self._new.put(None)

    def close(self) -> None:
        """Kill the process if it still runs; close its pipe once read to the end."""
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(WAIT)
        self._reader.join(WAIT)
        assert self.popen.stdout is not None
        self.popen.stdout.close()

    def wait_for(self, pattern: str) -> re.Match[str]:
        """The first output line matching ``pattern``; fails if the process ends or stays silent."""
        for line in self.lines:
            if found := re.search(pattern, line):
                return found
        deadline = time.monotonic() + WAIT
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._new.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self.popen.wait(WAIT)
                self.fail(f"exited with {self.popen.returncode} before printing {pattern!r}")
            self.lines.append(line)
            if found := re.search(pattern, line):
                return found
        self.fail(f"printed no {pattern!r} within {WAIT:g} s")

    def fail(self, why: str) -> Any:
        output = "".join(self.lines)[-6000:]
        pytest.fail(f"{' '.join(map(str, self.popen.args))}: {why}; its output:\n{output}")

    def interrupt(self) -> int:
        """Ctrl-C, and the exit status."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(WAIT)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(WAIT)
                self.fail("did not stop on Ctrl-C")
        code = self.popen.returncode
        assert isinstance(code, int)
        return code


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in reversed(started):
        process.close()


def http(
    method: str, url: str, body: dict[str, Any] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            headers = {k.lower(): v for k, v in response.headers.items()}
            return response.status, headers, response.read()
    except urllib.error.HTTPError as exc:
        with exc:  # it holds the response's socket
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def echo_when_ready(base: str) -> dict[str, Any]:
    """The demo service's echo through the gateway, once the gateway has the bus."""
    deadline = time.monotonic() + WAIT
    while True:
        status, _, body = http("POST", f"{base}/v1/request/demo", {"CMD": "echo", "x": 1})
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # 503 while the gateway connects or the demo's first heartbeat is due
    assert status == 200, body
    answer = json.loads(body)
    assert isinstance(answer, dict)
    return answer


def check_serves_the_product(base: str) -> None:
    """What a user of the gateway sees: the console, the API document, the /docs page, echo."""
    status, headers, page = http("GET", f"{base}/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b"<title>busgate console</title>" in page
    for asset in ("app.js", "style.css"):  # what the page loads
        status, _, body = http("GET", f"{base}/{asset}")
        assert status == 200 and body == (ROOT / "gateway" / "web" / asset).read_bytes()
    status, headers, document = http("GET", f"{base}/openapi.json")
    assert status == 200 and headers["content-type"] == "application/json"
    served = json.loads(document)
    packaged = json.loads((ROOT / "gateway" / "openapi" / "openapi.json").read_bytes())
    # The served document names the address it was fetched at as its server.
    assert served.pop("servers") == [{"url": base, "description": "this gateway"}]
    packaged.pop("servers")
    # Plus a path per live command (the demo's, once the directory has heard it).
    live = [path for path in served["paths"] if path not in packaged["paths"]]
    assert all(path.startswith("/v1/demo/") for path in live), live
    for path in live:
        del served["paths"][path]
    assert served == packaged and served["openapi"].startswith("3.1")
    status, _, docs = http("GET", f"{base}/docs")
    assert status == 200 and b"/openapi.json" in docs
    status, _, explorer = http("GET", f"{base}/docs/assets/swagger-ui-bundle.js")
    vendored = ROOT / "gateway" / "web" / "vendor" / "swagger-ui" / "swagger-ui-bundle.js"
    assert status == 200 and explorer == vendored.read_bytes()
    for module in ("busgate.js", "client.js"):  # the JavaScript client (gateway/routes/sdk.py)
        status, _, body = http("GET", f"{base}/sdk/{module}")
        assert status == 200 and body == (ROOT / "gateway" / "sdk" / module).read_bytes()
    assert echo_when_ready(base)["payload"] == {"x": 1}


# --- what is in the distributions ----------------------------------------------------------------


def test_the_wheel_holds_what_the_product_serves(dists: Dists) -> None:
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA")))
    assert {*SERVED, *C_SOURCES} <= names, sorted({*SERVED, *C_SOURCES} - names)
    for module in ACCELERATORS:  # compiled for this platform
        stem = module.replace(".", "/")
        assert any(n.startswith(stem + ".") and n.endswith(".so") for n in names), module
    web = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "gateway" / "web").rglob("*"))
    assert set(web) - {w for w in web if (ROOT / w).is_dir()} <= names
    assert not [n for n in names if n.startswith(("tests/", "web/", "openapi/", "docs/"))]
    text = metadata.decode()
    for line in ("Requires-Python: >=3.11", "Provides-Extra: pipeline", "Provides-Extra: dev"):
        assert line in text
    assert "Classifier: Typing :: Typed" in text and "Keywords:" in text
    assert "## Install as a package" in text  # the README is the long description


def test_the_sdist_holds_the_sources_to_build_it(dists: Dists) -> None:
    import tarfile

    with tarfile.open(dists.sdist) as sdist:
        top = dists.sdist.name.removesuffix(".tar.gz")
        names = {n.removeprefix(top + "/") for n in sdist.getnames()}
    assert {*SERVED, *C_SOURCES, "pyproject.toml", "README.md", "MANIFEST.in"} <= names
    assert {"docs/PROTOCOL.md", "tests/conftest.py", "tests/test_package.py"} <= names
    assert not [n for n in names if n.endswith((".so", ".pyc"))]


# --- installed into a fresh venv, run from elsewhere ---------------------------------------------


@pytest.fixture(scope="module", params=["wheel", "sdist"])
def installed(request: pytest.FixtureRequest) -> Installed:
    """Each install in turn: the wheel (with the pipeline extra), the sdist (without)."""
    found = request.getfixturevalue(f"from_{request.param}")
    assert isinstance(found, Installed)
    return found


def test_the_modules_load_from_the_venv_with_the_accelerators(installed: Installed) -> None:
    modules = ["bus", "gateway", "pipeline", *ACCELERATORS]
    script = (
        "import importlib, json; "
        f"print(json.dumps({{m: importlib.import_module(m).__file__ for m in {modules!r}}}))"
    )
    found = json.loads(installed.run(installed.bin("python"), "-c", script))
    home = installed.venv.resolve()
    for module, path in found.items():  # the venv's copy, never the source tree
        assert Path(path).resolve().is_relative_to(home), (module, path)


def start_run(installed: Installed, processes: list[Process], *flags: str) -> Process:
    """``busgate run`` with every port free (0), from a directory that holds nothing."""
    argv = [installed.bin("busgate"), "run", "--port", "0", "--bus-port", "0", "--mop-port", "0"]
    product = Process([*argv, "--objects-port", "0", *flags], installed.workdir, clean_env())
    processes.append(product)
    product.wait_for(r"Ctrl-C stops")  # the banner's last line: everything started
    return product


def stop(process: Process) -> None:
    """Ctrl-C: it stops cleanly, with no traceback printed."""
    assert process.interrupt() == 0
    assert not [line for line in process.lines if "Traceback" in line], process.lines


def test_busgate_run_serves_the_console_the_api_and_the_demo(
    installed: Installed, processes: list[Process]
) -> None:
    product = start_run(installed, processes)
    base = product.wait_for(r"console\s+http://localhost(:\d+)/").expand(r"http://127.0.0.1\1")
    check_serves_the_product(base)
    stop(product)
    product.wait_for(r"busgate: stopped")


def test_busgate_gateway_alone_serves_the_same(
    installed: Installed, processes: list[Process]
) -> None:
    bus = start_run(installed, processes, "--no-gateway")  # the broker and the demo service
    bus_url = bus.wait_for(r"Broker: (bus://[\d.:]+)").group(1)
    argv = [installed.bin("busgate"), "gateway", "--bus", bus_url, "--port", "0"]
    # Its /ws links to the session's closed port, not to whatever holds 7890 on the bus host.
    link = os.environ["BUSGATE_OBJECTS_LINK"]
    gateway = Process(argv, installed.workdir, clean_env(BUSGATE_OBJECTS_LINK=link))
    processes.append(gateway)
    # uvicorn prints the port it was given.
    check_serves_the_product(gateway.wait_for(r"running on (http://127\.0\.0\.1:\d+)").group(1))
    stop(gateway)
    stop(bus)


def request_demo(
    installed: Installed, bus_url: str, *args: str
) -> subprocess.CompletedProcess[str]:
    argv = [installed.bin("busgate"), "request", "demo", *args, "--bus", bus_url]
    return subprocess.run(
        [str(arg) for arg in argv],
        cwd=installed.workdir,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )


def report_table(page: str, name: str) -> list[dict[str, str]]:
    """The rows of one table of the report page, by column name."""
    found = re.search(rf"<h2 id='{name}'>.*?<table>(.*?)</table>", page, re.S)
    assert found, f"no {name} table on the report page"
    rows = re.findall(r"<tr>(.*?)</tr>", found.group(1), re.S)
    head = re.findall(r"<th>(.*?)</th>", rows[0])
    return [dict(zip(head, re.findall(r"<td>(.*?)</td>", row), strict=True)) for row in rows[1:]]


def test_busgate_report_from_the_wheel_with_the_pipeline_extra(
    from_wheel: Installed, processes: list[Process]
) -> None:
    # A journal of real traffic: the broker records it, the demo service answers.
    argv = [from_wheel.bin("busgate"), "broker", "--open", "--port", "0", "--journal", "journal"]
    broker = Process(argv, from_wheel.workdir, clean_env())
    processes.append(broker)
    bus_url = "bus://" + broker.wait_for(r"listening on ([\d.]+:\d+)").group(1)
    demo = Process(
        [from_wheel.bin("busgate"), "demo", "--bus", bus_url], from_wheel.workdir, clean_env()
    )
    processes.append(demo)
    deadline = time.monotonic() + WAIT
    while (first := request_demo(from_wheel, bus_url, "echo", "x=0")).returncode != 0:
        assert time.monotonic() < deadline, first.stderr  # no responders until the demo is up
        time.sleep(0.2)
    for x in (1, 2):
        assert request_demo(from_wheel, bus_url, "echo", f"x={x}").returncode == 0
    assert request_demo(from_wheel, bus_url, "fail", "rcd=409").returncode == 1
    stop(demo)
    stop(broker)

    out = run(
        [from_wheel.bin("busgate"), "report", "--journal", "journal", "--out", "report"],
        cwd=from_wheel.workdir,
        env=clean_env(),
        timeout=INSTALL_TIMEOUT,
    )
    report = from_wheel.workdir / "report"
    assert "report/index.html" in out
    page = (report / "index.html").read_text(encoding="utf-8")
    # The three echoes answered, the fail NAKed by the service with its 409. (An echo sent
    # before the demo service was up is the broker's 503 no-responders, "central".)
    outcomes = {(row["GRP"], row["CMD"]): row for row in report_table(page, "outcomes")}
    assert outcomes["demo", "echo"]["acks"] == "3"
    assert (outcomes["demo", "fail"]["requests"], outcomes["demo", "fail"]["naks"]) == ("1", "1")
    naks = {(row["CMD"], row["RCD"], row["responder"]) for row in report_table(page, "naks")}
    # the NAK names who answered: the demo's post office (open mode, no name: anonymous)
    assert naks - {("echo", "503", "central")} == {("fail", "409", "anonymous")}
    assert (report / "outcomes.svg").read_text(encoding="utf-8").startswith("<svg ")
    assert list((report / "tables" / "outcomes").glob("*.parquet"))


def test_busgate_report_without_the_pipeline_extra_says_what_to_install(
    from_sdist: Installed,
) -> None:
    assert "--journal" in from_sdist.run(from_sdist.bin("busgate"), "report", "--help")
    done = subprocess.run(
        [from_sdist.bin("busgate"), "report", "--journal", "journal", "--out", "report"],
        cwd=from_sdist.workdir,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "pyspark is not installed" in done.stderr
    assert "pip install 'busgate[pipeline]'" in done.stderr


# --- the Docker image ----------------------------------------------------------------------------


def docker_engine() -> str | None:
    """Why no Docker engine can be used here, or None when one answers."""
    docker = shutil.which("docker")
    if docker is None:
        return "no docker command on PATH"
    try:
        done = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    if done.returncode != 0 or not done.stdout.strip():
        lines = (done.stderr or done.stdout).strip().splitlines()
        said = lines[-1] if lines else "no output"
        return f"`docker info` finds no Docker engine, only the client ({said})"
    return None


@pytest.mark.timeout(3600)
def test_the_docker_image_runs_its_default_command() -> None:
    reason = docker_engine()
    if reason is not None:
        pytest.skip(f"cannot build and run the image: {reason}")
    tag = f"busgate-test:{uuid.uuid4().hex[:12]}"
    name = f"busgate-test-{uuid.uuid4().hex[:12]}"
    run(["docker", "build", "--tag", tag, ROOT], timeout=3000)
    try:
        run(["docker", "run", "--detach", "--name", name, tag])  # CMD: busgate run
        # busgate run listens on the container's loopback: ask from inside.
        probe = (
            "import json, sys, urllib.request as u\n"
            "base = 'http://127.0.0.1:8080'\n"
            "page = u.urlopen(base + '/', timeout=5).read()\n"
            "doc = json.loads(u.urlopen(base + '/openapi.json', timeout=5).read())\n"
            'req = u.Request(base + \'/v1/request/demo\', data=b\'{"CMD":"echo","x":1}\',\n'
            "                headers={'Content-Type': 'application/json'})\n"
            "answer = json.loads(u.urlopen(req, timeout=5).read())\n"
            "print(json.dumps([b'busgate console' in page, doc['openapi'], answer['payload']]))\n"
        )
        deadline = time.monotonic() + WAIT
        while True:
            done = subprocess.run(
                ["docker", "exec", name, "python", "-c", probe],
                capture_output=True,
                text=True,
                timeout=WAIT,
                check=False,
            )
            if done.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr + logs.stdout + logs.stderr
        seen, version, payload = json.loads(done.stdout)
        assert seen and version.startswith("3.1") and payload == {"x": 1}
        assert "Traceback" not in logs.stdout + logs.stderr
        # The image installs the C accelerators and the pipeline extra, as the wheel test does.
        imports = "import bus.native._speedups, bus.native._journalscan, pyspark"
        run(["docker", "exec", name, "python", "-c", imports])
    finally:
        subprocess.run(["docker", "rm", "--force", name], capture_output=True, check=False)
        subprocess.run(["docker", "rmi", "--force", tag], capture_output=True, check=False)
