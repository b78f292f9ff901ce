"""The served report: ``GET /v1/reports`` and the files of ``report_dir`` at ``/reports/``.

With authentication off both are open, like the console. With it on, the report's tables
(callers, groups, latencies, error codes) are for callers that may reach every group (an API key
or token whose ``groups`` is ``*``):

- ``/reports/...`` takes the API's credentials (``X-API-Key``, ``Authorization: Bearer``,
  ``?key=``): no credential 401, a caller limited to some groups 403;
- or the cookie ``busgate_report`` that ``GET /v1/reports`` sets for such a caller: an HS256
  token (PyJWT) naming the caller, valid ``report_link_ttl`` seconds (900), scoped to
  ``Path=/reports/``, ``HttpOnly``, ``SameSite=Strict``. A browser then loads the page, its
  charts and its relative links with no key in any URL; the console renews the cookie each time
  it asks ``/v1/reports``, and a refused ``/v1/reports`` (401, 403) clears it.

The cookie's signing key is derived from the configured secrets (API keys and JWT secret), so
every gateway of one configuration accepts the cookies of the others (behind a balancer), and
changing the secrets revokes them; with a JWKS only, it is random per process.
"""

from __future__ import annotations

import hashlib
import html
import json
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final
from urllib.parse import quote

import jwt
from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

from bus.errors import AuthError, BusError, LimitError, RefusedError
from gateway.access.auth import Principal
from gateway.process.settings import GatewaySettings
from gateway.routes.errors import http_error
from gateway.routes.report_refresh import ReportRefresher
from gateway.state import gateway_of

__all__ = [
    "COOKIE",
    "PATH",
    "ReportAccess",
    "report_refresher",
    "report_routes",
    "reports_endpoint",
]

#: The cookie that lets a browser read the report.
COOKIE: Final = "busgate_report"
#: Where the report is served (the cookie's path).
PATH: Final = "/reports/"
_AUDIENCE: Final = "busgate:reports"


def check_reader(principal: Principal) -> None:
    """The report covers every group: only a caller that may reach every group reads it.

    Raises:
        RefusedError: a caller limited to some groups.
    """
    if "*" not in principal.groups:
        raise RefusedError(
            f"{principal.name!r} may not read the report: it shows the traffic of every group, "
            "for callers that may reach every group (groups *)"
        )


class ReportAccess:
    """Issues and checks the report cookie.

    Args:
        settings: the secrets the signing key is derived from, and ``report_link_ttl``.
    """

    def __init__(self, settings: GatewaySettings) -> None:
        self.ttl = settings.report_link_ttl
        material = [settings.jwt_secret or ""] + sorted(k.key for k in settings.api_keys)
        if any(material):
            label = b"busgate report cookie\0" + "\0".join(material).encode()
            self._key = hashlib.sha256(label).digest()
        else:
            self._key = secrets.token_bytes(32)

    def issue(self, name: str, now: float) -> str:
        """A cookie value for caller ``name``, valid :attr:`ttl` seconds from ``now``."""
        claims = {"sub": name, "aud": _AUDIENCE, "exp": int(now + self.ttl)}
        return jwt.encode(claims, self._key, algorithm="HS256")

    def check(self, value: str) -> str:
        """The caller named by a cookie value.

        Raises:
            AuthError: forged, damaged or expired.
        """
        try:
            claims = jwt.decode(value, self._key, algorithms=["HS256"], audience=_AUDIENCE)
        except jwt.ExpiredSignatureError as exc:
            raise AuthError(
                "the report link has expired: open the report from the console"
            ) from exc
        except jwt.PyJWTError as exc:
            raise AuthError("the report cookie is not valid") from exc
        return str(claims.get("sub", ""))


def _has_credentials(conn: HTTPConnection) -> bool:
    return "x-api-key" in conn.headers or "authorization" in conn.headers


def admit_reader(conn: HTTPConnection) -> None:
    """Let the caller read ``/reports/`` or raise why not.

    Raises:
        AuthError: no credential, a wrong one, or a bad cookie (401).
        RefusedError: a caller limited to some groups (403).
        LimitError: rate limit or too many wrong secrets (429).
    """
    gateway = gateway_of(conn)
    if not gateway.settings.auth_enabled:
        return
    cookie = conn.cookies.get(COOKIE)
    if cookie and not _has_credentials(conn):
        access: ReportAccess = conn.app.state.report_access
        access.check(cookie)
        return
    check_reader(gateway.admit(conn))


class _ReportFiles(StaticFiles):
    """The report directory, read-only; a 404 (not a 500) while it does not exist yet.

    A folder without ``index.html`` (a Parquet table as Spark writes it: ``tables/NAME/`` with
    its ``part-*.parquet`` files) is answered with a page listing its files, so the report's
    links to its tables lead somewhere; Spark's bookkeeping files (``_SUCCESS``, ``.crc``) and
    hidden files are left out.
    """

    async def check_config(self) -> None:
        if self.directory is None or not Path(self.directory).is_dir():
            raise HTTPException(404, "no report yet")
        await super().check_config()

    async def get_response(self, path: str, scope: Scope) -> Response:
        try:
            return await super().get_response(path, scope)
        except HTTPException as exc:
            if exc.status_code != 404 or self.directory is None:
                raise
            root = Path(self.directory).resolve()
            folder = (root / path).resolve()
            if not folder.is_dir() or not folder.is_relative_to(root):
                raise
            if not scope["path"].endswith("/"):
                return RedirectResponse(scope["path"] + "/", status_code=307)
            return HTMLResponse(_listing(folder, folder.relative_to(root).as_posix()))


def _listing(folder: Path, name: str) -> str:
    """A folder's files as a page of links (Parquet parts first), with their sizes."""
    files = sorted(
        (p for p in folder.iterdir() if p.is_file() and not p.name.startswith(("_", "."))),
        key=lambda p: (p.suffix != ".parquet", p.name),
    )
    rows = "".join(
        f"<li><a href='{quote(p.name)}' download>{html.escape(p.name)}</a> "
        f"({p.stat().st_size:,} bytes)</li>"
        for p in files
    )
    title = html.escape(name)
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{title}</title></head><body><p><a href='{'../' * (name.count('/') + 1)}'>"
        f"&larr; report</a></p><h1>{title}</h1><p>The Parquet files of this table (read them "
        "with pandas, pyarrow or Spark: <code>spark.read.parquet(...)</code> on the folder).</p>"
        f"<ul>{rows or '<li>(no files)</li>'}</ul></body></html>"
    )


class _GuardedFiles:
    """The report files, behind :func:`admit_reader` (its errors reach the app's handlers)."""

    def __init__(self, files: StaticFiles) -> None:
        self.files = files

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            admit_reader(HTTPConnection(scope))
        await self.files(scope, receive, send)


def report_routes(report_dir: str | None) -> list[BaseRoute]:
    """The ``/reports`` mount (none without a report directory)."""
    if not report_dir:
        return []
    files = _ReportFiles(directory=report_dir, html=True, check_dir=False)
    return [Mount("/reports", _GuardedFiles(files))]


def report_refresher(settings: GatewaySettings) -> ReportRefresher | None:
    """What rebuilds the report through a resident Spark (None: it is only served)."""
    if settings.report_dir and settings.report_journal and settings.spark_remote:
        return ReportRefresher(settings.report_journal, settings.report_dir, settings.spark_remote)
    return None


def _refused(exc: BusError) -> Response:
    error = http_error(exc)
    response = JSONResponse(error.body(), status_code=error.status, headers=error.headers)
    if not isinstance(exc, LimitError):
        # A refused caller keeps no way in (the cookie's path is /reports/: we cannot see it).
        response.delete_cookie(COOKIE, path=PATH)
    return response


async def reports_endpoint(request: Request) -> Response:
    """``GET /v1/reports``: whether a report is served at ``/reports/``, and when it was written.

    With authentication on, it also sets the report cookie for a caller that may read it.
    """
    gateway = gateway_of(request)
    try:
        principal = gateway.admit(request)
        if gateway.settings.auth_enabled:
            check_reader(principal)
    except (AuthError, RefusedError) as exc:  # LimitError (429) included
        return _refused(exc)
    refresher: ReportRefresher | None = request.app.state.report_refresher
    if refresher is not None:
        await refresher.refresh()
    folder = gateway.settings.report_dir
    index = Path(folder) / "index.html" if folder else None
    if index is None or not index.is_file():
        where = folder or "DIR"
        hint = f"busgate report --since 1h --out {where}"
        if not folder:
            hint += " && busgate gateway --report-dir DIR"
        body: dict[str, object] = {"available": False, "url": None, "mtime": None, "hint": hint}
        return JSONResponse(_built(body, refresher))
    mtime = datetime.fromtimestamp(index.stat().st_mtime, UTC).isoformat(timespec="seconds")
    body = _built({"available": True, "url": PATH, "mtime": mtime, "hint": None}, refresher)
    response = Response(json.dumps(body), media_type="application/json")
    if gateway.settings.auth_enabled:
        access: ReportAccess = request.app.state.report_access
        response.set_cookie(
            COOKIE,
            access.issue(principal.name, time.time()),
            max_age=int(access.ttl),
            path=PATH,
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
    return response


def _built(body: dict[str, object], refresher: ReportRefresher | None) -> dict[str, object]:
    """``body`` with, when the gateway builds the report itself, the end of the time it covers
    (``until``, epoch seconds) and why the last build failed (``error``)."""
    if refresher is not None:
        body.update(until=refresher.until, error=refresher.error)
    return body
