"""Probe fp8_load (porting_notes.md#fp8_load): load a ``torch.float8_e4m3fn`` tensor and widen it
to fp32 (what a kernel over an fp8 KV cache does first).

original: the tensor is passed as is (a ``tl.float8e4nv`` pointer) and the loaded tile is cast
    with ``.to(tl.float32)``. The Triton interpreter (3.9) decodes the two NaN encodings 0x7f and
    0xff as +-480 (it treats e4m3fn's top exponent as an ordinary one); every other pattern,
    subnormals and +-448 included, comes out right. Ascend 910B has no fp8 type (see the ledger
    for what triton-ascend does with the load).
rewrite: the wrapper passes the bytes (``x.view(torch.uint8)``) and ``kernels._fp8.e4m3_to_f16``
    decodes them with integer arithmetic and an int16 -> fp16 bitcast: exact everywhere, no fp8
    type needed.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch
from kernels._fp8 import e4m3_to_f16


@triton.jit
def _widen_fp8(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, tl.load(X + offs).to(tl.float32))


@triton.jit
def _decode_bytes(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, e4m3_to_f16(tl.load(X + offs)).to(tl.float32))


def _widen(kernel, x: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    (N,) = x.shape
    if x.dtype != torch.float8_e4m3fn:
        raise TypeError(f"fp8_load: x must be float8_e4m3fn, got {x.dtype}")
    if N & (N - 1):
        raise ValueError(f"fp8_load: N must be a power of two, got {N}")
    if out is None:
        out = torch.empty(N, dtype=torch.float32, device=x.device)
    src = x.contiguous() if kernel is _widen_fp8 else x.contiguous().view(torch.uint8)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(src, out), meta=dict(N=N)))
    return out


def original(x, out=None):
    """fp32(x) through a float8e4nv load and ``.to(tl.float32)``."""
    return _widen(_widen_fp8, x, out)


def rewrite(x, out=None):
    """fp32(x) decoded from x's bytes."""
    return _widen(_decode_bytes, x, out)
