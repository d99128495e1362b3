"""One conformance case in compile-only mode: the case's inputs are built on the host, the
implementation is called inside ``kernels._checks.capture_launches`` so it validates and plans
exactly what it would launch on the device (dtypes, constexprs, tile configs, grid), and every
captured launch is compiled for every target. Nothing runs; no accelerator is needed."""
from __future__ import annotations

from .buffers import guarded_nan_buffer
from .result import CaseFailure, CaseResult, classify_exception

#: What a record keeps of one compiled launch (the IR itself stays out of the records).
_KEEP = ("kernel", "outcome", "stage", "last_stage_reached", "seconds")


def compile_case(family, case, impl, targets: list[str], result: CaseResult) -> None:
    from kernels._checks import capture_launches

    from .compile import compile_plan

    inputs = family.make_inputs(case, case.generator())
    outputs = {name: guarded_nan_buffer(shape, dtype, "cpu")[0]
               for name, (shape, dtype) in family.output_specs(case, inputs).items()}
    try:
        with capture_launches() as plans:
            family.call(impl, case, inputs, outputs)
    except Exception as exc:
        raise CaseFailure(classify_exception(exc), f"{type(exc).__name__}: {exc}") from exc
    if not plans:
        raise CaseFailure("compile", "the implementation launched nothing through kernels._checks.launch, "
                          "so there is nothing to compile")
    failures = []
    for target in targets:
        links = [oc for plan in plans for oc in compile_plan(plan, target)]
        result.compile[target] = [_summary(oc) for oc in links]
        failures += [oc for oc in links if not oc.passed]
    if failures:
        first = failures[0]
        raise CaseFailure(first.stage or "compile", "; ".join(
            f"{oc.target}/{oc.kernel}: {oc.stage}: {oc.message.strip()}" for oc in failures))


def _summary(oc) -> dict:
    entry = {k: getattr(oc, k) for k in _KEEP}
    entry["message"] = oc.message.strip().splitlines()[0] if oc.message.strip() else ""
    accesses = oc.artifacts.get("scalar_accesses")
    if accesses is not None:
        entry["scalar_accesses"] = len(accesses)
        entry["scalar_summary"] = oc.artifacts.get("scalar_summary", [])
    for key in ("cubin_bytes", "shared_bytes", "toolchain"):
        if key in oc.artifacts:
            entry[key] = oc.artifacts[key]
    return entry
