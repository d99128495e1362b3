"""Probe early_return (porting_notes.md#early_return): a program that returns early inside an
``if`` when it has no work, ``if pid * N >= n: return``, as ports of CUDA kernels often do.

original: the early ``return``. triton-ascend 3.2.0rc2's adapter fails with "'func.return' op has
    1 operands, but enclosing function ... returns 0".
rewrite: no return: the loads and stores are masked with ``offs < n``, which already makes an idle
    program do nothing.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _double_early_return(X, Y, n, N: tl.constexpr):
    pid = tl.program_id(0)
    if pid * N >= n:
        return
    offs = pid * N + tl.arange(0, N)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    tl.store(Y + offs, x * 2, mask=offs < n)


@triton.jit
def _double_masked(X, Y, n, N: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * N + tl.arange(0, N)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    tl.store(Y + offs, x * 2, mask=offs < n)


def _double(kernel, x: torch.Tensor, programs: int, out: torch.Tensor | None) -> torch.Tensor:
    if x.dim() != 1:
        raise ValueError(f"early_return: x must be 1-d, got shape {list(x.shape)}")
    x = x.contiguous()
    n = x.numel()
    block = max(16, triton.next_power_of_2(triton.cdiv(n, programs)))
    if out is None:
        out = torch.empty_like(x)
    launch(LaunchPlan(kernel=kernel, grid=(programs,), args=(x, out, n), meta=dict(N=block)))
    return out


def original(x, programs, out=None):
    """``2 * x`` over ``programs`` programs, the idle ones returning early."""
    return _double(_double_early_return, x, programs, out)


def rewrite(x, programs, out=None):
    """``2 * x`` over ``programs`` programs, masked instead of returning."""
    return _double(_double_masked, x, programs, out)
