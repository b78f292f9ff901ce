"""The JVM reader of the journal: ``format("busjournal")`` in Spark without a Python worker.

The Java sources under ``pipeline/jvm/src`` are compiled at install time (``make install`` runs
``python -m pipeline.jvm.build``) with ``javac`` against PySpark's own jars, into
``pipeline/jvm/busjournal.jar``. :func:`jar_path` says whether it is there; the session puts it
on Spark's class path (:mod:`pipeline.session`). Without it, the Python source
(:mod:`pipeline.source`) is ``busjournal``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["JAR", "SOURCES", "jar_path"]

HERE = Path(__file__).resolve().parent
JAR = HERE / "busjournal.jar"
SOURCES = HERE / "src"
#: Set to 1 to run without the JVM reader (the Python source is then ``busjournal``).
DISABLE_ENV = "BUSGATE_NO_JVM_READER"


def jar_path() -> Path | None:
    """The built jar, or ``None`` (not built, or disabled by ``BUSGATE_NO_JVM_READER=1``)."""
    if os.environ.get(DISABLE_ENV) == "1":
        return None
    return JAR if JAR.is_file() else None
