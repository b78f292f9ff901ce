"""The files the gateway serves, found through the installed package, not the source tree.

The console (``gateway/web/``) and the OpenAPI document with its ``/docs`` page
(``gateway/openapi/``) are package data: they ship in the wheel and the sdist, so a plain
``pip install busgate`` serves them from ``site-packages`` exactly as a checkout does
(``importlib.resources``; see ``pyproject.toml``'s ``[tool.setuptools.package-data]``).
Nothing here is read at import time: a damaged install fails when the gateway is configured,
with a :class:`bus.errors.ConfigError` naming what is missing, and every other command works.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from bus.errors import ConfigError

__all__ = ["console_dir", "docs_page", "openapi_document", "package_path"]

_REINSTALL = "the busgate install is incomplete; reinstall it (pip install --force-reinstall)"


def package_path(*parts: str) -> Path:
    """A file or folder of the ``gateway`` package's data, as a file-system path.

    Args:
        parts: its path inside the package (``"openapi", "openapi.json"``).

    Returns:
        The path (which may not exist). Starlette's ``StaticFiles`` serves from the file
        system, and pip unpacks wheels, so an installed package's resources are paths.

    Raises:
        ConfigError: the package is imported from an archive (a zip), not from files.
    """
    root = resources.files("gateway")
    if not isinstance(root, Path):
        raise ConfigError(f"the gateway package is not installed as files ({root}): {_REINSTALL}")
    return root.joinpath(*parts)


def _existing(*parts: str) -> Path:
    path = package_path(*parts)
    if not path.exists():
        raise ConfigError(f"{path} is missing: {_REINSTALL}")
    return path


def console_dir() -> str:
    """The web console installed with the package: the default ``web_dir`` (served at ``/``).

    Raises:
        ConfigError: it is missing from the install.
    """
    return str(_existing("web", "index.html").parent)


def openapi_document() -> Path:
    """The OpenAPI document served at ``/openapi.json``.

    Raises:
        ConfigError: it is missing from the install.
    """
    return _existing("openapi", "openapi.json")


def docs_page() -> Path:
    """The ``/docs`` page: renders ``/openapi.json`` in the browser with no external script.

    Raises:
        ConfigError: it is missing from the install.
    """
    return _existing("openapi", "docs.html")
