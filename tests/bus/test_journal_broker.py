"""The broker's journal: its settings (flag, variable, file key) and what a broker records."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bus.asyncio.client import connect
from bus.broker.config import BrokerConfig, JournalSetting
from bus.broker.server import NO_RESPONDERS, RCD_NO_RESPONDERS
from bus.cli import build_parser
from bus.cli.broker import config_from_args
from bus.errors import ConfigError, NoRespondersError
from bus.journal import JournalReader, header_fields
from bus.message.message import decode_message

# setting -> (journal file key and value, variable and text, flag and text, expected value)
JOURNAL_SETTINGS: dict[str, tuple[tuple[str, Any], tuple[str, str], tuple[str, str], Any]] = {
    "filter": (("filter", "demo"), ("FILTER", "demo"), ("--journal-filter", "demo"), "demo"),
    "types": (
        ("types", "RQS,NAK"),
        ("TYPES", "RQS,NAK"),
        ("--journal-types", "RQS,NAK"),
        "RQS,NAK",
    ),
    "max_segment_bytes": (
        ("maxSegmentBytes", 4096),
        ("MAX_SEGMENT_BYTES", "4096"),
        ("--journal-max-segment-bytes", "4096"),
        4096,
    ),
    "max_segment_age_ms": (
        ("maxSegmentAgeMS", 60000),
        ("MAX_SEGMENT_AGE_MS", "60000"),
        ("--journal-max-segment-age-ms", "60000"),
        60000,
    ),
    "fsync": (("fsync", "always"), ("FSYNC", "always"), ("--journal-fsync", "always"), "always"),
    "fsync_interval_ms": (
        ("fsyncIntervalMS", 250),
        ("FSYNC_INTERVAL_MS", "250"),
        ("--journal-fsync-interval-ms", "250"),
        250,
    ),
    "max_bytes": (
        ("maxBytes", 1 << 30),
        ("MAX_BYTES", str(1 << 30)),
        ("--journal-max-bytes", str(1 << 30)),
        1 << 30,
    ),
    "max_age_ms": (
        ("maxAgeMS", 86_400_000),
        ("MAX_AGE_MS", "86400000"),
        ("--journal-max-age-ms", "86400000"),
        86_400_000,
    ),
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("BUSGATE_"):
            monkeypatch.delenv(name)
    return monkeypatch


def _from_cli(*flags: str) -> BrokerConfig:
    return config_from_args(build_parser().parse_args(["broker", *flags]))


def _write(path: Path, data: object) -> str:
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_the_table_covers_every_journal_setting() -> None:
    fields = set(JournalSetting.__dataclass_fields__) - {"directory"}
    assert set(JOURNAL_SETTINGS) == fields


@pytest.mark.parametrize("source", ["file", "variable", "flag"])
@pytest.mark.parametrize("name", sorted(JOURNAL_SETTINGS))
def test_each_journal_setting_comes_from_a_file_a_variable_and_a_flag(
    name: str, source: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    (key, value), (variable, text), (flag, argument), expected = JOURNAL_SETTINGS[name]
    if source == "file":
        data = {"journal": {"directory": "/j", key: value}}
        config = _from_cli("--config", _write(tmp_path / "broker.json", data))
    elif source == "variable":
        clean_env.setenv("BUSGATE_JOURNAL", "/j")
        clean_env.setenv("BUSGATE_JOURNAL_" + variable, text)
        config = _from_cli()
    else:
        config = _from_cli("--journal", "/j", flag, argument)
    assert config.journal is not None and config.journal.directory == "/j"
    assert getattr(config.journal, name) == expected
    assert getattr(JournalSetting("/j"), name) != expected  # the default would not pass


def test_flags_beat_variables_beat_the_file_key_by_key(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    data = {"journal": {"directory": "/file", "fsync": "none", "types": "EVT", "filter": "a"}}
    path = _write(tmp_path / "broker.json", data)
    clean_env.setenv("BUSGATE_JOURNAL_FSYNC", "always")
    clean_env.setenv("BUSGATE_JOURNAL_TYPES", "RQS")
    config = _from_cli("--config", path, "--journal-types", "ACK")
    assert config.journal == JournalSetting("/file", "a", "ACK", fsync="always")
    assert config.to_json()["journal"]["fsync"] == "always"  # manage.write keeps them
    clean_env.delenv("BUSGATE_JOURNAL_FSYNC")
    clean_env.delenv("BUSGATE_JOURNAL_TYPES")
    again = _from_cli("--config", _write(tmp_path / "again.json", config.to_json()))
    assert again.journal == config.journal


def test_journal_options_without_a_directory_enable_nothing(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("BUSGATE_JOURNAL_FSYNC", "always")
    assert _from_cli("--journal-types", "RQS").journal is None


@pytest.mark.parametrize(
    "journal",
    [
        {"directory": "/j", "fsync": "sometimes"},
        {"directory": "/j", "types": "RQS,XXX"},
        {"directory": "/j", "maxSegmentBytes": 10},
        {"directory": "/j", "maxSegmentAgeMS": "1h"},
        {"directory": "/j", "fsyncIntervalMS": -1},
        {"directory": "/j", "rotate": True},
    ],
)
def test_bad_journal_settings_are_config_errors(tmp_path: Path, journal: object) -> None:
    with pytest.raises(ConfigError, match="journal"):
        _from_cli("--config", _write(tmp_path / "broker.json", {"journal": journal}))


def test_a_bad_journal_variable_is_one_line(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("BUSGATE_JOURNAL", "/j")
    clean_env.setenv("BUSGATE_JOURNAL_MAX_SEGMENT_BYTES", "big")
    with pytest.raises(ConfigError, match="BUSGATE_JOURNAL_MAX_SEGMENT_BYTES"):
        _from_cli()


async def test_the_no_responders_nak_is_journaled(make_broker: Any, tmp_path: Path) -> None:
    broker = await make_broker(open=True, journal=JournalSetting(str(tmp_path)))
    client = await connect(f"bus://127.0.0.1:{broker.port}", None)
    try:
        with pytest.raises(NoRespondersError):
            await asyncio.wait_for(client.request("nobody", "ping", timeout=5.0), 10)
    finally:
        await client.close()
    await broker.stop(timeout=2.0)
    messages = [decode_message(r.raw) for r in JournalReader(tmp_path).records()]
    request = next(m for m in messages if m.typ == "RQS" and m.grp == "nobody")
    nak = next(m for m in messages if m.typ == "NAK" and m.rid == request.mid)
    assert (nak.rcd, nak.msg) == (RCD_NO_RESPONDERS, NO_RESPONDERS)


def _read_port(process: subprocess.Popen[str]) -> int:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert "listening on" in line, line + (process.stderr.read() if process.stderr else "")
    return int(line.rsplit(":", 1)[1])


async def _requests_and_events(port: int) -> None:
    client = await connect(f"bus://127.0.0.1:{port}", None)
    try:
        for i in range(6):
            await client.publish("sensor.temp", {"c": i})  # EVT: not journaled
            with pytest.raises(NoRespondersError):
                await asyncio.wait_for(client.request("nobody", "ping", {"i": i}), 10)
    finally:
        await client.close()


def test_busgate_broker_flags_shape_its_journal(tmp_path: Path) -> None:
    """A user's broker: only RQS and NAK journaled, small segments, fsync after every record."""
    journal = tmp_path / "journal"
    command = [sys.executable, "-c", "import sys; from bus.cli import main; sys.exit(main())"]
    command += ["broker", "--open", "--port", "0", "--journal", str(journal)]
    command += ["--journal-types", "RQS,NAK", "--journal-max-segment-bytes", "400"]
    command += ["--journal-fsync", "always"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUSGATE_")}
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as process:
        try:
            asyncio.run(_requests_and_events(_read_port(process)))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)
    reader = JournalReader(journal)
    types = [header_fields(r.raw, ("TYP",)).get("TYP") for r in reader.records()]
    assert types == ["RQS", "NAK"] * 6
    segments = reader.segments()
    assert len(segments) > 1 and all(seg.stat().st_size <= 400 for seg in segments)
