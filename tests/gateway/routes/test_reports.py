"""The served report with authentication on: credentials or the signed cookie, never public.

Issue 19: ``/reports/`` was served without credentials while the API asked for them, so the
report's tables (callers, groups, latencies, error codes) were public.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bus.errors import AuthError
from gateway.access.auth import sign_jwt
from gateway.process.settings import ApiKey, GatewaySettings
from gateway.routes.reports import COOKIE, ReportAccess
from tests.gateway.conftest import Stack, base_settings, running_stack

SECRET = "report-tests-jwt-secret-32-bytes!"
KEYS = (ApiKey("ops", "k-ops"), ApiKey("ci", "k-ci", groups=("demo",)))
PAGE = b'<!doctype html><h1>busgate report</h1><a href="tables/t.parquet">t</a>'


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    (folder / "tables").mkdir()
    (folder / "tables" / "t.parquet").write_bytes(b"PAR1 not really")
    (folder / "index.html").write_bytes(PAGE)
    return folder


@pytest.fixture(scope="module")
def stack(report_dir: Path) -> Iterator[Stack]:
    settings = base_settings(
        api_keys=KEYS, jwt_secret=SECRET, report_dir=str(report_dir), auth_fail_limit=0
    )
    with running_stack(settings, demo=False) as running:
        yield running


def test_no_credential_is_401_and_a_limited_key_is_403(stack: Stack) -> None:
    with httpx.Client(base_url=stack.url, timeout=15.0) as http:
        for path in ("/reports/", "/reports/index.html", "/reports/tables/t.parquet"):
            refused = http.get(path)
            assert refused.status_code == 401, path
            assert refused.json()["error"]["code"] == "unauthorized"
            assert refused.headers["WWW-Authenticate"] == "Bearer"
            assert http.get(path, headers={"X-API-Key": "wrong"}).status_code == 401
            limited = http.get(path, headers={"X-API-Key": "k-ci"})
            assert limited.status_code == 403, path
            assert "every group" in limited.json()["error"]["message"]
        ci = http.get("/v1/reports", headers={"X-API-Key": "k-ci"})
        assert ci.status_code == 403 and COOKIE not in ci.cookies


def test_the_api_credentials_open_the_report(stack: Stack) -> None:
    with httpx.Client(base_url=stack.url, timeout=15.0) as http:
        page = http.get("/reports/", headers={"X-API-Key": "k-ops"})
        assert page.status_code == 200 and page.content == PAGE
        assert http.get("/reports/?key=k-ops").status_code == 200
        everything = sign_jwt({"sub": "ana", "exp": time.time() + 60}, SECRET)
        token = {"Authorization": f"Bearer {everything}"}
        assert http.get("/reports/tables/t.parquet", headers=token).status_code == 200
        demo_only = sign_jwt({"sub": "bo", "groups": ["demo"]}, SECRET)
        token = {"Authorization": f"Bearer {demo_only}"}
        assert http.get("/reports/", headers=token).status_code == 403


def test_v1_reports_sets_a_cookie_that_opens_the_report_and_its_links(stack: Stack) -> None:
    with httpx.Client(base_url=stack.url, timeout=15.0) as http:
        info = http.get("/v1/reports", headers={"X-API-Key": "k-ops"})
        assert info.status_code == 200 and info.json()["url"] == "/reports/"
        header = info.headers["set-cookie"]
        for attribute in ("Path=/reports/", "HttpOnly", "SameSite=strict", "Max-Age=900"):
            assert attribute in header, attribute
        # The jar sends the cookie to /reports/ only, with no key in any header or URL.
        assert http.get("/reports/").content == PAGE
        assert http.get("/reports/tables/t.parquet").status_code == 200
        assert http.get("/v1/services").status_code == 401
        # A refused /v1/reports takes the cookie away.
        refused = http.get("/v1/reports", headers={"X-API-Key": "wrong"})
        assert refused.status_code == 401
        assert f'{COOKIE}=""' in refused.headers["set-cookie"]
        assert http.get("/reports/").status_code == 401


def test_forged_damaged_and_expired_cookies_are_401(stack: Stack) -> None:
    app_settings = stack.settings
    good = ReportAccess(app_settings).issue("ops", time.time())
    other_secrets = GatewaySettings(api_keys=(ApiKey("ops", "k-other"),), jwt_secret=SECRET)
    cookies = {
        "expired": ReportAccess(app_settings).issue("ops", time.time() - 3600),
        "other secrets": ReportAccess(other_secrets).issue("ops", time.time()),
        "damaged": good[:-2] + ("AA" if not good.endswith("AA") else "BB"),
        "junk": "not-a-cookie",
    }
    with httpx.Client(base_url=stack.url, timeout=15.0) as http:
        assert http.get("/reports/", headers={"Cookie": f"{COOKIE}={good}"}).status_code == 200
        for why, value in cookies.items():
            response = http.get("/reports/", headers={"Cookie": f"{COOKIE}={value}"})
            assert response.status_code == 401, why
        expired = http.get("/reports/", headers={"Cookie": f"{COOKIE}={cookies['expired']}"})
        assert "expired" in expired.json()["error"]["message"]


def test_gateways_of_one_configuration_accept_each_others_cookies() -> None:
    one = GatewaySettings(api_keys=KEYS, jwt_secret=SECRET)
    two = GatewaySettings(api_keys=tuple(reversed(KEYS)), jwt_secret=SECRET, port=9)
    assert ReportAccess(two).check(ReportAccess(one).issue("ops", time.time())) == "ops"
    jwks_only = GatewaySettings(auth="on", api_keys=(), jwt_jwks="https://idp.test/jwks.json")
    with pytest.raises(AuthError):  # no secret to derive from: random per process
        ReportAccess(jwks_only).check(ReportAccess(jwks_only).issue("ops", time.time()))


def test_with_auth_off_the_report_stays_open(report_dir: Path) -> None:
    with running_stack(base_settings(report_dir=str(report_dir)), demo=False) as stack:
        with httpx.Client(base_url=stack.url, timeout=15.0) as http:
            assert http.get("/reports/").content == PAGE
            assert COOKIE not in http.get("/v1/reports").headers.get("set-cookie", "")
