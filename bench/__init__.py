"""busgate benchmarks: ``python -m bench [NAME ...]`` runs every ``bench/bench_*.py``.

Each module defines ``main() -> None`` that prints its table, always with a reference measured
side by side in the same run and the ratio between the two.
"""
