"""One benchmark case: inputs -> kernel compile time and timing -> baselines in the same
process on the same device -> speedups and throughput. Returns the record's ``bench`` payload."""
from __future__ import annotations

import functools
import inspect
from typing import Callable

import torch

from .timing import device_lock, first_call_s, l2_flusher, measure
from .vendor import vendor_baselines


def _timed(device, fn: Callable, flush, *, warmup: int, runs: int, method: str) -> dict:
    first = first_call_s(device, fn)
    t = measure(device, fn, warmup=warmup, runs=runs, method=method, flush=flush)
    return {**t.as_dict(), "compile_s": first}


def unchecked(impl: Callable) -> Callable:
    """The implementation as a serving loop calls it once its index tensors are known good:
    ``check_indices=False`` where it has that switch (the data-dependent checks cost a device
    sync per call). The checked call is timed too, as the ``checked_call`` baseline."""
    try:
        takes = "check_indices" in inspect.signature(impl).parameters
    except (TypeError, ValueError):
        takes = False
    return functools.partial(impl, check_indices=False) if takes else impl


def prepare(family, case, device, impl) -> tuple[dict, dict, Callable]:
    """The case's inputs on the device, its outputs, and the kernel call to time."""
    inputs = {k: device.place(v) for k, v in family.make_inputs(case, case.generator()).items()}
    outputs = {name: torch.empty(shape, dtype=dtype, device=device.torch_device)
               for name, (shape, dtype) in family.output_specs(case, inputs).items()}
    fast = unchecked(impl)
    return inputs, outputs, lambda: family.call(fast, case, inputs, outputs)


def run_bench(family, case, device, impl, *, runs: int = 30, warmup: int = 5, method: str = "events",
              copy_gbps: float | None = None, prepared: tuple | None = None) -> dict:
    inputs, outputs, kernel = prepared or prepare(family, case, device, impl)
    candidates = {"reference": (lambda: family.reference(case, inputs, case.dtype), None)}
    candidates.update(vendor_baselines(device, family.vendor_problem(case, inputs)))
    candidates.update(family.extra_baselines(case, inputs, impl))
    if unchecked(impl) is not impl:
        candidates["checked_call"] = (lambda: family.call(impl, case, inputs, outputs),
                                      "the same call with check_indices=True (one device sync)")
    flush = l2_flusher(device)
    timing = dict(warmup=warmup, runs=runs, method=method)
    baselines = {}
    with device_lock(device):
        result = _timed(device, kernel, flush, **timing)
        for name, (fn, note) in candidates.items():
            if fn is None:
                baselines[name] = {"unavailable": note}
                continue
            try:
                baselines[name] = {**_timed(device, fn, flush, **timing), "note": note}
            except Exception as exc:  # a baseline that fails must not lose the kernel's timing
                baselines[name] = {"unavailable": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    compile_s = result.pop("compile_s")
    kernel_ms = result["median_ms"]
    bench = {"kernel": {**result, "compile_s": compile_s}, "baselines": baselines,
             "speedup": {n: b["median_ms"] / kernel_ms for n, b in baselines.items() if "median_ms" in b},
             "config": _config(unchecked(impl), case, family, inputs, outputs),
             "sweep": family.sweep(case)}
    bench.update(throughput(family.work(case, inputs), kernel_ms, copy_gbps))
    return bench


def throughput(work: dict, kernel_ms: float, copy_gbps: float | None) -> dict:
    flops, nbytes = work.get("flops"), work.get("bytes")
    out = {"flops": flops, "bytes": nbytes, "copy_gbps": copy_gbps, "tflops": None, "gbps": None,
           "copy_fraction": None}
    seconds = kernel_ms * 1e-3
    if flops:
        out["tflops"] = flops / seconds / 1e12
    if nbytes:
        out["gbps"] = nbytes / seconds / 1e9
        if copy_gbps:
            out["copy_fraction"] = out["gbps"] / copy_gbps
    return out


def _config(impl, case, family, inputs, outputs) -> dict | None:
    """The launch config the kernel chose: the captured launches' meta (tile sizes, warps)."""
    from ..compile.capture import launch_configs

    return launch_configs(lambda: family.call(impl, case, inputs, outputs))
