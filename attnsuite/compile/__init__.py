"""Compile-only checks: compile every launch of a ``LaunchPlan`` for a target without running it.

    from attnsuite.compile import compile_plan
    outcomes = compile_plan(prefill_plan(q, k, v, o, None, causal=True, scale=s, interpret=False),
                            "sm_90")          # or "sm_80", "Ascend910B2"

Targets: "sm_NN" / "cuda:NN" need upstream Triton (3.6 - 3.9); "Ascend<soc>" / "npu:Ascend<soc>"
need triton-ascend (see ``npu``). The two cannot share an environment: ``toolchain.installed()``
says which one is here, and asking for the other raises ``ToolchainUnavailable``.

Any launch works, not only the project's plans: ``capture.capture()`` records what an
implementation launches at Triton's own launch path (``kernel``, ``grid``, ``args``, ``meta``),
which is what the harness compiles (``attnsuite.compile_case``). On Ascend targets each compiled
launch also yields performance hazards (``hazards``: grid vs cores, scalarized and row accesses,
UB use), and a run compiles each specialization once (``cache``).

Works whether or not ``TRITON_INTERPRET=1`` was set when the kernels were imported (see
``jitfn``), but not after the interpreter has *run* a kernel in the same process: the interpreter
leaves ``triton.language`` patched and the frontend then fails ("'value' object has no attribute
'dtype'"). The harness never mixes the two (a compile-only run does not interpret). Tensor
arguments may live on the CPU: only their dtype and alignment matter.
"""
from __future__ import annotations

from typing import Any

from . import toolchain
from .result import FAIL, PASS, CompileOutcome, trim_message
from .toolchain import ToolchainUnavailable

__all__ = ["CompileOutcome", "ToolchainUnavailable", "compile_plan", "compile_link", "target_kind",
           "check_grid", "toolchain", "PASS", "FAIL", "trim_message"]


def target_kind(target: str) -> str:
    """"cuda" or "npu" for a target string; ValueError for anything else."""
    from . import cuda, npu

    if npu.is_npu_target(target):
        return "npu"
    cuda.parse_target(target)
    return "cuda"


def check_grid(target: str, grid: Any) -> str | None:
    """Why ``grid`` cannot be launched on ``target`` (too many programs), or None."""
    from . import cuda, npu

    return npu.check_grid(grid) if target_kind(target) == "npu" else cuda.check_grid(grid)


def compile_link(link: Any, target: str, **options) -> CompileOutcome:
    """Compile one launch (an object with ``kernel``, ``grid``, ``args``, ``meta``)."""
    if target_kind(target) == "npu":
        from . import npu
        return npu.compile_link(link, target, **options)
    from . import cuda
    return cuda.compile_link(link, target, **options)


def compile_plan(plan: Any, target: str, **options) -> list[CompileOutcome]:
    """One CompileOutcome per link of ``plan.chain()``, in launch order. Compile failures are
    outcomes, not exceptions; a missing toolchain raises ToolchainUnavailable."""
    links = list(plan.chain()) if hasattr(plan, "chain") else [plan]
    return [compile_link(link, target, **options) for link in links]
