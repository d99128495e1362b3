"""Host time per call: the wall time of the Python call itself (validation, planning, launch,
allocations), with the device not the bottleneck. Each timed call starts with the device queue
drained (``sync`` before it, outside the timing), so a call never waits for a full launch queue
or for earlier work; a call that synchronizes inside pays its own device time, which is then
part of its host time (that is what the caller would wait for, too).

This measures the host, not the kernel: device time comes from ``graph_time`` /
``profiler_time``.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional


def host_time(fn: Callable[[], object], *, sync: Optional[Callable[[], None]] = None, runs: int = 100,
              warmup: int = 3, clock: Callable[[], float] = time.perf_counter) -> dict:
    """{"median", "q1", "q3", "runs"} in microseconds per call of ``fn``."""
    if runs < 1:
        raise ValueError(f"host_time: runs must be >= 1, got {runs}")
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        if sync is not None:
            sync()
        t0 = clock()
        fn()
        samples.append((clock() - t0) * 1e6)
    if sync is not None:
        sync()
    if len(samples) == 1:
        q1 = med = q3 = samples[0]
    else:
        q1, med, q3 = statistics.quantiles(sorted(samples), n=4, method="inclusive")
    return {"median": med, "q1": q1, "q3": q3, "runs": len(samples)}
