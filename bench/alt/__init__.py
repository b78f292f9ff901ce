"""The hand-written alternatives the benchmarks measure busgate against (run as processes)."""
