"""Probe: an fp32 -> bf16 cast under the Triton interpreter (TRITON_INTERPRET=1).

The interpreter drops the low 16 bits of the fp32 value (round toward zero) where compiled
backends and torch round to nearest even: 2.3592732 becomes 2.34375, not 2.359375. One bf16 step
(2^-7 relative) is usually inside the tolerance, but not where the bf16 reference is itself
exact and the values are large (found by the fuzz profile). The rewrite rounds to nearest even
in fp32 bits first, so the cast that follows only drops zeros; compiled backends need no rewrite.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _cast_kernel(x_ptr, y_ptr, N: tl.constexpr, ROUND: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    if ROUND:
        bits = x.to(tl.int32, bitcast=True)
        # Round to nearest even on bit 16, then clear the bits the cast drops (finite values).
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        x = bits.to(tl.float32, bitcast=True)
    tl.store(y_ptr + offs, x.to(tl.bfloat16))


def _launch(x: torch.Tensor, out: torch.Tensor | None, round_first: bool) -> torch.Tensor:
    if out is None:
        out = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
    launch(LaunchPlan(kernel=_cast_kernel, grid=(1,), args=(x.contiguous(), out),
                      meta=dict(N=x.numel(), ROUND=round_first)))
    return out


def cast_original(x, out=None):
    """``x.to(tl.bfloat16)`` as written."""
    return _launch(x, out, round_first=False)


def cast_rewrite(x, out=None):
    """Round to nearest even in fp32 bits, then cast."""
    return _launch(x, out, round_first=True)


original, rewrite = cast_original, cast_rewrite
