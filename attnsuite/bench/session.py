"""What a benchmark test calls: ``bench.run(case)``. Thin glue between pytest (skips, the
record, pytest-benchmark's storage) and ``run_bench``; the timing logic lives in run/timing."""
from __future__ import annotations

import pytest

from .run import prepare, run_bench
from .timing import copy_bandwidth_gbps, device_lock, l2_flusher

CPU_REASON = ("benchmarks need a GPU or NPU: on cpu kernels run in the Triton interpreter, whose "
              "timings say nothing about a kernel")

_COPY_GBPS: dict = {}


def copy_gbps(device) -> float:
    """The device's copy bandwidth, measured once per process (under the device's lock)."""
    key = (device.kind, device.index)
    if key not in _COPY_GBPS:
        with device_lock(device):
            _COPY_GBPS[key] = copy_bandwidth_gbps(device)
    return _COPY_GBPS[key]


class Bench:
    """``session``: the SuiteSession; ``item``: the benchmark's pytest item (its frozen outcome
    goes to the item's stash, where the record is built from)."""

    def __init__(self, session, item, benchmark=None):
        self.session, self.item, self.benchmark = session, item, benchmark

    def run(self, case) -> dict:
        from attnsuite.collection import OUTCOME, PARAM
        from attnsuite.interfaces import Unsupported
        from attnsuite.result import CaseOutcome, CaseResult

        session = self.session
        if session.options.compile_targets:
            pytest.skip("compile-only: nothing to time")
        if not session.device.times_kernels:
            pytest.skip(CPU_REASON)
        family = session.families()[case.family]
        param = self.item.stash.get(PARAM, None)
        name = param.impl if param is not None else session.impls_for(family)[0][0]
        impl = session.impl(family, name)
        options = session.options
        try:
            library = getattr(impl, "library", None)
            if library is not None:  # a library that does not import here: unsupported, as in the cases
                library.load()
            prepared = prepare(family, case, session.device, impl)
            payload = run_bench(family, case, session.device, impl, runs=options.bench_runs,
                                method=options.bench_method, l2=getattr(options, "bench_l2", "cold"),
                                repeat=getattr(options, "bench_repeat", 1),
                                copy_gbps=copy_gbps(session.device), prepared=prepared)
        except Unsupported as exc:
            self.item.stash[OUTCOME] = CaseResult().freeze("unsupported", None, str(exc))
            pytest.skip(f"{name} does not support this case: {exc}")
        self.item.stash[OUTCOME] = CaseOutcome("pass", bench=payload)
        if self.benchmark is not None:
            self._store(prepared[2], payload)
        return payload

    def _store(self, kernel, payload) -> None:
        """pytest-benchmark's own numbers: synchronized wall clock per call (launch + kernel +
        sync, after an untimed L2 flush). ``extra_info`` carries the figures that matter:
        device time (median, IQR) and its method, host time per call, call latency, then the
        whole payload flattened (pytest-benchmark's compare reads flat keys)."""
        device = self.session.device

        def synced():
            kernel()
            device.synchronize()

        flush = l2_flusher(device)

        def setup():  # pedantic reads a setup's return value as (args, kwargs): return nothing
            flush()

        self.benchmark.extra_info.update(headline(payload))
        self.benchmark.extra_info.update(flatten(payload))
        with device_lock(device):
            self.benchmark.pedantic(synced, setup=setup, rounds=self.session.options.bench_runs,
                                    warmup_rounds=2, iterations=1)


def headline(payload: dict) -> dict:
    """The kernel's figures under short keys, first in extra_info."""
    k = payload["kernel"]
    return {"device_median_ms": k["device"]["median_ms"], "device_iqr_ms": k["device"]["iqr_ms"],
            "device_method": k["method"], "l2": k["l2"], "host_us": k["host_us"]["median"],
            "latency_ms": k["latency_ms"]}


def flatten(payload: dict, prefix: str = "") -> dict:
    """Nested dicts -> flat ``a.b.c`` keys (pytest-benchmark's compare reads flat extra_info)."""
    out = {}
    for k, v in payload.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
