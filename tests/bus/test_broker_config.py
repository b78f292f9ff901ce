"""Broker settings: JSON file, BUSGATE_* variables, flags (``bus/broker/config.py``)."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import pytest

from bus.broker.config import BrokerConfig, JournalSetting
from bus.cli import build_parser
from bus.cli.broker import config_from_args
from bus.errors import ConfigError


def _write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_defaults_are_mops() -> None:
    config = BrokerConfig()
    assert (config.port, config.ping_interval_ms, config.connect_timeout_ms) == (4000, 5000, 2000)
    # what a stranger may cost before login (issue 12): small, and bounded in number
    assert (config.max_handshake_bytes, config.max_pending_connections) == (16384, 256)
    assert config.max_pending_per_address == 64
    assert config.max_auth_failures == 10 and config.max_queue_bytes == 64 * 1024 * 1024
    assert config.open is False and config.offices == {}


def test_flags_beat_variables_beat_the_file(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "broker.json",
        {
            "port": 4100,
            "pingIntervalMS": 1000,
            "maxMessageSize": 2048,
            "postOffices": {"a": {"secret": "x", "manager": True}},
        },
    )
    env = {"BUSGATE_PING_INTERVAL_MS": "2000", "BUSGATE_MAX_MESSAGE_SIZE": "4096"}
    config = BrokerConfig.load(path, env=env, max_message_size=8192, port=None)
    assert config.port == 4100  # file
    assert config.ping_interval_ms == 2000  # variable over file
    assert config.max_message_size == 8192  # flag over variable
    assert config.offices == {"a": "x"} and config.managers == {"a"}
    assert config.config_file == str(path)


def test_offices_managers_and_journal_from_variables() -> None:
    env = {
        "BUSGATE_OFFICES": "gw:s1, svc:s2",
        "BUSGATE_MANAGERS": "gw",
        "BUSGATE_OPEN": "yes",
        "BUSGATE_JOURNAL": "/tmp/j",
    }
    config = BrokerConfig.load(env=env)
    assert config.offices == {"gw": "s1", "svc": "s2"}
    assert config.managers == {"gw"} and config.open is True
    assert config.journal == JournalSetting("/tmp/j", ">")


@pytest.mark.parametrize(
    "data",
    [{"port": "4000"}, {"nonsense": 1}, {"postOffices": {"a": {}}}, [], {"pingIntervalMS": 0}],
)
def test_a_bad_file_is_a_config_error(tmp_path: Path, data: object) -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(_write(tmp_path / "bad.json", data), env={})


def test_a_bad_variable_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(env={"BUSGATE_PORT": "four thousand"})
    with pytest.raises(ConfigError):
        BrokerConfig.load(env={"BUSGATE_OFFICES": "nosecret"})


def test_write_then_load_gives_the_same_config(tmp_path: Path) -> None:
    config = BrokerConfig(
        port=4321,
        offices={"a": "x", "b": "y"},
        managers={"a"},
        journal=JournalSetting("/j", "demo*"),
        config_file=str(tmp_path / "out.json"),
    )
    path = config.write()
    again = BrokerConfig.load(path, env={})
    assert again == config


def test_write_without_a_file_is_refused() -> None:
    with pytest.raises(ConfigError):
        BrokerConfig().write()


def test_the_cli_flags_build_the_config(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "broker",
            "--port",
            "0",
            "--office",
            "a:x",
            "--office",
            "b:y",
            "--manager",
            "a",
            "--max-subscriptions",
            "7",
            "--journal",
            str(tmp_path),
        ]
    )
    config = config_from_args(args)
    assert config.port == 0 and config.max_subscriptions == 7
    assert config.offices == {"a": "x", "b": "y"} and config.managers == {"a"}
    assert config.journal == JournalSetting(str(tmp_path), ">")


def test_a_broker_nobody_could_use_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bus.cli import main

    for name in ("BUSGATE_OFFICES", "BUSGATE_OPEN", "BUSGATE_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    assert main(["broker", "--port", "0"]) == 2
    assert "no post office configured" in capsys.readouterr().err


# --- every setting as a flag, a variable and a key of the file ----------------------------------

#: field -> (JSON file entries, BUSGATE_* variables, flags, the value it gives)
EVERY_SETTING: dict[str, tuple[dict[str, object], dict[str, str], list[str], object]] = {
    "host": ({"host": "0.0.0.0"}, {"BUSGATE_HOST": "0.0.0.0"}, ["--host", "0.0.0.0"], "0.0.0.0"),
    "port": ({"port": 4100}, {"BUSGATE_PORT": "4100"}, ["--port", "4100"], 4100),
    "ping_interval_ms": (
        {"pingIntervalMS": 250},
        {"BUSGATE_PING_INTERVAL_MS": "250"},
        ["--ping-interval-ms", "250"],
        250,
    ),
    "max_message_size": (
        {"maxMessageSize": 9999},
        {"BUSGATE_MAX_MESSAGE_SIZE": "9999"},
        ["--max-message-size", "9999"],
        9999,
    ),
    "max_connections": (
        {"maxConnections": 3},
        {"BUSGATE_MAX_CONNECTIONS": "3"},
        ["--max-connections", "3"],
        3,
    ),
    "max_subscriptions": (
        {"maxSubscriptions": 4},
        {"BUSGATE_MAX_SUBSCRIPTIONS": "4"},
        ["--max-subscriptions", "4"],
        4,
    ),
    "max_queue_bytes": (
        {"maxQueueBytes": 5000},
        {"BUSGATE_MAX_QUEUE_BYTES": "5000"},
        ["--max-queue-bytes", "5000"],
        5000,
    ),
    "write_deadline_ms": (
        {"writeDeadlineMS": 700},
        {"BUSGATE_WRITE_DEADLINE_MS": "700"},
        ["--write-deadline-ms", "700"],
        700,
    ),
    "connect_timeout_ms": (
        {"connectTimeoutMS": 700},
        {"BUSGATE_CONNECT_TIMEOUT_MS": "700"},
        ["--connect-timeout-ms", "700"],
        700,
    ),
    "max_pending_connections": (
        {"maxPendingConnections": 9},
        {"BUSGATE_MAX_PENDING_CONNECTIONS": "9"},
        ["--max-pending-connections", "9"],
        9,
    ),
    "max_total_queue_bytes": (
        {"maxTotalQueueBytes": 123456789},
        {"BUSGATE_MAX_TOTAL_QUEUE_BYTES": "123456789"},
        ["--max-total-queue-bytes", "123456789"],
        123456789,
    ),
    "max_pending_per_address": (
        {"maxPendingPerAddress": 7},
        {"BUSGATE_MAX_PENDING_PER_ADDRESS": "7"},
        ["--max-pending-per-address", "7"],
        7,
    ),
    "max_handshake_bytes": (
        {"maxHandshakeBytes": 4096},
        {"BUSGATE_MAX_HANDSHAKE_BYTES": "4096"},
        ["--max-handshake-bytes", "4096"],
        4096,
    ),
    "max_auth_failures": (
        {"maxAuthFailures": 0},
        {"BUSGATE_MAX_AUTH_FAILURES": "0"},
        ["--max-auth-failures", "0"],
        0,
    ),
    "open": ({"open": True}, {"BUSGATE_OPEN": "1"}, ["--open"], True),
    "tls_cert": (
        {"tlsCert": "/c.pem", "tlsKey": "/k.pem"},
        {"BUSGATE_TLS_CERT": "/c.pem", "BUSGATE_TLS_KEY": "/k.pem"},
        ["--tls-cert", "/c.pem", "--tls-key", "/k.pem"],
        "/c.pem",
    ),
    "tls_key": (
        {"tlsCert": "/c.pem", "tlsKey": "/k.pem"},
        {"BUSGATE_TLS_CERT": "/c.pem", "BUSGATE_TLS_KEY": "/k.pem"},
        ["--tls-cert", "/c.pem", "--tls-key", "/k.pem"],
        "/k.pem",
    ),
    "tls_ca": (
        {"tlsCert": "/c.pem", "tlsKey": "/k.pem", "tlsCa": "/ca.pem"},
        {"BUSGATE_TLS_CERT": "/c.pem", "BUSGATE_TLS_KEY": "/k.pem", "BUSGATE_TLS_CA": "/ca.pem"},
        ["--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--tls-ca", "/ca.pem"],
        "/ca.pem",
    ),
    "offices": (
        {"postOffices": {"gw": {"secret": "s1"}}},
        {"BUSGATE_OFFICES": "gw:s1"},
        ["--office", "gw:s1"],
        {"gw": "s1"},
    ),
    "managers": ({"managers": ["gw"]}, {"BUSGATE_MANAGERS": "gw"}, ["--manager", "gw"], {"gw"}),
    "gateways": ({"gateways": ["gw"]}, {"BUSGATE_GATEWAYS": "gw"}, ["--gateway", "gw"], {"gw"}),
    "journal": (
        {"journal": {"directory": "/j", "filter": "demo"}},
        {"BUSGATE_JOURNAL": "/j", "BUSGATE_JOURNAL_FILTER": "demo"},
        ["--journal", "/j", "--journal-filter", "demo"],
        JournalSetting("/j", "demo"),
    ),
    "replay_memory": (
        {"replayMemory": 12},
        {"BUSGATE_REPLAY_MEMORY": "12"},
        ["--replay-memory", "12"],
        12,
    ),
    "objects_port": (
        {"objectsPort": 7891},
        {"BUSGATE_OBJECTS_PORT": "7891"},
        ["--objects-port", "7891"],
        7891,
    ),
    "metrics_port": (
        {"metricsPort": 9101},
        {"BUSGATE_METRICS_PORT": "9101"},
        ["--metrics-port", "9101"],
        9101,
    ),
    "objects_links": (
        {"objectsLinks": ["os1:7890", "[::1]:7891"]},
        {"BUSGATE_OBJECTS_LINKS": "os1:7890,[::1]:7891"},
        ["--objects-link", "os1:7890", "--objects-link", "[::1]:7891"],
        ("os1:7890", "[::1]:7891"),
    ),
    "objects_server_peers": (
        {"objectsServerPeers": ["10.0.0.0/24"]},
        {"BUSGATE_OBJECTS_SERVER_PEERS": "10.0.0.0/24"},
        ["--objects-server-peer", "10.0.0.0/24"],
        ("10.0.0.0/24",),
    ),
    "mop_port": (
        {"mopPort": 4011},
        {"BUSGATE_MOP_PORT": "4011"},
        ["--mop-port", "4011"],
        4011,
    ),
    "log_level": (
        {"logLevel": "debug"},
        {"BUSGATE_LOG_LEVEL": "debug"},
        ["--log-level", "debug"],
        "DEBUG",
    ),
}


@pytest.mark.parametrize(
    ("setting", "value"),
    [("objects_links", ("os1",)), ("objects_links", ("os1:0",)), ("objects_server_peers", ("x",))],
)
def test_bad_object_links_and_server_peers_are_refused(setting: str, value: object) -> None:
    with pytest.raises(ConfigError):
        BrokerConfig(**{setting: value})  # type: ignore[arg-type]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("BUSGATE_"):
            monkeypatch.delenv(name)
    return monkeypatch


def _from_cli(*flags: str) -> BrokerConfig:
    return config_from_args(build_parser().parse_args(["broker", *flags]))


def test_the_table_covers_every_setting() -> None:
    settable = {f.name for f in fields(BrokerConfig)} - {"config_file"}  # --config/BUSGATE_CONFIG
    assert set(EVERY_SETTING) == settable


@pytest.mark.parametrize("source", ["file", "variable", "flag"])
@pytest.mark.parametrize("name", sorted(EVERY_SETTING))
def test_every_setting_comes_from_a_file_a_variable_and_a_flag(
    name: str, source: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    in_file, variables, flags, expected = EVERY_SETTING[name]
    if source == "file":
        config = _from_cli("--config", str(_write(tmp_path / "broker.json", in_file)))
    elif source == "variable":
        for variable, text in variables.items():
            clean_env.setenv(variable, text)
        config = _from_cli()
    else:
        config = _from_cli(*flags)
    assert getattr(config, name) == expected
    assert getattr(BrokerConfig(), name) != expected  # the default would not pass


def test_the_config_file_is_a_flag_or_a_variable(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path / "broker.json", {"port": 4200})
    assert _from_cli("--config", str(path)).port == 4200
    clean_env.setenv("BUSGATE_CONFIG", str(path))
    assert _from_cli().port == 4200 and _from_cli().config_file == str(path)


def test_no_open_flag_beats_the_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("BUSGATE_OPEN", "1")
    assert _from_cli().open is True
    assert _from_cli("--no-open").open is False


@pytest.mark.parametrize(
    "data", [{"objectsPort": "7890"}, {"objectsPort": 70000}, {"logLevel": "loud"}]
)
def test_bad_new_settings_are_config_errors(tmp_path: Path, data: object) -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.load(_write(tmp_path / "bad.json", data), env={})


def test_a_bad_variable_is_one_line_and_exit_2(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bus.cli import main

    clean_env.setenv("BUSGATE_OBJECTS_PORT", "seven")
    assert main(["broker", "--open", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("busgate broker: BUSGATE_OBJECTS_PORT must be an integer")
    assert err.count("\n") == 1


async def test_settings_from_all_three_reach_the_running_broker(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    from bus.asyncio.client import connect
    from tests.conftest import BrokerProcess

    path = _write(tmp_path / "broker.json", {"postOffices": {"carl": {"secret": "c-secret"}}})
    clean_env.setenv("BUSGATE_MAX_MESSAGE_SIZE", "4096")
    process = BrokerProcess("--config", str(path), "--ping-interval-ms", "700")
    process.start()
    try:
        client = await connect(process.url, "carl", "c-secret", reconnect=False)  # the file
        assert client.info is not None
        assert client.info.max_message_size == 4096  # the variable
        assert client.info.ping_interval == 0.7  # the flag
        await client.close()
    finally:
        process.stop()
