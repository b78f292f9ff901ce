"""deploy/: the Grafana dashboard and the Prometheus configuration, checked against our endpoints.

No Grafana or Prometheus runs here, so the files are read: the dashboard is valid JSON that
Grafana provisions, and every metric (and label) each of its queries reads is one that the real
endpoints expose: a broker with a journal and its monitoring port, and a gateway under uvicorn
with authentication on, both scraped after real traffic. The Prometheus configuration scrapes
the compose services on the ports they serve ``/metrics`` on, under the job names the
dashboard queries. A metric renamed in the code without the dashboard fails here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bus.broker import Broker, BrokerConfig
from bus.broker.config import JournalSetting
from bus.broker.metrics import MetricsServer, start_metrics
from gateway.process.settings import ApiKey
from tests.gateway.conftest import Stack, base_settings, running_stack
from tests.test_compose import SERVICES, as_argv, flag_value

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "busgate.json"
PROMETHEUS = ROOT / "deploy" / "prometheus.yml"
DATASOURCES = ROOT / "deploy" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = ROOT / "deploy" / "grafana" / "provisioning" / "dashboards" / "busgate.yml"
#: Series Prometheus makes itself, and labels it adds to every scraped series.
PROMETHEUS_SERIES = frozenset({"up"})
PROMETHEUS_LABELS = frozenset({"job", "instance"})
_KEYWORDS = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right", "bool"})
_KEYWORDS |= {"and", "or", "unless", "offset"}


def load_dashboard() -> dict[str, Any]:
    document = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of the dashboard."""
    found = []
    for panel in load_dashboard()["panels"]:
        for target in panel.get("targets", []):
            found.append((panel["title"], target["expr"]))
    return found


def read_query(expr: str) -> tuple[set[str], set[str], set[str]]:
    """The metric names, label names and ``job`` values a PromQL expression reads."""
    text = re.sub(r"\$__\w+", "1m", expr)  # Grafana's variables, e.g. $__rate_interval
    jobs = set(re.findall(r'\bjob\s*=~?\s*"([^"]*)"', text))
    labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", text))
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    for clause in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", text):
        labels |= {name.strip() for name in clause.split(",") if name.strip()}
    text = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", text)
    names = {
        match.group(1)
        for match in re.finditer(r"(?<![\w.])([A-Za-z_][\w:]*)(\s*\()?", text)
        if not match.group(2) and match.group(1) not in _KEYWORDS
    }
    return names, labels, jobs


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = load_dashboard()
    assert dashboard["uid"] == "busgate" and dashboard["title"] == "busgate"
    assert isinstance(dashboard["schemaVersion"], int)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 12
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            refs = [t["refId"] for t in panel["targets"]]
            assert len(refs) == len(set(refs)), panel["title"]


def test_grafana_provisions_the_dashboard_and_the_data_source() -> None:
    datasources = yaml.safe_load(DATASOURCES.read_text())["datasources"]
    assert [d["type"] for d in datasources] == ["prometheus"]
    assert datasources[0]["url"] == "http://prometheus:9090"
    assert datasources[0]["isDefault"] is True
    variable = load_dashboard()["templating"]["list"][0]
    assert variable["current"]["value"] == datasources[0]["uid"]
    provider = yaml.safe_load(PROVIDERS.read_text())["providers"][0]
    grafana = SERVICES["grafana"]
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"]}
    assert (ROOT / mounts[provider["options"]["path"]] / DASHBOARD.name).is_file()
    assert (ROOT / mounts["/etc/grafana/provisioning"] / "datasources").is_dir()
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"


def test_prometheus_scrapes_the_compose_services_where_they_serve_metrics() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    jobs = {
        job["job_name"]: {t for c in job["static_configs"] for t in c["targets"]}
        for job in config["scrape_configs"]
    }
    gateways = {
        f"{name}:{flag_value(as_argv(service['command']), '--port')}"
        for name, service in SERVICES.items()
        if name.startswith("gateway")
    }
    broker = as_argv(SERVICES["broker"]["command"])
    assert jobs == {
        "busgate-gateway": gateways,
        "busgate-broker": {f"broker:{flag_value(broker, '--metrics-port')}"},
    }
    mount = SERVICES["prometheus"]["volumes"][0].split(":")
    assert (ROOT / mount[0]).resolve() == PROMETHEUS and mount[
        1
    ] == "/etc/prometheus/prometheus.yml"
    for _, expr in queries():
        for job in read_query(expr)[2]:
            assert any(re.fullmatch(job, name) for name in jobs), f"no job matches {job!r}"


def test_reading_a_query() -> None:
    names, labels, jobs = read_query(
        'histogram_quantile(0.99, sum by (group, le) (rate(a_bucket{job="x",outcome!="ack"}'
        "[$__rate_interval]))) / ignoring (instance) b_total offset 5m"
    )
    assert names == {"a_bucket", "b_total"}
    assert labels == {"group", "le", "job", "outcome", "instance"}
    assert jobs == {"x"}


Exposed = dict[str, set[str]]  # sample name -> its label names


def _exposition(text: str) -> Exposed:
    exposed: Exposed = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            exposed.setdefault(sample.name, set()).update(sample.labels)
    return exposed


@pytest.fixture(scope="module")
def exposed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Exposed]:
    """What the real gateway and broker expose after real traffic."""
    settings = base_settings(api_keys=(ApiKey("ops", "k-ops"),))
    journal = JournalSetting(str(tmp_path_factory.mktemp("journal")), fsync="always")
    with running_stack(settings) as stack:
        server = stack.call(_journaled_broker(stack, journal))
        try:
            yield _traffic_and_scrape(stack, server)
        finally:
            stack.call(server.stop())


async def _journaled_broker(stack: Stack, journal: JournalSetting) -> MetricsServer:
    await stack.stop_broker()
    config = BrokerConfig(host="127.0.0.1", port=stack.broker_port, open=True, journal=journal)
    stack.broker = Broker(config)
    await stack.broker.start()
    await stack.wait_ready()
    return await start_metrics(stack.broker, 0)


def _traffic_and_scrape(stack: Stack, server: MetricsServer) -> Exposed:
    key = {"X-API-Key": "k-ops"}
    with httpx.Client(base_url=stack.url, timeout=15.0) as http:
        for _ in range(100):  # the demo service reconnects to the new broker
            if http.post("/v1/request/demo", json={"CMD": "echo"}, headers=key).status_code == 200:
                break
        assert http.post("/v1/request/demo", json={"CMD": "fail"}, headers=key).status_code >= 400
        assert http.post("/v1/publish/a.b", json={"x": 1}, headers=key).status_code == 202
        assert http.get("/v1/services", headers={"X-API-Key": "wrong"}).status_code == 401
        gateway = _exposition(http.get("/metrics").text)
    broker = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=15.0)
    exposed = _exposition(broker.text)
    for name, labels in gateway.items():
        exposed.setdefault(name, set()).update(labels)
    return exposed


def test_every_metric_the_dashboard_reads_is_exposed(exposed: Exposed) -> None:
    assert "busgate_gateway_requests_total" in exposed
    assert "busgate_broker_journal_fsyncs_total" in exposed
    for title, expr in queries():
        names, labels, _ = read_query(expr)
        assert names, f"{title}: no metric in {expr!r}"
        for name in names - PROMETHEUS_SERIES:
            assert name in exposed, f"{title}: {name} is not exposed by the gateway or broker"
        offered = set().union(*(exposed.get(name, set()) for name in names))
        missing = labels - offered - PROMETHEUS_LABELS
        assert not missing, f"{title}: labels {missing} are not on {names}"


def test_the_dashboard_shows_every_busgate_metric(exposed: Exposed) -> None:
    # The other direction: nothing we export for operators is left off the dashboard.
    read = set().union(*(read_query(expr)[0] for _, expr in queries()))
    ours = {n for n in exposed if n.startswith("busgate_") and not n.endswith("_created")}
    family = {re.sub(r"_(bucket|sum|count|created)$", "", name) for name in read}
    left_out = {
        name
        for name in ours
        if name not in read and re.sub(r"_(bucket|sum|count|created)$", "", name) not in family
    }
    assert not left_out, f"busgate metrics on no panel: {sorted(left_out)}"
