"""A PySpark worker daemon that imports the ``busjournal`` decoder before it forks workers.

PySpark forks one Python worker per task from a daemon process. A fresh worker pays for
importing numpy, pyarrow and the decoder (about 0.25 s) before it reads a byte, which made every
extra partition cost more than it saved. Set ``spark.python.daemon.module=pipeline.daemon``
(:func:`pipeline.session.spark_session` does) and workers start with those modules loaded.
"""

from __future__ import annotations

import os

__all__ = ["main"]


def main() -> None:
    """Import the decoder's modules, then run PySpark's own daemon loop."""
    # No thread may exist when the daemon forks: keep numpy's BLAS single-threaded.
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    import pyarrow.compute  # noqa: F401
    from pyspark.daemon import manager

    import pipeline.decode  # noqa: F401
    import pipeline.source  # noqa: F401

    manager()


if __name__ == "__main__":
    main()
