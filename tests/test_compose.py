"""docker-compose.yml and the Dockerfile, checked against the real installed ``busgate`` CLI.

No Docker engine runs here, so these tests read the files: the services of issue 8 are there,
every ``busgate`` command they run (and every flag they pass) exists in the CLI as installed,
host ports do not clash, long-running services have health checks and the gateways' checks hit
their own ``/healthz``. If the CLI and the compose file drift apart, a test here fails.
``tests/test_topology.py`` then runs each service's command, environment and health check as a
local process, so a flag the CLI parses but a service cannot start with fails there.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from bus.discovery.nats_subjects import url_replicas
from bus.link.bus_url import parse_bus_url

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
NGINX_CONF = ROOT / "deploy" / "nginx.conf"
BUSGATE = Path(sys.executable).with_name("busgate")  # the console script of the venv

NATS_NODES = ("nats1", "nats2", "nats3")
REQUIRED_SERVICES = {
    *NATS_NODES, "broker", "gateway1", "gateway2", "demo", "report", "journal",
    "journal-standby", "spark-master", "spark-worker", "spark",
}  # fmt: skip
#: The JVM daemons the Spark services run (tests/pipeline/test_standalone_cluster.py starts them).
SPARK_DAEMONS = {
    "spark-master": "org.apache.spark.deploy.master.Master",
    "spark-worker": "org.apache.spark.deploy.worker.Worker",
}
_VARIABLE = re.compile(r"\$\{(\w+)(:?-([^}]*))?\}")


def load_compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


SERVICES: dict[str, dict[str, Any]] = load_compose()["services"]


def interpolate(text: str, env: Mapping[str, str] | None = None) -> str:
    """Resolve ``${VAR:-default}`` as compose does, with ``env`` (default: every VAR unset)."""
    given = env or {}
    return _VARIABLE.sub(lambda m: given.get(m.group(1)) or m.group(3) or "", text)


def as_argv(command: str | list[str], env: Mapping[str, str] | None = None) -> list[str]:
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    return [interpolate(str(arg), env) for arg in argv]


@functools.cache
def cli_help(*args: str) -> tuple[int, str]:
    """Exit code and output of ``busgate ARGS --help`` (the real installed console script)."""
    done = subprocess.run(
        [str(BUSGATE), *args, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    return done.returncode, done.stdout + done.stderr


@functools.cache
def cli_subcommands() -> frozenset[str]:
    """The subcommands that ``busgate --help`` lists (argparse: 4-space indented names)."""
    code, text = cli_help()
    assert code == 0, text
    listed = text.split("positional arguments:", 1)[-1].split("options:", 1)[0]
    return frozenset(re.findall(r"^ {4}([a-z][\w-]*)", listed, re.M))


def busgate_commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every busgate command in the compose file and the Dockerfile."""
    found: list[tuple[str, list[str]]] = []
    for name, service in SERVICES.items():
        if "command" in service and as_argv(service["command"])[:1] == ["busgate"]:
            found.append((f"{name}.command", as_argv(service["command"])))
        test = service.get("healthcheck", {}).get("test", [])
        if isinstance(test, list) and test[1:2] == ["busgate"]:
            found.append((f"{name}.healthcheck", as_argv(test[1:])))
    found.append(("Dockerfile CMD", dockerfile_cmd()))
    return found


def dockerfile_cmd() -> list[str]:
    match = re.search(r"^CMD\s+(\[.*\])\s*$", DOCKERFILE.read_text(encoding="utf-8"), re.M)
    assert match, "the Dockerfile has no exec-form CMD"
    argv = yaml.safe_load(match.group(1))
    assert isinstance(argv, list)
    return [str(arg) for arg in argv]


def host_ports(service: dict[str, Any]) -> list[tuple[int, int]]:
    """(host, container) ports of a service's short-syntax ``ports``."""
    pairs = []
    for entry in service.get("ports", []):
        parts = interpolate(str(entry)).split("/")[0].split(":")
        pairs.append((int(parts[-2]), int(parts[-1])))
    return pairs


def flag_value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# --- the services ---------------------------------------------------------------------------------


def test_compose_has_the_services_of_the_topology() -> None:
    assert REQUIRED_SERVICES <= set(SERVICES)
    for node in NATS_NODES:
        assert SERVICES[node]["image"].startswith("nats:")


@pytest.mark.parametrize("node", NATS_NODES)
def test_each_nats_node_runs_jetstream_with_its_store_in_its_own_volume(node: str) -> None:
    # Confirmed publishes and durable subscriptions on nats:// need JetStream (PROTOCOL 10.1);
    # a store outside a volume would be lost with the container, one shared by two nodes broken.
    argv = as_argv(SERVICES[node]["command"])
    assert "-js" in argv
    store = flag_value(argv, "-sd")
    mounts = [str(volume).split(":") for volume in SERVICES[node]["volumes"]]
    own = [name for name, path in mounts if store.startswith(path)]
    assert len(own) == 1 and own[0] in load_compose()["volumes"]
    others = [str(v).split(":")[0] for n in NATS_NODES if n != node for v in SERVICES[n]["volumes"]]
    assert own[0] not in others


def test_the_nats_nodes_form_one_cluster() -> None:
    # One cluster name, a name of its own for each node (JetStream's peers), and routes to
    # every node's cluster port, which each node listens on and exposes to the others.
    argvs = {node: as_argv(SERVICES[node]["command"]) for node in NATS_NODES}
    assert {flag_value(argv, "--cluster_name") for argv in argvs.values()} == {"busgate"}
    assert [flag_value(argvs[node], "-n") for node in NATS_NODES] == list(NATS_NODES)
    for node, argv in argvs.items():
        port = int(flag_value(argv, "--cluster").rsplit(":", 1)[1])
        assert str(port) in [str(p) for p in SERVICES[node].get("expose", [])]
        routes = flag_value(argv, "--routes").split(",")
        assert routes == [f"nats://{other}:{port}" for other in NATS_NODES]


def test_every_bus_url_is_the_whole_cluster_with_three_replicas() -> None:
    # What bus/link/bus_url.py reads: every node (a process whose node dies moves to another) and
    # ?replicas=3 (the stream survives the loss of a node), in every service that names NATS.
    urls = {
        url
        for text in strings(load_compose())
        for url in re.findall(r"nats://[^\s\"',\]]*(?:,[^\s\"',\]]+)*", interpolate(text))
        if not url.endswith(":6222")  # the routes between nodes
    }
    assert urls == {"nats://nats1:4222,nats2:4222,nats3:4222?replicas=3"}
    url = urls.pop()
    assert parse_bus_url(url).servers == tuple((node, 4222) for node in NATS_NODES)
    assert url_replicas(url) == 3


@pytest.mark.parametrize("name", sorted(REQUIRED_SERVICES - set(NATS_NODES)))
def test_busgate_services_run_our_image(name: str) -> None:
    service = SERVICES[name]
    assert service.get("build") == "."
    if name in SPARK_DAEMONS:  # shipped in the image's pyspark, where busgate is installed
        assert as_argv(service["command"])[:2] == ["spark-class", SPARK_DAEMONS[name]]
    else:
        assert as_argv(service["command"])[0] == "busgate"


COMMANDS = busgate_commands()


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[where for where, _ in COMMANDS])
def test_command_exists_in_the_real_cli(where: str, argv: list[str]) -> None:
    subcommand = argv[1]
    assert subcommand in cli_subcommands(), (
        f"{where}: `busgate {subcommand}` is not in `busgate --help` "
        f"(it lists: {', '.join(sorted(cli_subcommands())) or 'nothing'})"
    )
    path = [subcommand]
    code, text = cli_help(*path)
    assert code == 0, text
    action = argv[2] if len(argv) > 2 else ""
    if re.search(rf"^ {{4}}{re.escape(action)}\s", text, re.M):  # `busgate journal record ...`
        path.append(action)
        code, text = cli_help(*path)
        assert code == 0, text
    for flag in (arg.split("=", 1)[0] for arg in argv[len(path) + 1 :] if arg.startswith("--")):
        assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", text), (
            f"{where}: `busgate {' '.join(path)}` has no flag {flag}"
        )


def strings(node: object) -> list[str]:
    """Every string value in a parsed YAML document."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return []


def test_every_variable_has_a_default() -> None:
    # `docker compose up` must work with an empty environment.
    used = [m for text in strings(load_compose()) for m in _VARIABLE.finditer(text)]
    assert used, "the bus URL is meant to be a variable"
    for match in used:
        assert match.group(2), f"${{{match.group(1)}}} has no default"


# --- ports and health checks ----------------------------------------------------------------------


def test_host_ports_are_unique() -> None:
    seen: dict[int, str] = {}
    for name, service in SERVICES.items():
        for host, _ in host_ports(service):
            assert host not in seen, f"host port {host} used by {seen[host]} and {name}"
            seen[host] = name
    assert {4222, 4000, 8081, 8082} <= set(seen)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_long_running_services_have_health_checks(name: str) -> None:
    service = SERVICES[name]
    if service.get("restart") == "no":
        return  # a batch job (report) exits when done: nothing to probe
    check = service.get("healthcheck")
    assert check and check.get("test") and not check.get("disable"), f"{name}: no healthcheck"


GATEWAYS = sorted(name for name in SERVICES if name.startswith("gateway"))


@pytest.mark.parametrize("name", GATEWAYS)
def test_gateway_checks_healthz_on_its_own_port(name: str) -> None:
    service = SERVICES[name]
    argv = as_argv(service["command"])
    port = int(flag_value(argv, "--port"))
    assert flag_value(argv, "--host") == "0.0.0.0"
    assert port in {container for _, container in host_ports(service)}
    assert f":{port}/healthz" in " ".join(service["healthcheck"]["test"])
    for node in NATS_NODES:
        assert service["depends_on"][node]["condition"] == "service_healthy"


def test_gateways_share_one_bus_and_sit_behind_the_load_balancer() -> None:
    assert len(GATEWAYS) >= 2
    buses = {flag_value(as_argv(SERVICES[name]["command"]), "--bus") for name in GATEWAYS}
    assert buses == {"nats://nats1:4222,nats2:4222,nats3:4222?replicas=3"}
    for node in NATS_NODES:
        assert 4222 in {container for _, container in host_ports(SERVICES[node])}
    upstream = set(re.findall(r"^\s*server\s+(\w+):8080", NGINX_CONF.read_text(), re.M))
    assert upstream == set(GATEWAYS)


# --- the Dockerfile -------------------------------------------------------------------------------


def test_dockerfile_builds_the_package_on_python_3_11_slim() -> None:
    # The wheel `python -m build` makes, installed with the pipeline extra (what
    # tests/test_package.py installs; it also builds and runs the image where Docker can).
    text = DOCKERFILE.read_text(encoding="utf-8")
    stages = re.findall(r"^FROM (\S+)", text, re.M)
    assert stages and all(re.fullmatch(r"python:3\.11-slim(-bookworm)?", s) for s in stages)
    assert re.search(r"python -m build --outdir /dist \.", text)
    wheel = r"^RUN pip install \"\$\(ls /tmp/dist/busgate-\*\.whl\)\[pipeline\]\""
    assert re.search(wheel, text, re.M)
    assert dockerfile_cmd() == ["busgate", "run"]


def test_broker_publishes_the_ports_it_listens_on() -> None:
    broker = SERVICES["broker"]
    argv = as_argv(broker["command"])
    published = {container for _, container in host_ports(broker)}
    assert {int(flag_value(argv, "--port")), int(flag_value(argv, "--objects-port"))} <= published
    assert f"('127.0.0.1', {flag_value(argv, '--port')})" in " ".join(broker["healthcheck"]["test"])
    # Gateways link to its Object System, which is bridged to the bus they use (NATS).
    for name in GATEWAYS:
        link = SERVICES[name]["environment"]["BUSGATE_OBJECTS_LINK"]
        assert link == f"broker:{flag_value(argv, '--objects-port')}"
    bridged = interpolate(broker["environment"]["BUSGATE_OBJECTS_BUS_URL"])
    assert bridged == flag_value(as_argv(SERVICES["gateway1"]["command"]), "--bus")


def test_the_report_reads_the_journal_of_the_bus_in_use() -> None:
    # On NATS (the default) the recorder writes the journal the report reads; the broker's
    # own journal is another directory (one writer per journal).
    recorder = as_argv(SERVICES["journal"]["command"])
    assert recorder[:3] == ["busgate", "journal", "record"]
    assert flag_value(recorder, "--bus") == "nats://nats1:4222,nats2:4222,nats3:4222?replicas=3"
    report = as_argv(SERVICES["report"]["command"])
    broker = as_argv(SERVICES["broker"]["command"])
    assert flag_value(report, "--journal") == recorder[3]
    assert flag_value(broker, "--journal") != recorder[3]


def test_the_recorder_has_a_standby_on_the_same_journal() -> None:
    # The same command: one journal name (one lease) and one directory (one lock), so one
    # records and the other takes over (docs/PROTOCOL.md 10.2).
    assert as_argv(SERVICES["journal-standby"]["command"]) == as_argv(
        SERVICES["journal"]["command"]
    )
    assert SERVICES["journal-standby"]["volumes"] == SERVICES["journal"]["volumes"]


def test_the_report_runs_on_the_spark_cluster() -> None:
    master = as_argv(SERVICES["spark-master"]["command"])
    url = f"spark://{flag_value(master, '--host')}:{flag_value(master, '--port')}"
    assert url == "spark://spark-master:7077"
    assert flag_value(as_argv(SERVICES["report"]["command"]), "--master") == url
    assert as_argv(SERVICES["spark-worker"]["command"])[2] == url
    # the executors read the journal where the report names it: the worker shares the volume
    assert SERVICES["spark-worker"]["volumes"] == SERVICES["journal"]["volumes"]
    assert SERVICES["report"]["hostname"] == "report"  # the driver, as the executors reach it
    assert "spark-worker" in SERVICES["report"]["depends_on"]
    ui = flag_value(master, "--webui-port")
    assert f"127.0.0.1:{ui}/json/" in " ".join(SERVICES["spark-master"]["healthcheck"]["test"])


@pytest.mark.parametrize("name", GATEWAYS)
def test_the_gateways_rebuild_the_report_through_the_resident_spark(name: str) -> None:
    # `busgate spark serve` on all addresses; each gateway's console report is rebuilt through
    # it (sc://spark:PORT) from the journal the batch report reads, into a directory of its own
    serve = as_argv(SERVICES["spark"]["command"])
    assert serve[:3] == ["busgate", "spark", "serve"] and flag_value(serve, "--host") == "0.0.0.0"
    port = flag_value(serve, "--port")
    assert f"('127.0.0.1', {port})" in " ".join(SERVICES["spark"]["healthcheck"]["test"])
    env = {k: interpolate(str(v)) for k, v in SERVICES[name]["environment"].items()}
    assert env["BUSGATE_SPARK_REMOTE"] == f"sc://spark:{port}"
    report = as_argv(SERVICES["report"]["command"])
    assert env["BUSGATE_GATEWAY_REPORT_JOURNAL"] == flag_value(report, "--journal")
    dirs = {interpolate(str(SERVICES[g]["environment"]["BUSGATE_GATEWAY_REPORT_DIR"]))
            for g in GATEWAYS}  # fmt: skip
    assert len(dirs) == len(GATEWAYS) and flag_value(report, "--out") not in dirs
    # the server reads the journal where the gateways name it (the gateways write the report)
    assert (
        SERVICES["spark"]["volumes"] == SERVICES[name]["volumes"] == SERVICES["journal"]["volumes"]
    )
