"""Device time from the profiler, for calls that cannot be captured in a graph: the sum of the
device activities (kernels, memcpy, memset) each call issues, with the flush before each call
left out. Host time the device spends waiting is not in it, as with graph replay; unlike graph
replay it also leaves out the gaps between the call's own kernels.

The flush's own activities are told apart by position, not by name (a call may launch the same
fill kernel the flush does): the flush alone is profiled first, which gives how many device
activities it issues, and the profiled run is ``runs`` x (flush, call) in stream order.

On NPU the profiler-based ``triton.testing.do_bench`` of triton-ascend does the same
(``TRITON_BENCH_METHOD=npu``); it is written against that documented switch and unrun here.
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Sequence

from .stats import DeviceTime, summarize


def device_activities(fn: Callable[[], None], sync: Callable[[], None]) -> list[tuple[float, float]]:
    """(start_us, duration_us) of every device activity ``fn`` issues, in start order, from
    torch.profiler (CUDA activities)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        sync()
    found = []
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            found.append((float(ev.time_range.start), float(ev.time_range.elapsed_us())))
    return sorted(found)


def per_call_us(activities: Sequence[tuple[float, float]], runs: int, flush_count: int) -> Optional[list[float]]:
    """Split ``runs`` x (flush, call) activities into per-call sums (microseconds); None when
    the activity count is not ``runs`` times one pattern (then only the total is known)."""
    n = len(activities)
    if runs < 1 or n % runs:
        return None
    per_run = n // runs
    if per_run <= flush_count:
        return None
    out = []
    for i in range(runs):
        chunk = activities[i * per_run:(i + 1) * per_run]
        out.append(sum(d for _, d in chunk[flush_count:]))
    return out


def profiler_time(device, fn: Callable[[], object], *, flush: Optional[Callable[[], None]],
                  runs: int = 30, activities: Optional[Callable] = None) -> DeviceTime:
    """Per-call device time of ``fn`` from the profiler; cold L2 when ``flush`` is given.
    ``activities`` (tests) replaces ``device_activities``."""
    activities = activities or device_activities
    sync = device.synchronize
    fn()
    sync()
    flush_count = len(activities(flush, sync)) if flush is not None else 0

    def rounds():
        for _ in range(runs):
            if flush is not None:
                flush()
            fn()

    acts = activities(rounds, sync)
    samples = per_call_us(acts, runs, flush_count)
    note = None
    if samples is None:
        flush_total = 0.0
        if flush is not None:
            flush_acts = activities(lambda: [flush() for _ in range(runs)], sync)
            flush_total = sum(d for _, d in flush_acts)
        samples = [max(0.0, (sum(d for _, d in acts) - flush_total) / runs)]
        note = "mean over the runs (the call's activities vary between calls)"
    return DeviceTime(summarize([s * 1e-3 for s in samples]), "profiler",
                      "cold" if flush is not None else "warm", note)


def npu_profiler_time(fn: Callable[[], object], *, warmup: int, runs: int, l2: str) -> DeviceTime:
    """triton-ascend's profiler-based do_bench (``TRITON_BENCH_METHOD=npu``): pure device time
    of each call. It flushes its own cache buffer before each call, so the L2 is cold."""
    import triton.testing

    previous = os.environ.get("TRITON_BENCH_METHOD")
    os.environ["TRITON_BENCH_METHOD"] = "npu"
    try:
        samples = triton.testing.do_bench(fn, warmup=warmup, rep=runs, return_mode="all")
    finally:
        if previous is None:
            os.environ.pop("TRITON_BENCH_METHOD", None)
        else:
            os.environ["TRITON_BENCH_METHOD"] = previous
    xs = list(samples) if isinstance(samples, (list, tuple)) else [float(samples)]
    return DeviceTime(summarize(xs), "npu-profiler", "cold",
                      None if l2 == "cold" else "l2 warm not available: do_bench flushes")
