"""Which optional C accelerators are in use (PROTOCOL.md 1.5).

Each accelerator (``bus.native._speedups``, ``bus.native._hotpath``, ``bus.native._journalscan``)
has a
pure-Python reference; :func:`accelerator` loads one when it was built at install time and the
environment does not ask for the reference alone (``BUSGATE_PURE_PYTHON``).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["PURE_PYTHON_ENV", "accelerator", "pure_python_requested"]

#: Set (to anything but "" or "0") to run the pure-Python codec even when the C accelerator
#: was built (PROTOCOL.md 1.5); read once, at import.
PURE_PYTHON_ENV = "BUSGATE_PURE_PYTHON"


def pure_python_requested() -> bool:
    """True when the environment asks for the pure-Python codec (``BUSGATE_PURE_PYTHON``)."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def accelerator(module: str) -> Any:
    """The C accelerator ``module`` (``"bus.native._hotpath"``, ...) when it was built and the
    environment does not ask for pure Python (``BUSGATE_PURE_PYTHON``); else ``None``."""
    if pure_python_requested():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - no C compiler at install time
        return None
