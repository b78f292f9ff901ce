"""Run the benchmarks: every ``bench/bench_*.py`` module's ``main()``, in name order.

Usage: ``python -m bench`` (all) or ``python -m bench codec broker`` (modules whose name
contains one of the words).

Sizes: ``bench_connections`` runs 1k and 10k subscribers by default (a few minutes);
``BENCH_CONNECTIONS=full`` (1k, 10k, 20k, 50k, 100k) or a comma-separated list (``1000,20000``)
asks for others, and the sizes that ran are printed first.
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["discover", "main"]


def discover(words: Sequence[str] = ()) -> list[str]:
    """Module names of the benchmarks, filtered by ``words`` (any may match) when given."""
    names = sorted(path.stem for path in Path(__file__).parent.glob("bench_*.py"))
    if words:
        names = [name for name in names if any(word in name for word in words)]
    return [f"bench.{name}" for name in names]


def main(argv: Sequence[str] | None = None) -> int:
    """Import and run each selected benchmark; returns the process exit code."""
    words = list(sys.argv[1:] if argv is None else argv)
    modules = discover(words)
    if not modules:
        print(f"no benchmark matches {' '.join(words)!r}", file=sys.stderr)
        return 2
    failed = 0
    for name in modules:
        print(f"== {name}", flush=True)
        started = time.perf_counter()
        try:
            module = importlib.import_module(name)
            module.main()
        except Exception as exc:  # a broken benchmark must not hide the others' figures
            failed += 1
            print(f"!! {name} failed: {type(exc).__name__}: {exc}", flush=True)
        print(f"   ({time.perf_counter() - started:.1f} s)\n", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
