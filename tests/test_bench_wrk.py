"""``bench/_common.py``: reading what wrk printed (``make bench`` stopped on a latency spread of
"85.50%", read as the 50th percentile)."""

from __future__ import annotations

from bench._common import parse_wrk

WRK_OUT = """Running 6s test @ http://127.0.0.1:41234/v1/request/demo
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms    1.05ms  21.30ms   85.50%
    Req/Sec     7.71k   640.12     8.50k    72.99%
  Latency Distribution
     50%    1.89ms
     75%    2.40ms
     90%    3.10ms
     99%  850.00us
  46071 requests in 6.00s, 20.91MB read
  Non-2xx or 3xx responses: 3
Requests/sec:   7678.22
Transfer/sec:      3.49MB
"""


def test_percentiles_are_read_from_the_distribution_not_the_thread_stats() -> None:
    result = parse_wrk(WRK_OUT, 6.0)
    assert (result.requests, result.rps) == (46071, 7678.22)
    assert (result.p50_ms, result.p99_ms) == (1.89, 0.85)
    assert result.errors == 3
