"""One conformance case, start to finish: case -> inputs -> implementation and reference ->
comparison -> a frozen ``CaseOutcome``. A failing stage raises ``CaseFailure`` inside; the
measurements made so far travel on ``CaseResult`` and are frozen into the outcome either way, so
a failed case is recorded with its numbers. Running out of device memory is an outcome of its
own (``oom``): the case is retried once with the device to itself before it is recorded."""
from __future__ import annotations

import os
import time
from typing import Callable

import torch

from . import ecosystem, interpreted, tolerance
from .buffers import guarded_nan_buffer, guards_intact, inputs_unchanged
from .family import inputs_on
from .interfaces import Unsupported
from .result import (CaseFailure, CaseOutcome, CaseResult, DeviceOutOfMemory, classify_exception,
                     is_out_of_memory)


def run_case(family, case, device, impl: Callable, compile_targets=()) -> CaseOutcome:
    """Run and judge one case (or, given ``compile_targets``, only compile what it would launch)."""
    if compile_targets:
        return _attempt(lambda result: _compile(family, case, impl, compile_targets, result))
    outcome = _attempt(lambda result: _run(family, case, device, impl, result), device)
    if outcome.status == "oom":
        # Other workers' cases share the device: wait for them, hold off new ones, try once more.
        device.empty_cache()
        outcome = _attempt(lambda result: _run(family, case, device, impl, result), device, exclusive=True)
    return outcome


def _attempt(body: Callable[[CaseResult], None], device=None, exclusive: bool = False) -> CaseOutcome:
    result = CaseResult()
    try:
        if device is None:
            body(result)
        else:
            with device.use(exclusive=exclusive):
                body(result)
    except CaseFailure as failure:
        return result.freeze("fail", failure.stage, str(failure))
    except Unsupported as exc:
        return result.freeze("unsupported", None, str(exc))
    except DeviceOutOfMemory as exc:
        result.memory = {**result.memory, **exc.memory}
        return result.freeze("oom", exc.stage, str(exc))
    return result.freeze("pass")


def _library_usable(impl) -> None:
    """An ecosystem implementation whose library does not import here: Unsupported, with the
    import error, before any input is built (attnsuite/ecosystem)."""
    from .ecosystem import Library

    library = getattr(impl, "library", None)
    if isinstance(library, Library):
        library.load()


def _compile(family, case, impl, targets, result: CaseResult) -> None:
    from .compile_case import compile_case

    _library_usable(impl)
    compile_case(family, case, impl, list(targets), result)


class _Stage:
    """Times the phases of a case into ``result.phases`` and turns an unexpected exception into
    a CaseFailure of the stage it happened in (or DeviceOutOfMemory)."""

    def __init__(self, device, result: CaseResult):
        self.device, self.result = device, result
        self.name = "inputs"

    def __call__(self, name: str) -> "_Stage":
        self.name = name
        return self

    def __enter__(self):
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, kind, exc, tb):
        self.result.phases[self.name] = time.perf_counter() - self.t0
        if exc is None or isinstance(exc, (CaseFailure, Unsupported, DeviceOutOfMemory)):
            return False
        if not isinstance(exc, Exception):
            return False  # KeyboardInterrupt, pytest's own outcomes: not ours to judge
        if is_out_of_memory(exc):
            raise DeviceOutOfMemory(self.name, f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                                    self.device.memory_stats()) from exc
        stage = classify_exception(exc) if self.name in ("first_call", "impl") else self.name
        raise CaseFailure(stage, f"{type(exc).__name__}: {exc}") from exc


def _run(family, case, device, impl, result: CaseResult) -> None:
    _library_usable(impl)
    stage = _Stage(device, result)
    with stage("inputs"):
        inputs = inputs_on(family, case, device)
        pristine = {k: v.clone() for k, v in inputs.items()}
        buffers = {name: guarded_nan_buffer(shape, dtype, device.torch_device)
                   for name, (shape, dtype) in family.output_specs(case, inputs).items()}
        outputs = {n: view for n, (view, _) in buffers.items()}
        device.synchronize()
        device.reset_peak_memory()
    with interpreted.counting(_interpreting()) as launched, ecosystem.collecting() as notes:
        try:
            with stage("first_call"):
                produced = family.call(impl, case, inputs, outputs)
                device.synchronize()
            result.memory = device.memory_stats()
            if device.times_kernels:
                # A second call shows the kernel's own time apart from compiling (the interpreter
                # has no compile step, and a second interpreted call would only double the cost).
                with stage("impl"):
                    produced = family.call(impl, case, inputs, outputs)
                    device.synchronize()
        finally:
            result.interpreted_launches = launched[0]
            result.adapter_notes = list(notes) + list(getattr(impl, "attnsuite_notes", lambda: [])())
    with stage("reference"):
        ref = family.reference(case, inputs, torch.float64)
        base = family.reference(case, inputs, case.dtype)
        device.synchronize()  # the reference's own time, not the comparison's
    if getattr(impl, "attnsuite_lse", True) is False and "lse" in ref:
        # Declared LSE-less (attnsuite/optional_keywords.py): judged on what it can return.
        result.not_provided.append("lse")
        ref, base = ({k: v for k, v in d.items() if k != "lse"} for d in (ref, base))
        produced = {k: v for k, v in produced.items() if k != "lse"}
    with stage("compare"):
        problems = buffer_contract(produced, outputs)
        # What the caller sees is what is judged: the caller's buffers where it passed them.
        judged = {name: outputs.get(name, tensor) for name, tensor in produced.items()}
        # A family whose outputs are not judged element by element (a top-k is a set) says how.
        compare = getattr(family, "compare", None)
        problems += (compare(case, inputs, judged, ref, result) if compare is not None
                     else _judge(case, judged, ref, base, result, family.score_bound(case, inputs)))
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
        stage_name = "contract" if any(p.startswith("buffer contract") for p in problems) else "numeric"
        raise CaseFailure(stage_name, "; ".join(problems))


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _is_view_of(t, buffer: torch.Tensor) -> bool:
    if not isinstance(t, torch.Tensor) or t.device != buffer.device:
        return False
    if t.untyped_storage().data_ptr() != buffer.untyped_storage().data_ptr():
        return False
    start, size = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    return start <= t.data_ptr() and t.data_ptr() + t.numel() * t.element_size() <= start + size \
        and t.numel() == buffer.numel()


def buffer_contract(produced: dict, outputs: dict) -> list[str]:
    """docs/contract.md, "Output buffers": a result the caller gave a buffer for is returned in that
    buffer (the buffer itself or a view of it), never in a tensor of the implementation's own."""
    problems = []
    for name, buffer in outputs.items():
        got = produced.get(name)
        if got is None or _is_view_of(got, buffer):
            continue
        what = f"a tensor of shape {list(got.shape)}" if isinstance(got, torch.Tensor) else type(got).__name__
        problems.append(f"buffer contract: {name} was passed as out=/{name}= but the implementation returned "
                        f"{what} that is not that buffer or a view of it (ignored the caller's buffer)")
    return problems


def _judge(case, produced, ref, base, result: CaseResult, score_bound=None) -> list[str]:
    problems = []
    headrooms = []
    for name in ref:
        if name not in produced or produced[name] is None:
            problems.append(f"{name}: the implementation returned no {name}")
            continue
        # The score bound judges the softmax output only (an LSE's own floor is u * |lse|).
        cmp = tolerance.compare(name, produced[name], ref[name], base[name], case.dtype,
                                score_bound if name == "o" else None)
        result.metrics[name] = cmp.metrics()
        headrooms.append(cmp.headroom)
        if not cmp.ok:
            problems.append(cmp.reason)
    result.headroom = min(headrooms) if headrooms else None
    result.tolerance = {"policy": tolerance.POLICY, "factor": tolerance.FACTOR,
                        "unit_roundoff": tolerance.unit_roundoff(case.dtype),
                        "floor": min((m["floor"] for m in result.metrics.values()), default=None)}
    return problems
