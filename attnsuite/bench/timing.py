"""Device-correct timing for benchmarks.

* Every timed call is bracketed by device events (``Device.time_events``), after warm-up calls;
  the first call (which compiles) is timed apart, synchronized, as the compile time.
* The L2 cache is flushed before every timed call by overwriting a buffer larger than any
  current L2 (H100: 50 MB), so each run reads its operands from HBM as a cold kernel would.
* Statistics: median and inter-quartile range over the runs.
* ``device_lock``: one process at a time times on a given device. xdist workers that share a
  GPU keep running correctness cases; only timing waits.
* On NPU, ``method="npu"`` asks triton-ascend's profiler-based ``do_bench``
  (``TRITON_BENCH_METHOD=npu``) instead of events.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

#: Bytes overwritten before each timed call: 4x an H100's 50 MB L2.
FLUSH_BYTES = 256 * 2**20
METHODS = ("events", "npu")


@dataclass(frozen=True)
class Timing:
    median_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    min_ms: float
    runs: int

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_ms: list[float]) -> Timing:
    """Median and quartiles (inclusive method: defined for any number of runs >= 1)."""
    if not samples_ms:
        raise ValueError("summarize: no samples")
    xs = sorted(samples_ms)
    if len(xs) == 1:
        q1 = med = q3 = xs[0]
    else:
        q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return Timing(med, q1, q3, q3 - q1, xs[0], len(xs))


def l2_flusher(device) -> Optional[Callable[[], None]]:
    """A callable that evicts the device's L2 (None on cpu, where timings are not benchmarks)."""
    return device.l2_flusher()


def first_call_s(device, fn: Callable[[], object]) -> float:
    """Wall seconds of the first, synchronized call: compile (or cache load) plus one run."""
    device.synchronize()
    t0 = time.perf_counter()
    fn()
    device.synchronize()
    return time.perf_counter() - t0


def measure(device, fn: Callable[[], object], *, warmup: int = 5, runs: int = 30,
            method: str = "events", flush: Optional[Callable[[], None]] = None) -> Timing:
    """Timing of ``fn`` on ``device`` (call ``first_call_s`` first: warm-up is not compile)."""
    if method not in METHODS:
        raise ValueError(f"measure: method must be one of {METHODS}, got {method!r}")
    if method == "npu":
        return _npu_profiler(fn, warmup, runs)
    return summarize(device.time_events(fn, warmup=warmup, repeat=runs, before=flush))


def _npu_profiler(fn, warmup: int, runs: int) -> Timing:
    # triton-ascend's do_bench reads TRITON_BENCH_METHOD; "npu" times with the NPU profiler.
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
    return summarize(list(samples) if isinstance(samples, (list, tuple)) else [float(samples)])


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
    decode-like kernels are compared with."""
    src = torch.empty(nbytes // 2, dtype=torch.float16, device=device.torch_device).fill_(1.0)
    dst = torch.empty_like(src)
    t = measure(device, lambda: dst.copy_(src), warmup=3, runs=runs)
    return 2 * nbytes / (t.median_ms * 1e-3) / 1e9
