"""The files the gateway serves are found through the package (``gateway/process/resources.py``).

The installed wheel and sdist are run for real in ``tests/test_package.py``; here, the lookups
themselves, and a damaged install: a clear :class:`ConfigError` when the gateway is configured,
and every other import still works.
"""

from __future__ import annotations

import json
from importlib import resources as importlib_resources
from pathlib import Path

import httpx
import pytest

import gateway
from bus.errors import ConfigError
from gateway.app import create_app
from gateway.process import resources
from gateway.process.settings import GatewaySettings
from gateway.routes.routes_info import load_docs_page, load_openapi

PACKAGE = Path(gateway.__file__).parent


def test_resources_are_package_data_beside_the_modules() -> None:
    assert resources.package_path() == PACKAGE
    assert Path(resources.console_dir()) == PACKAGE / "web"
    assert (PACKAGE / "web" / "index.html").is_file()
    assert GatewaySettings().web_dir == str(PACKAGE / "web")  # the default console
    assert resources.openapi_document() == PACKAGE / "openapi" / "openapi.json"
    assert json.loads(load_openapi())["openapi"].startswith("3.1")
    assert b"/openapi.json" in load_docs_page()


async def test_the_app_serves_the_packaged_console_and_document() -> None:
    # No lifespan: static files and the document need no bus.
    transport = httpx.ASGITransport(app=create_app(GatewaySettings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        page = await client.get("/")
        assert page.status_code == 200 and "<title>busgate console</title>" in page.text
        script = await client.get("/app.js")
        assert script.content == (PACKAGE / "web" / "app.js").read_bytes()
        served = (await client.get("/openapi.json")).json()
        packaged = json.loads((PACKAGE / "openapi" / "openapi.json").read_bytes())
        # The served document names the address it was fetched at as its server.
        assert served.pop("servers") == [{"url": "http://gateway", "description": "this gateway"}]
        packaged.pop("servers")
        assert served == packaged


@pytest.fixture
def damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The gateway package as a broken install leaves it: modules, no package data."""

    def files(package: str) -> Path:
        assert package == "gateway"
        return tmp_path

    monkeypatch.setattr(importlib_resources, "files", files)
    return tmp_path


def test_a_damaged_install_names_the_missing_file(damaged: Path) -> None:
    with pytest.raises(ConfigError, match=r"web/index\.html is missing.*reinstall"):
        GatewaySettings()
    with pytest.raises(ConfigError, match=r"openapi\.json is missing.*reinstall"):
        load_openapi()
    with pytest.raises(ConfigError, match=r"openapi\.json is missing.*reinstall"):
        create_app(GatewaySettings(web_dir=""))
    (damaged / "openapi").mkdir()
    (damaged / "openapi" / "openapi.json").write_text('{"openapi": "3.1.0"}')
    with pytest.raises(ConfigError, match=r"docs\.html is missing.*reinstall"):
        create_app(GatewaySettings(web_dir=""))
    # With the document back, a gateway without a console is still a choice the user can make.
    (damaged / "openapi" / "docs.html").write_text("<p>docs</p>")
    assert create_app(GatewaySettings(web_dir="")) is not None


def test_a_zipped_package_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib_resources, "files", lambda package: object())
    with pytest.raises(ConfigError, match="not installed as files"):
        resources.console_dir()
