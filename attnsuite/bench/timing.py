"""Statistics and shared plumbing of the benchmark timer: quartiles, the L2 flush, the
per-device lock, and ``time_call``, which measures one callable the way a benchmark line
reports it (device time by a named method, host time apart, their sum as call latency).

How each figure is taken lives in its own module: ``graph_time`` (device time by graph
replay), ``profiler_time`` (device time from the profiler, for calls that cannot be
captured), ``host_time`` (wall time of the Python call).
"""
from __future__ import annotations

import contextlib
import fcntl
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional

from .graph_time import graph_time
from .host_time import host_time
from .profiler_time import npu_profiler_time, profiler_time
from .stats import CaptureFailed, DeviceTime, Timing, summarize  # noqa: F401 - re-exported

#: ``--bench-method`` choices. ``auto``: graph replay, else the profiler (the record names the
#: one used). ``events``: the previous method (events around an eager call after a flush),
#: which also counts any host time the device waits for; kept for comparison only.
METHOD_CHOICES = ("auto", "cudagraph", "profiler", "events", "npu")
#: What a record's ``method`` may say.
RECORD_METHODS = ("cudagraph", "profiler", "events", "npu-graph", "npu-profiler")
L2_STATES = ("cold", "warm")
#: Device time the host-time samples of one line may wait for, in all.
HOST_BUDGET_MS = 3000.0


_FLUSHERS: dict = {}


def l2_flusher(device) -> Optional[Callable[[], None]]:
    """A callable that evicts the device's L2 (None on cpu, where timings are not benchmarks):
    one per device and process, so its scratch buffer is allocated once and the flush graphs
    captured with it are reused (graph_time)."""
    key = (device.kind, device.index)
    if key not in _FLUSHERS:
        _FLUSHERS[key] = device.l2_flusher()
    return _FLUSHERS[key]


def first_call_s(device, fn: Callable[[], object]) -> float:
    """Wall seconds of the first, synchronized call: compile (or cache load) plus one run."""
    import time

    device.synchronize()
    t0 = time.perf_counter()
    fn()
    device.synchronize()
    return time.perf_counter() - t0


def device_time(device, fn: Callable[[], object], *, method: str = "auto", l2: str = "cold",
                runs: int = 30, warmup: int = 3,
                flush: Optional[Callable[[], None]] = None) -> DeviceTime:
    """Device time of ``fn`` (already called once: compile is not timed here).

    ``auto`` replays ``fn`` captured in a device graph and, when it cannot be captured, falls
    back to the profiler's per-kernel device time; the result names the method that produced
    it and, for a fallback, why. ``l2`` is the cache state of every timed call (``cold``: the
    L2 is flushed before each one).
    """
    if method not in METHOD_CHOICES:
        raise ValueError(f"device_time: method must be one of {METHOD_CHOICES}, got {method!r}")
    if l2 not in L2_STATES:
        raise ValueError(f"device_time: l2 must be one of {L2_STATES}, got {l2!r}")
    if flush is None and l2 == "cold":
        flush = l2_flusher(device)
    if method == "events":
        if l2 == "warm":
            flush = None
        samples = device.time_events(fn, warmup=warmup, repeat=runs, before=flush)
        return DeviceTime(summarize(samples), "events", l2,
                          "events around an eager call: host time the device waits for is inside")
    if device.kind == "npu" and method == "npu":
        return npu_profiler_time(fn, warmup=warmup, runs=runs, l2=l2)
    note = None
    if method in ("auto", "cudagraph"):
        try:
            return graph_time(device, fn, flush=flush if l2 == "cold" else None, runs=runs)
        except CaptureFailed as exc:
            if method == "cudagraph":
                raise
            note = f"not capturable ({exc}); profiler kernel time instead"
    if device.kind == "npu":
        result = npu_profiler_time(fn, warmup=warmup, runs=runs, l2=l2)
    else:
        result = profiler_time(device, fn, flush=flush if l2 == "cold" else None, runs=runs)
    if note:
        result = DeviceTime(result.timing, result.method, result.l2,
                            "; ".join(n for n in (note, result.note) if n))
    return result


def time_call(device, fn: Callable[[], object], *, method: str = "auto", l2: str = "cold",
              runs: int = 30, warmup: int = 3, flush: Optional[Callable[[], None]] = None,
              host_runs: Optional[int] = None) -> dict:
    """One benchmark line (records' ``bench`` contract): device time by ``method``, host time
    per call apart, and their sum as the call latency. ``fn`` must have been called once.
    A call that carries a ``context`` (``attnsuite.baselines.cuda.Pinned``: SDPA pinned to a
    backend) is timed as its ``bare`` call inside that context, entered once."""
    context = getattr(fn, "context", None)
    if context is not None and hasattr(fn, "bare"):
        with context():
            line = time_call(device, fn.bare, method=method, l2=l2, runs=runs, warmup=warmup,
                             flush=flush, host_runs=host_runs)
        line["note"] = "; ".join(n for n in (line["note"], "backend pinned around the timing, not per call") if n)
        return line
    dev = device_time(device, fn, method=method, l2=l2, runs=runs, warmup=warmup, flush=flush)
    # Each host sample waits for the device first: a slow baseline (a reference at a long
    # sequence) gets fewer samples, about HOST_BUDGET_MS in all, never fewer than 5.
    wanted = host_runs or max(50, runs)
    affordable = int(HOST_BUDGET_MS / max(dev.timing.median_ms, 1e-3))
    host = host_time(fn, sync=device.synchronize, runs=max(5, min(wanted, affordable)),
                     warmup=1 if affordable < wanted else 3)
    return {"device": dev.timing.as_dict(), "method": dev.method, "host_us": host,
            "latency_ms": dev.timing.median_ms + host["median"] * 1e-3, "l2": dev.l2,
            "note": dev.note}


def lock_path(device) -> Path:
    return Path(tempfile.gettempdir()) / f"attnsuite-bench-{device.kind}{device.index}.lock"


@contextlib.contextmanager
def device_lock(device) -> Iterator[None]:
    """Exclusive timing on one device across processes (xdist workers), by an advisory file lock."""
    path = lock_path(device)
    with open(path, "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def copy_bandwidth_gbps(device, nbytes: int = 2**30, runs: int = 10) -> float:
    """Device-to-device copy bandwidth (bytes read + bytes written per second), the roofline
    decode-like kernels are compared with; device time of the copy by the default method.

    The copy is an elementwise kernel, not ``copy_``: a captured ``copy_`` is a graph memcpy
    node, which on an H100 moved 1 GiB in 0.88 ms where the eager memcpy took 0.715 ms, so
    fractions of it overstated a kernel's share of the bandwidth (decode reached "1.13")."""
    import torch

    src = torch.empty(nbytes // 2, dtype=torch.float16, device=device.torch_device).fill_(1.0)
    dst = torch.empty_like(src)
    copy = lambda: torch.mul(src, 1, out=dst)  # noqa: E731
    copy()
    t = device_time(device, copy, runs=runs).timing
    return 2 * nbytes / (t.median_ms * 1e-3) / 1e9
