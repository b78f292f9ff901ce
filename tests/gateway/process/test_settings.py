"""Gateway settings: defaults, the TOML file, the environment, flags and their checks."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bus.errors import ConfigError
from gateway.process.cli import register, settings_from_args
from gateway.process.settings import ApiKey, GatewaySettings, load_settings, parse_api_key


def test_defaults_listen_on_loopback_8080_with_auth_off() -> None:
    settings = load_settings(environ={})
    assert (settings.host, settings.port) == ("127.0.0.1", 8080)
    assert settings.default_timeout == 5.0
    assert settings.loopback and not settings.auth_enabled


def test_public_host_without_credentials_is_refused() -> None:
    with pytest.raises(ConfigError, match="without authentication"):
        GatewaySettings(host="0.0.0.0")


def test_public_host_with_auth_off_explicitly_is_allowed() -> None:
    assert not GatewaySettings(host="0.0.0.0", auth="off").auth_enabled


def test_an_api_key_turns_auth_on() -> None:
    settings = GatewaySettings(api_keys=(ApiKey("ops", "k"),))
    assert settings.auth_enabled


def test_auth_on_needs_credentials() -> None:
    with pytest.raises(ConfigError, match="needs an API key"):
        GatewaySettings(auth="on")


@pytest.mark.parametrize(
    "changes",
    [
        {"port": 70000},
        {"default_timeout": 0},
        {"default_timeout": 10, "max_timeout": 5},
        {"max_body": 0},
        {"auth": "maybe"},
        {"rate_burst": 0},
        {"api_keys": (ApiKey("a", "1"), ApiKey("a", "2"))},
    ],
)
def test_bad_values_are_refused(changes: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        GatewaySettings(**changes)  # type: ignore[arg-type]


def test_timeout_is_capped() -> None:
    settings = GatewaySettings(default_timeout=2, max_timeout=10)
    assert settings.cap_timeout(None) == 2
    assert settings.cap_timeout(3.5) == 3.5
    assert settings.cap_timeout(1000) == 10


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "busgate.toml"
    config.write_text(
        '[gateway]\nport = 9000\nmax_body = 1000\nbus_url = "bus://file:1"\n'
        '[[gateway.api_keys]]\nname = "ops"\nkey = "s3"\ngroups = ["demo"]\nrate = 5\n'
    )
    env = {
        "BUSGATE_GATEWAY_PORT": "9100",
        "BUSGATE_GATEWAY_MAX_TIMEOUT": "7",
        "BUSGATE_CORS_ORIGINS": "a,b",
        "BUSGATE_PORT": "4001",  # the broker's: not ours
    }
    settings = load_settings({"port": 9200, "host": None}, environ=env, config_file=config)
    assert settings.port == 9200
    assert settings.max_timeout == 7.0
    assert settings.max_body == 1000
    assert settings.bus_url == "bus://file:1"
    assert settings.cors_origins == ("a", "b")
    assert settings.api_keys == (ApiKey("ops", "s3", groups=("demo",), rate=5.0),)


def test_short_names_and_the_long_ones_win() -> None:
    env = {
        "BUSGATE_BUS": "bus://short:1",
        "BUSGATE_API_KEYS": "demo:change-me,ops:k2",
        "BUSGATE_GATEWAY_JWT_SECRET": "long-name-wins-" + "x" * 32,
        "BUSGATE_JWT_SECRET": "short-name-loses-" + "x" * 32,
        "BUSGATE_HOST": "0.0.0.0",  # the broker's: not ours
    }
    settings = load_settings(environ=env)
    assert settings.bus_url == "bus://short:1"
    assert [k.name for k in settings.api_keys] == ["demo", "ops"]
    assert settings.jwt_secret == "long-name-wins-" + "x" * 32
    assert settings.host == "127.0.0.1"


def test_unknown_key_in_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "busgate.toml"
    config.write_text("[gateway]\nprot = 9000\n")
    with pytest.raises(ConfigError, match="unknown setting 'prot'"):
        load_settings(environ={}, config_file=config)


def test_bad_environment_value_is_refused() -> None:
    with pytest.raises(ConfigError, match="port"):
        load_settings(environ={"BUSGATE_GATEWAY_PORT": "eighty"})


def test_invalid_toml_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "busgate.toml"
    config.write_text("[gateway\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(environ={}, config_file=config)


def test_api_key_flag_forms() -> None:
    assert parse_api_key("ops:s3") == ApiKey("ops", "s3", presence=True)  # every permission
    key = parse_api_key("ci:k2:demo|build.*:ci.*")
    assert (key.groups, key.types) == (("demo", "build.*"), ("ci.*",))
    with pytest.raises(ConfigError):
        parse_api_key("just-a-key")


def test_api_key_repr_hides_the_secret() -> None:
    assert "s3cret" not in repr(ApiKey("ops", "s3cret"))


def test_object_links_and_the_ws_server_role_from_flags_environment_and_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gw.toml"
    path.write_text('[gateway]\nobjects_links = ["os1:7890"]\nws_allow_server_role = true\n')
    from_file = load_settings(environ={}, config_file=path)
    assert from_file.objects_links == ("os1:7890",) and from_file.ws_allow_server_role is True
    env = {"BUSGATE_GATEWAY_OBJECTS_LINKS": "a:1,b:2", "BUSGATE_GATEWAY_WS_ALLOW_SERVER_ROLE": "0"}
    from_env = load_settings(environ=env)
    assert from_env.objects_links == ("a:1", "b:2") and from_env.ws_allow_server_role is False
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        ["gateway", "--objects-link", "c:3", "--objects-link", "d:4", "--ws-allow-server-role"]
    )
    from_flags = settings_from_args(args)
    assert from_flags.objects_links == ("c:3", "d:4") and from_flags.ws_allow_server_role
    assert GatewaySettings().ws_allow_server_role is False  # off unless granted
    with pytest.raises(ConfigError, match="objects_links"):
        GatewaySettings(objects_links=("no-port",))
    with pytest.raises(ConfigError):
        load_settings(environ={"BUSGATE_GATEWAY_WS_ALLOW_SERVER_ROLE": "maybe"})


def test_keepalive_intervals_from_flags_environment_and_file(tmp_path: Path) -> None:
    defaults = GatewaySettings()
    # peers' intervals: Centrifugo and Socket.IO ping every 25 s, Mercure's heartbeat is 40 s
    assert (defaults.ws_ping_interval, defaults.ws_ping_timeout) == (25.0, 20.0)
    assert defaults.sse_keepalive_interval == 30.0
    path = tmp_path / "gw.toml"
    path.write_text("[gateway]\nws_ping_interval = 10\nsse_keepalive_interval = 40\n")
    from_file = load_settings(environ={}, config_file=path)
    assert (from_file.ws_ping_interval, from_file.sse_keepalive_interval) == (10.0, 40.0)
    env = {"BUSGATE_GATEWAY_WS_PING_TIMEOUT": "5", "BUSGATE_GATEWAY_SSE_KEEPALIVE_INTERVAL": "9"}
    from_env = load_settings(environ=env)
    assert (from_env.ws_ping_timeout, from_env.sse_keepalive_interval) == (5.0, 9.0)
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["gateway", "--ws-ping-interval", "0", "--ws-ping-timeout", "3",
                              "--sse-keepalive-interval", "7.5"])  # fmt: skip
    from_flags = settings_from_args(args)
    assert (from_flags.ws_ping_interval, from_flags.ws_ping_timeout) == (0.0, 3.0)  # 0: no pings
    assert from_flags.sse_keepalive_interval == 7.5


def test_the_old_name_keepalive_still_sets_the_sse_interval(tmp_path: Path) -> None:
    path = tmp_path / "gw.toml"
    path.write_text("[gateway]\nkeepalive = 12\n")
    assert load_settings(environ={}, config_file=path).sse_keepalive_interval == 12.0
    assert load_settings(environ={"BUSGATE_GATEWAY_KEEPALIVE": "13"}).keepalive == 13.0
    assert load_settings({"keepalive": 14}, environ={}).sse_keepalive_interval == 14.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"ws_ping_interval": -1}, "ws_ping_interval must be >= 0"),
        ({"ws_ping_timeout": 0}, "ws_ping_timeout must be > 0"),
        ({"sse_keepalive_interval": 0}, "sse_keepalive_interval must be > 0"),
    ],
)
def test_bad_keepalive_intervals_are_refused(changes: dict[str, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        GatewaySettings(**changes)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="bad value for ws_ping_interval"):
        load_settings(environ={"BUSGATE_GATEWAY_WS_PING_INTERVAL": "soon"})
