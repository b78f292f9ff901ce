"""Compile the JVM reader: ``python -m pipeline.jvm.build`` (``make install`` runs it).

``javac`` compiles ``pipeline/jvm/src`` against the jars of the installed PySpark into
``pipeline/jvm/busjournal.jar``. Without ``javac`` (or PySpark) nothing is built and the Python
source stays ``busjournal``; a failed compilation exits 1 with javac's messages.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pipeline.jvm import JAR, SOURCES

__all__ = ["build", "main"]


def _spark_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return jars if jars.is_dir() else None


def build(target: Path = JAR) -> Path | None:
    """Compile the sources into ``target``; ``None`` when javac or PySpark is missing.

    Raises:
        subprocess.CalledProcessError: javac failed.
    """
    javac, jars = shutil.which("javac"), _spark_jars()
    if javac is None or jars is None:
        return None
    sources = sorted(str(p) for p in SOURCES.rglob("*.java"))
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [javac, "-nowarn", "--release", "17", "-d", out, "-cp", f"{jars}/*", *sources],
            check=True,
        )
        temp = target.with_suffix(".jar.tmp")
        with zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as jar:
            for path in sorted(Path(out).rglob("*.class")):
                jar.write(path, path.relative_to(out).as_posix())
            for path in sorted((SOURCES / "META-INF").rglob("*")):
                if path.is_file():
                    jar.write(path, path.relative_to(SOURCES).as_posix())
        temp.replace(target)
    return target


def main() -> None:
    """Build, and say what happened."""
    try:
        built = build()
    except subprocess.CalledProcessError:
        print("busgate: the JVM reader did not compile (see javac above)", file=sys.stderr)
        sys.exit(1)
    if built is None:
        print("busgate: no javac or PySpark: the Python busjournal source is used", file=sys.stderr)
    else:
        print(f"busgate: built {built}")


if __name__ == "__main__":
    main()
