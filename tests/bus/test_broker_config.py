"""Broker settings: JSON file, BUSGATE_* variables, flags (``bus/broker/config.py``)."""

from __future__ import annotations

import json
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
    assert (config.port, config.ping_interval_ms, config.connect_timeout_ms) == (4000, 5000, 5000)
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
