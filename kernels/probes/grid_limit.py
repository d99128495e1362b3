"""Probe grid_limit (porting_notes.md#grid_limit): a launch of more than 65535 programs.

The computation scales the first ``n_rows`` rows of ``x`` [n_rows, W] by 2. The launch is sized
for ``max_rows`` rows, the way a launch planned for the largest batch it may see (or captured
once in a graph) is, so programs past ``n_rows`` return at once; that keeps the probe cheap in
the interpreter, which runs every program one after another.

original: one program per row of the capacity, ``grid = (max_rows,)`` (the probe's case: 70000).
    Ascend launches at most 65535 programs (coreDim is a uint16): the compile-only tier's grid
    check refuses it; CUDA's grid x dimension allows 2**31 - 1.
rewrite: a persistent grid of ``min(max_rows, PROGRAMS)`` programs, each looping over rows
    ``pid, pid + num_programs, ...`` below ``n_rows``.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch

#: Programs of the persistent rewrite: about one per core (a 910B2 has 24 AI cores with 48
#: vector cores; an H100 132 SMs). Any value up to 65535 is legal on Ascend.
PROGRAMS = 48


@triton.jit
def _scale_rows_one_program_each(X, O, n_rows, W: tl.constexpr):
    row = tl.program_id(0)
    if row < n_rows:
        offs = row * W + tl.arange(0, W)
        tl.store(O + offs, tl.load(X + offs) * 2)


@triton.jit
def _scale_rows_persistent(X, O, n_rows, W: tl.constexpr):
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        offs = row * W + tl.arange(0, W)
        tl.store(O + offs, tl.load(X + offs) * 2)


def _check(x: torch.Tensor, max_rows: int) -> tuple[int, int]:
    if x.dim() != 2:
        raise ValueError(f"grid_limit: x must be 2-d [n_rows, W], got shape {list(x.shape)}")
    n_rows, W = x.shape
    if W & (W - 1):
        raise ValueError(f"grid_limit: W must be a power of two, got {W}")
    if not 1 <= n_rows <= max_rows:
        raise ValueError(f"grid_limit: n_rows must be in [1, max_rows={max_rows}], got {n_rows}")
    return n_rows, W


def original(x, max_rows, out=None):
    """``2 * x`` with one program per row of a launch sized for ``max_rows`` rows."""
    n_rows, W = _check(x, max_rows)
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    launch(LaunchPlan(kernel=_scale_rows_one_program_each, grid=(max_rows,), args=(x, out, n_rows),
                      meta=dict(W=W)))
    return out


def rewrite(x, max_rows, out=None):
    """``2 * x`` with at most ``PROGRAMS`` programs looping over the rows."""
    n_rows, W = _check(x, max_rows)
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    launch(LaunchPlan(kernel=_scale_rows_persistent, grid=(min(max_rows, PROGRAMS),),
                      args=(x, out, n_rows), meta=dict(W=W)))
    return out
