"""Compile one launch for a CUDA architecture with upstream Triton (3.6 - 3.9), no GPU needed.

``triton.compile(ASTSource(...), target=GPUTarget("cuda", cap, 32), options=...)`` runs the whole
pipeline (TTIR, TTGIR, LLVM IR, PTX, then ``ptxas`` shipped in the wheel) on the CPU. The
signature / constexprs / attributes come from ``specialize`` (what ``JITFunction.run`` would
compute for the same arguments). ``kernel.warmup(...)`` is not usable here: it asks the active
driver for the device and fails with "0 active drivers" on a machine without a GPU.

After a successful compile the kernel's static shared memory is checked against the
architecture's per-block limit, which a launch would enforce ("out of resource: shared memory").
"""
from __future__ import annotations

import re
import time
from typing import Any

from . import toolchain
from .frontend import frontend_message, is_frontend_error
from .jitfn import as_jit_function, compiling, kernel_name
from .result import FAIL, PASS, CompileOutcome, trim_message
from .specialize import specialize

#: Largest dynamic shared memory one block may use (opt-in), bytes.
SHARED_LIMIT = {80: 166912, 86: 101376, 89: 101376, 90: 232448}

#: Stage (as triton names it) -> failure class reported.
STAGE_CLASS = {None: "frontend", "ttir": "ttir", "ttgir": "ttgir", "llir": "llvm", "ptx": "llvm",
               "cubin": "ptxas"}


def parse_target(target: str) -> int:
    """"sm_80" / "sm_90a" / "cuda:90" -> 80 / 90 / 90."""
    m = re.fullmatch(r"(?:sm_|cuda:)(\d+)a?", target.strip())
    if not m:
        raise ValueError(f"not a CUDA target: {target!r} (expected e.g. 'sm_80' or 'sm_90')")
    return int(m.group(1))


def check_grid(grid: Any) -> str | None:
    """CUDA limits: grid x < 2**31, y and z <= 65535. Returns a message, or None when it fits."""
    dims = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    dims = tuple(int(d) for d in dims) + (1,) * (3 - len(dims))
    limits = (2**31 - 1, 65535, 65535)
    for axis, (d, lim) in enumerate(zip(dims, limits)):
        if d > lim:
            return f"grid {dims}: axis {axis} has {d} programs, CUDA allows at most {lim}"
    return None


def compile_link(plan: Any, target: str, *, grid_check: bool = True) -> CompileOutcome:
    """Compile one LaunchPlan link (``kernel``, ``args``, ``meta``) for ``target`` ("sm_80").
    ``grid_check=False`` leaves the grid limits to the caller."""
    from .stages import compile_tracked

    t0 = time.perf_counter()
    name = kernel_name(plan.kernel)
    version = toolchain.require("upstream", target)
    cap = parse_target(target)
    arts: dict = {"toolchain": f"triton {version}", "grid": tuple(plan.grid)}

    def done(outcome, stage, message, reached):
        return CompileOutcome(target=target, outcome=outcome, stage=stage, message=message,
                              last_stage_reached=reached, artifacts=arts,
                              seconds=time.perf_counter() - t0, kernel=name)

    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    gpu_target = GPUTarget("cuda", cap, 32)
    with compiling():
        jf = as_jit_function(plan.kernel)
        try:
            spec = specialize(jf, make_backend(gpu_target), tuple(plan.args), dict(plan.meta))
        except (TypeError, KeyError, ValueError) as exc:
            return done(FAIL, "frontend", f"binding the launch arguments: {type(exc).__name__}: "
                        f"{exc}", "none")
        arts["signature"] = {str(k): v for k, v in spec.signature.items()}
        kernel, exc, tracker = compile_tracked(spec.src, gpu_target, spec.options)
    arts["stage_seconds"] = dict(tracker.seconds)
    if exc is not None:
        stage = STAGE_CLASS.get(tracker.current, tracker.current)
        if is_frontend_error(exc) or tracker.current is None:
            stage, message = "frontend", frontend_message(exc, jf)
        else:
            message = trim_message(f"{type(exc).__name__}: {exc}")
        return done(FAIL, stage, message, tracker.last_finished or "none")
    arts["cache_hit"] = not tracker.started
    asm = kernel.asm
    for key in ("ttir", "ttgir", "llir", "ptx", "cubin"):
        if key in asm:
            arts[f"{key}_bytes"] = len(asm[key])
    meta = kernel.metadata
    shared = int(getattr(meta, "shared", 0) or 0)
    arts.update(shared_bytes=shared, num_warps=getattr(meta, "num_warps", None),
                num_stages=getattr(meta, "num_stages", None), name=getattr(meta, "name", name))
    if not arts.get("cubin_bytes"):
        return done(FAIL, "ptxas", "compile returned no cubin", tracker.last_finished or "ptx")
    limit = SHARED_LIMIT.get(cap)
    arts["shared_limit"] = limit
    if limit is not None and shared > limit:
        return done(FAIL, "smem", f"kernel needs {shared} bytes of shared memory per block; "
                    f"sm_{cap} allows at most {limit} (a launch fails with 'out of resource: "
                    f"shared memory')", "cubin")
    grid_problem = check_grid(plan.grid) if grid_check else None
    if grid_problem:
        return done(FAIL, "grid", grid_problem, "cubin")
    return done(PASS, None, "", "cubin")
