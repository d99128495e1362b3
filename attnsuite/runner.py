"""One conformance case, start to finish: case -> inputs -> implementation and reference ->
comparison. Failures are raised as ``CaseFailure`` carrying the stage they happened in; the
measurements made so far travel on ``CaseResult`` either way, so a failed case is recorded
with its numbers."""
from __future__ import annotations

import time
from typing import Callable

import torch

from . import tolerance
from .interfaces import Unsupported
from .ledger import KnownFailure, KnownFailureHit
from .buffers import guarded_nan_buffer, guards_intact, inputs_unchanged
from .result import CaseFailure, CaseResult, classify_exception


def run_case(family, case, device, impl: Callable, known: KnownFailure | None = None,
             result: CaseResult | None = None, compile_targets: list[str] | None = None) -> CaseResult:
    """Run and judge one case (or, given ``compile_targets``, only compile what it would launch);
    raise CaseFailure (or KnownFailureHit) if it does not conform."""
    result = CaseResult() if result is None else result
    try:
        if compile_targets:
            from .compile_case import compile_case

            compile_case(family, case, impl, compile_targets, result)
        else:
            _run(family, case, device, impl, result)
    except CaseFailure as failure:
        if known is not None and known.explains(failure.stage, str(failure)):
            raise KnownFailureHit(known, failure.stage, str(failure)) from failure
        raise
    return result


def _run(family, case, device, impl, result: CaseResult) -> None:
    stage = "inputs"
    try:
        inputs = {k: device.place(v) for k, v in family.make_inputs(case, case.generator()).items()}
        pristine = {k: v.clone() for k, v in inputs.items()}
        buffers = {name: guarded_nan_buffer(shape, dtype, device.torch_device)
                   for name, (shape, dtype) in family.output_specs(case, inputs).items()}
        device.synchronize()
        device.reset_peak_memory()

        stage = "launch"
        t0 = time.perf_counter()
        try:
            produced = family.call(impl, case, inputs, {n: view for n, (view, _) in buffers.items()})
            device.synchronize()
        except (CaseFailure, Unsupported):
            raise
        except Exception as exc:
            raise CaseFailure(classify_exception(exc), f"{type(exc).__name__}: {exc}") from exc
        result.timings["first_call_s"] = time.perf_counter() - t0
        result.memory = device.memory_stats()

        stage = "reference"
        ref = family.reference(case, inputs, torch.float64)
        base = family.reference(case, inputs, case.dtype)
    except (CaseFailure, Unsupported):
        raise
    except Exception as exc:
        raise CaseFailure(stage, f"{type(exc).__name__}: {exc}") from exc

    problems = _judge(case, produced, ref, base, result)
    try:
        result.quality = family.quality(case, inputs, produced)
    except Exception as exc:  # a figure that cannot be computed is not a conformance failure
        result.quality = {"error": f"{type(exc).__name__}: {exc}"}
    for name, (_, storage) in buffers.items():
        if not guards_intact(storage):
            problems.append(f"{name}: the implementation wrote outside its output buffer")
    for name, before in pristine.items():
        if not inputs_unchanged(before, inputs[name]):
            problems.append(f"input {name} was modified by the implementation")
    if problems:
        raise CaseFailure("numeric", "; ".join(problems))


def _judge(case, produced, ref, base, result: CaseResult) -> list[str]:
    problems = []
    headrooms = []
    for name in ref:
        if name not in produced or produced[name] is None:
            problems.append(f"{name}: the implementation returned no {name}")
            continue
        cmp = tolerance.compare(name, produced[name], ref[name], base[name], case.dtype)
        result.metrics[name] = cmp.metrics()
        headrooms.append(cmp.headroom)
        if not cmp.ok:
            problems.append(cmp.reason)
    result.headroom = min(headrooms) if headrooms else None
    result.tolerance = {"policy": tolerance.POLICY, "factor": tolerance.FACTOR,
                        "unit_roundoff": tolerance.unit_roundoff(case.dtype),
                        "floor": min((m["floor"] for m in result.metrics.values()), default=None)}
    return problems
