"""One conformance case in compile-only mode, for any implementation: the case's inputs are built
on the host, the implementation is called while Triton's launch path is captured
(``attnsuite.compile.capture``), so it validates and plans exactly what it would launch on a device
(dtypes, constexprs, tile configs, autotune candidates, grid), and every captured launch is compiled
for every target. Nothing runs; no accelerator is needed.

The project's kernels plan device configs on host tensors under ``kernels.settings``'
``host_compile``; a foreign implementation gets the same host tensors, and one that needs a device
before it launches, or launches no Triton kernel at all (a vendor op), is ``Unsupported`` (a skip
with the reason), not a compile failure.

A specialization already compiled in this run is not compiled again (``attnsuite.compile.cache``);
its entry then says ``"cached": true``. Ascend entries carry the launch's performance
``hazards`` (``attnsuite.compile.hazards``).
"""
from __future__ import annotations

import time

import kernels.settings

from . import ecosystem
from .buffers import guarded_nan_buffer
from .interfaces import Unsupported
from .result import CaseFailure, CaseResult, classify_exception

#: What a record keeps of one compiled launch (the IR itself stays out of the records).
_KEEP = ("kernel", "outcome", "stage", "last_stage_reached", "seconds")


def capture_case(family, case, impl, notes: list | None = None) -> list:
    """The launches ``impl`` makes for ``case`` on host tensors (see module doc)."""
    from .compile.capture import NeedsDevice, capture_call

    inputs = family.make_inputs(case, case.generator())
    outputs = {name: guarded_nan_buffer(shape, dtype, "cpu")[0]
               for name, (shape, dtype) in family.output_specs(case, inputs).items()}
    try:
        with kernels.settings.using(host_compile=True), ecosystem.collecting() as said:
            try:
                launches = capture_call(lambda: family.call(impl, case, inputs, outputs))
            finally:
                if notes is not None:
                    notes.extend(said)
    except NeedsDevice as exc:
        raise Unsupported(f"compile-only: {exc}") from None
    except (CaseFailure, Unsupported):
        raise
    except Exception as exc:
        raise CaseFailure(classify_exception(exc), f"{type(exc).__name__}: {exc}") from exc
    if not launches:
        raise Unsupported("compile-only: the implementation launched no Triton kernel on host tensors "
                          "(a vendor op or a non-Triton path): nothing to compile")
    return launches


def compile_case(family, case, impl, targets: list[str], result: CaseResult) -> None:
    launches = capture_case(family, case, impl, result.adapter_notes)
    failures = []
    for target in targets:
        compiled = [compile_launch(launch, target) for launch in launches]
        result.compile[target] = [entry for entry, _ in compiled]
        failures += [(entry, message) for entry, message in compiled if entry["outcome"] != "pass"]
    if failures:
        first = failures[0][0]
        raise CaseFailure(first.get("stage") or "compile", "; ".join(
            f"{e['target']}/{e['kernel']}: {e['stage']}: {message}" for e, message in failures))


def compile_launch(launch, target: str) -> tuple[dict, str]:
    """(the record's entry for one launch on one target, the full failure message or "")."""
    from .compile import cache, check_grid, compile_link, hazards, target_kind

    t0 = time.perf_counter()
    npu = target_kind(target) == "npu"
    store = cache.for_this_run()

    def compile_once() -> dict:
        oc = compile_link(launch, target, grid_check=False)
        return {"entry": _summary(oc), "message": oc.message.strip(),
                "accesses": oc.artifacts.get("scalar_accesses")}

    value, hit = store.get_or_compile(cache.specialization_key(launch, target), compile_once)
    entry, message = dict(value["entry"]), value["message"]
    if hit:
        entry.update(cached=True, compiled_seconds=entry["seconds"], seconds=time.perf_counter() - t0)
    entry["grid"] = list(launch.grid)
    if getattr(launch, "origin", "jit") != "jit":
        entry["origin"] = launch.origin
    problem = check_grid(target, launch.grid)
    if problem and entry["outcome"] == "pass":
        entry.update(outcome="fail", stage="grid", message=problem)
        message = problem
    if npu:
        found = hazards.hazards(launch.grid, entry["target"], mix_mode=entry.get("mix_mode"),
                                accesses=value.get("accesses"), memory=entry.get("memory"))
        if found:
            entry["hazards"] = found
    return entry, message


def _summary(oc) -> dict:
    entry = {k: getattr(oc, k) for k in _KEEP}
    entry["target"] = oc.target
    entry["message"] = oc.message.strip().splitlines()[0] if oc.message.strip() else ""
    accesses = oc.artifacts.get("scalar_accesses")
    if accesses is not None:
        entry["scalar_accesses"] = len(accesses)
        entry["scalar_summary"] = oc.artifacts.get("scalar_summary", [])
    for key in ("cubin_bytes", "shared_bytes", "toolchain", "mix_mode", "memory", "flaky"):
        if key in oc.artifacts:
            entry[key] = oc.artifacts[key]
    return entry
