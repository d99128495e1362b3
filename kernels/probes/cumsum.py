"""Probe cumsum (porting_notes.md#cumsum): an exclusive prefix count along the 64 bits of a
bitmap, as the Mustafar kernels need it to find a kept element's place in the packed buffer.

The kernel reads ``bits [N, 64]`` (0/1, int32) and writes ``rank[i, j] = sum_{j' < j} bits[i, j']``
(int32), the number of kept elements before element j.

original: ``tl.cumsum(bits, axis=1) - bits``. triton-ascend 3.2.0rc2's bishengir stage rejects
    it ("operation being parsed with an unregistered dialect").
rewrite: ``bits @ U`` with U the strictly upper-triangular ones matrix, as one ``tl.dot`` on
    fp16 operands accumulated in fp32: exact, since the operands are 0/1 and the sums are <= 63.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import DOT_INPUT_PRECISION, LaunchPlan, launch


@triton.jit
def _rank_cumsum(BITS, RANK, N: tl.constexpr, W: tl.constexpr, DOT_PRECISION: tl.constexpr):
    offs = tl.arange(0, N)[:, None] * W + tl.arange(0, W)[None, :]
    bits = tl.load(BITS + offs)
    tl.store(RANK + offs, tl.cumsum(bits, axis=1) - bits)


@triton.jit
def _rank_dot(BITS, RANK, N: tl.constexpr, W: tl.constexpr, DOT_PRECISION: tl.constexpr):
    offs_w = tl.arange(0, W)
    offs = tl.arange(0, N)[:, None] * W + offs_w[None, :]
    bits = tl.load(BITS + offs)
    before = (offs_w[:, None] < offs_w[None, :]).to(tl.float16)
    rank = tl.dot(bits.to(tl.float16), before, input_precision=DOT_PRECISION)
    tl.store(RANK + offs, rank.to(tl.int32))


def _rank(kernel, bits: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    if bits.dim() != 2 or bits.dtype != torch.int32:
        raise ValueError(f"cumsum: bits must be a 2-d int32 tensor, got {bits.dtype} {list(bits.shape)}")
    N, W = bits.shape
    if any(n < 16 or n & (n - 1) for n in (N, W)):
        raise ValueError(f"cumsum: both sizes must be powers of two >= 16, got {N, W}")
    bits = bits.contiguous()
    out = torch.empty_like(bits) if out is None else out
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(bits, out),
                      meta=dict(N=N, W=W, DOT_PRECISION=DOT_INPUT_PRECISION)))
    return out


def original(bits, out=None):
    """int32 [N, W]: the exclusive prefix count of ``bits`` along each row, by ``tl.cumsum``."""
    return _rank(_rank_cumsum, bits, out)


def rewrite(bits, out=None):
    """The same counts as one ``tl.dot`` with a strictly upper-triangular ones matrix."""
    return _rank(_rank_dot, bits, out)
