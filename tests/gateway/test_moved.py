"""The gateway's old module paths (``gateway/moved.py``, answered by ``bus/moved.py``): code that
imports ``gateway.settings`` or ``gateway.hub`` keeps working, with a DeprecationWarning."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import gateway
from gateway.moved import GATEWAY_MOVED
from tests.bus.test_moved import forget, import_old

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh() -> Iterator[None]:
    yield
    forget(GATEWAY_MOVED)


@pytest.mark.parametrize(("old", "new"), sorted(GATEWAY_MOVED.items()))
def test_every_old_module_path_is_the_moved_module(fresh: None, old: str, new: str) -> None:
    import_old(old, new)


# Modules written after the move had no old path, so the table has nothing to name for them.
BORN_AFTER_THE_MOVE = {
    "gateway.routes.report_refresh",
    "gateway.routes.request_answers",
    "gateway.events.listeners",
    "gateway.events.sse_keepalives",
    "gateway.events.sse_lean",
    "gateway.events.sse_resume",
    "gateway.process.quiet_server",
    "gateway.process.readiness",
    "gateway.routes.request_direct",
    "gateway.websocket.lean",
    "gateway.websocket.ws_handshake",
    "gateway.websocket.ws_pings",
    "gateway.websocket.ws_reader",
    "gateway.websocket.ws_site",
}


def test_the_table_names_every_module_of_the_gateway_packages() -> None:
    held = {
        f"gateway.{path.parent.name}.{path.stem}"
        for path in (ROOT / "gateway").glob("*/*.py")
        if path.stem != "__init__"
    } - BORN_AFTER_THE_MOVE
    assert set(GATEWAY_MOVED.values()) == held


def test_old_code_that_configures_and_starts_a_gateway(fresh: None) -> None:
    old_code = (
        "from gateway.settings import GatewaySettings\n"
        "import gateway.server\n"
        "from gateway import auth\n"
        "settings = GatewaySettings()\n"
    )
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning) as caught:
        exec(compile(old_code, "old_program.py", "exec"), namespace)
    from gateway.access import auth
    from gateway.process import server, settings

    assert namespace["GatewaySettings"] is settings.GatewaySettings
    assert isinstance(namespace["settings"], settings.GatewaySettings)
    assert namespace["gateway"] is gateway and gateway.server is server  # type: ignore[attr-defined]
    assert namespace["auth"] is auth
    where = {(str(w.message).partition(" ")[0], w.filename, w.lineno) for w in caught}
    assert where == {
        ("gateway.settings", "old_program.py", 1),
        ("gateway.server", "old_program.py", 2),
        ("gateway.auth", "old_program.py", 3),
    }


def test_names_that_never_existed_still_fail() -> None:
    with pytest.raises(ModuleNotFoundError, match="No module named 'gateway.nothing_here'"):
        __import__("gateway.nothing_here")
    with pytest.raises(AttributeError, match="module 'gateway' has no attribute 'nothing'"):
        _ = gateway.nothing  # type: ignore[attr-defined]
    assert "gateway.nothing_here" not in sys.modules
