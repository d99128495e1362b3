"""Probe: ``tl.dot`` of two bf16 tiles under the Triton interpreter (TRITON_INTERPRET=1).

The interpreter multiplies the raw 16-bit patterns of bf16 operands (triton-lang/triton#11584),
so the product comes out around 1e10. Compiled backends are fine. The rewrite casts both
operands to fp32 first; the suite's kernels keep bf16 operands (the fast path on GPUs) and the
interpreter's bf16 cases are recorded as a known failure instead.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _dot_kernel(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                UPCAST: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    if UPCAST:
        a, b = a.to(tl.float32), b.to(tl.float32)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


def _launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None, upcast: bool) -> torch.Tensor:
    (M, K), (K2, N) = a.shape, b.shape
    if K2 != K:
        raise ValueError(f"b must have shape [{K}, N], got {list(b.shape)}")
    if out is None:
        out = torch.empty((M, N), dtype=torch.float32, device=a.device)
    launch(LaunchPlan(kernel=_dot_kernel, grid=(1,), args=(a.contiguous(), b.contiguous(), out),
                      meta=dict(M=M, N=N, K=K, UPCAST=upcast)))
    return out


def dot_original(a, b, out=None):
    """``tl.dot(a, b)`` on the operands as loaded (bf16 stays bf16)."""
    return _launch(a, b, out, upcast=False)


def dot_rewrite(a, b, out=None):
    """The portable rewrite: cast the operands to fp32 before ``tl.dot``."""
    return _launch(a, b, out, upcast=True)


#: The names every probe module exposes (cases/probes.py).
original, rewrite = dot_original, dot_rewrite
