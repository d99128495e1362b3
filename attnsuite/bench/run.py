"""One benchmark case: inputs -> kernel compile time and timing -> baselines in the same
process on the same device, timed the same way -> speedups and throughput. Returns the record's
``bench`` payload (COORD.md's contract): per timed callable the device time and the method that
produced it, the host time per call apart, and their sum as the call latency; speedups, TFLOP/s
and GB/s from device time only."""
from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Callable

import torch

from ..family import inputs_on
from .timing import device_lock, device_time, first_call_s, l2_flusher, time_call
from .vendor import vendor_baselines

REPEAT_SPREAD = 0.10
#: Device time one baseline's timed runs may take in all. A baseline is a yardstick, not the
#: subject: the float32/float64 PyTorch reference at a long sequence takes tens to hundreds of
#: milliseconds a call, and 30 graph replays plus 30 host samples of it cost seconds per case
#: while its median settles in a few runs (a block-sparse sweep's 11-12 ms reference: the
#: medians of 5 and of 14 runs agreed within 1%). The kernel under test always gets every run.
BASELINE_BUDGET_S = 0.05
#: Fewest timed runs of any baseline (its median and quartiles stay defined and stable).
MIN_BASELINE_RUNS = 5


def _takes_check_indices(fn) -> bool:
    try:
        return "check_indices" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def unchecked(impl: Callable) -> Callable:
    """The implementation as a serving loop calls it once its index tensors are known good:
    ``check_indices=False`` where it has that switch (the data-dependent checks read device
    memory: a sync per call, and no graph capture). An implementation object with one method
    per operation (mustafar) gets the switch on each method that has it. The checked call is
    timed too, as the ``checked_call`` baseline (on the headline cases, not a sweep's points)."""
    if _takes_check_indices(impl):
        return functools.partial(impl, check_indices=False)
    if dataclasses.is_dataclass(impl) and not isinstance(impl, type):
        changes = {f.name: functools.partial(getattr(impl, f.name), check_indices=False)
                   for f in dataclasses.fields(impl)
                   if callable(getattr(impl, f.name)) and _takes_check_indices(getattr(impl, f.name))}
        if changes:
            return dataclasses.replace(impl, **changes)
    return impl


def prepare(family, case, device, impl) -> tuple[dict, dict, Callable]:
    """The case's inputs on the device, its outputs, and the kernel call to time."""
    inputs = inputs_on(family, case, device)
    outputs = {name: torch.empty(shape, dtype=dtype, device=device.torch_device)
               for name, (shape, dtype) in family.output_specs(case, inputs).items()}
    fast = launch_only(unchecked(impl))
    return inputs, outputs, lambda: family.call(fast, case, inputs, outputs)


def launch_only(impl: Callable) -> Callable:
    """An ecosystem adapter made of two steps (``impl.prepare``: its copies, gathers and plans;
    then the library call it returns) timed by the library call alone: the first call prepares,
    and every later call replays that call's ``launch`` (the timed calls all get the same
    arguments). Anything else is returned as it is."""
    stage = getattr(impl, "prepare", None)
    if stage is None:
        return impl
    launches: list = []

    def call(*args, **kwargs):
        if not launches:
            launches.append(stage(*args, **kwargs))
        return launches[0]()
    call.library = getattr(impl, "library", None)
    return call


#: Device times of vendor baselines already measured in this process, by problem shape. Dense
#: vendor attention reads and computes the same whatever the values are, so every case of one
#: shape (a block-sparse sweep's points, a family's dtype twins share none) gets the same figure:
#: it is timed for the first and reused, marked so in its note, for the rest.
_VENDOR_TIMES: dict = {}


def _tensor_key(t) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), str(t.dtype), str(t.device))


def vendor_key(name: str, problem: dict | None, timing: dict) -> tuple | None:
    """What a vendor baseline's device time depends on: its problem's shapes, strides, dtype and
    device, the causal flag and the timing method (None: no problem, nothing to share)."""
    if not problem:
        return None
    try:
        tensors = tuple(_tensor_key(problem[n]) for n in ("q", "k", "v"))
    except (KeyError, AttributeError):
        return None
    return (name, tensors, bool(problem.get("causal", False)), timing["runs"], timing["method"], timing["l2"])


def _hashable(x) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


def baseline_runs(call_s: float, runs: int, budget_s: float = BASELINE_BUDGET_S) -> int:
    """Timed runs for a baseline whose first call took ``call_s`` seconds: ``runs`` while they
    fit in ``budget_s``, fewer for a slow one, never fewer than MIN_BASELINE_RUNS (nor more than
    ``runs``)."""
    if call_s <= 0 or call_s * runs <= budget_s:
        return runs
    return max(min(MIN_BASELINE_RUNS, runs), min(runs, int(budget_s / call_s)))


def repeat_record(medians_ms: list[float]) -> dict:
    """The contract's ``bench["repeat"]``: two device-time medians of one case in one session."""
    a, b = medians_ms[0], medians_ms[1]
    spread = abs(a - b) / min(a, b) if min(a, b) > 0 else float("inf")
    return {"device_median_ms": [a, b], "spread": spread, "flagged": spread > REPEAT_SPREAD}


def run_bench(family, case, device, impl, *, runs: int = 30, warmup: int = 5, method: str = "auto",
              l2: str = "cold", repeat: int = 1, copy_gbps: float | None = None,
              prepared: tuple | None = None) -> dict:
    inputs, outputs, kernel = prepared or prepare(family, case, device, impl)
    candidates = {"reference": (lambda: family.reference(case, inputs, case.dtype), None)}
    problem = family.vendor_problem(case, inputs)
    vendor = vendor_baselines(device, problem)
    candidates.update(vendor)
    # A family's own yardsticks call the kernel as the timed call does (no index checks: those
    # synchronize, so the call could not be captured in a graph).
    # An entry may carry a third item, what its device time depends on (the dense kernel of
    # block-sparse: the shapes and the block shape, not the sweep point's sparsity): timed for
    # the first sweep point with that key in the process and reused, like a vendor baseline.
    # On a sweep's points only: a headline case times each of its baselines itself.
    shared_keys = {}
    for name, entry in family.extra_baselines(case, inputs, unchecked(impl)).items():
        candidates[name] = tuple(entry[:2])
        if len(entry) > 2 and entry[2] is not None and family.sweep(case):
            shared_keys[name] = entry[2]
    # The reference too, where the family says its time depends on less than the case (timing it
    # took each of a block-sparse sweep's 160 points 12 calls of about 12 ms on an H100).
    reference_key = getattr(family, "reference_cost_key", lambda c, i: None)(case, inputs)
    if reference_key is not None and family.sweep(case):
        shared_keys["reference"] = reference_key
    # The checks' cost is a property of the implementation, shown on the headline cases; a
    # sweep's points chart the kernel against its baselines and skip it.
    if unchecked(impl) is not impl and not family.sweep(case):
        candidates["checked_call"] = (lambda: family.call(impl, case, inputs, outputs),
                                      "the same call with check_indices=True")
    flush = l2_flusher(device) if l2 == "cold" else None
    timing = dict(warmup=warmup, runs=runs, method=method, l2=l2, flush=flush)
    baselines = {}
    with device_lock(device):
        compile_s = first_call_s(device, kernel)
        result = time_call(device, kernel, **timing)
        for name, (fn, note) in candidates.items():
            if fn is None:
                baselines[name] = {"unavailable": note}
                continue
            shared = vendor_key(name, problem, timing) if name in vendor else None
            if name in shared_keys and _hashable(impl):  # the implementation itself is part of it
                shared = (name, impl, shared_keys[name], timing["runs"], timing["method"], timing["l2"])
            if shared in _VENDOR_TIMES:
                baselines[name] = dict(_VENDOR_TIMES[shared])
                baselines[name]["note"] = "; ".join(
                    x for x in (baselines[name]["note"], "timed once for this shape in this process and reused") if x)
                continue
            try:
                n = baseline_runs(first_call_s(device, fn), runs)
                # Host samples too: as many as its device runs (the kernel gets at least 50).
                line = time_call(device, fn, **{**timing, "runs": n}, host_runs=n)
                if n < runs:
                    line["note"] = "; ".join(x for x in (line["note"], f"{n} timed runs (a slow baseline)") if x)
            except Exception as exc:  # a baseline that fails must not lose the kernel's timing
                baselines[name] = {"unavailable": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
                continue
            line["note"] = "; ".join(n for n in (note, line["note"]) if n) or None
            baselines[name] = line
            if shared is not None:
                _VENDOR_TIMES[shared] = dict(line)
        again = None
        if repeat >= 2:  # after the baselines: drift over the session shows up as spread
            again = device_time(device, kernel, method=method, l2=l2, runs=runs, warmup=warmup,
                                flush=flush).timing.median_ms
    kernel_ms = result["device"]["median_ms"]
    bench = {"kernel": {**result, "compile_s": compile_s}, "baselines": baselines,
             "speedup": {n: b["device"]["median_ms"] / kernel_ms for n, b in baselines.items()
                         if "device" in b},
             "config": _config(unchecked(impl), case, family, inputs, outputs),
             "sweep": family.sweep(case)}
    if again is not None:
        bench["repeat"] = repeat_record([kernel_ms, again])
    bench.update(throughput(family.work(case, inputs), kernel_ms, copy_gbps))
    return bench


def throughput(work: dict, kernel_ms: float, copy_gbps: float | None) -> dict:
    """TFLOP/s and GB/s of the kernel's device time (never host time or call latency)."""
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
    """The launch config the kernel chose: the captured launches' meta (tile sizes, warps), and
    where each kernel's tiles came from (``tuning``: table, cache, tuned or default, from the
    kernels' own plans)."""
    from kernels.plans import capture_launches

    from ..compile.capture import launch_configs

    call = lambda: family.call(impl, case, inputs, outputs)  # noqa: E731
    configs = launch_configs(call)
    if not configs:
        return None
    try:
        with capture_launches() as plans:
            call()
        sources = {_kernel_name(p.kernel): p.tuning for plan in plans for p in plan.chain()}
    except Exception:  # noqa: BLE001 - the tiles are still worth showing without their source
        sources = {}
    return {name: {**meta, "tuning": sources.get(name, "unknown")} for name, meta in configs.items()}


def _kernel_name(kernel) -> str:
    fn = getattr(kernel, "fn", kernel)  # a JITFunction wraps the Python function
    return getattr(fn, "__name__", str(kernel)).lstrip("_")
