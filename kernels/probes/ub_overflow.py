"""Probe ub_overflow (porting_notes.md#ub_overflow): one program holding a tile too big for an
Ascend core's unified buffer (UB: 192 KB per core on A2, about half of it usable while the
compiler double-buffers).

The computation is elementwise, ``y = exp(x) * 2 + x`` over an [M, N] 16-bit tensor, computed
in fp32 (one rounding at the store, so the fast ``exp`` of GPUs stays far inside the fp16
tolerance).

original: one [M, N] tile (the probe's case: [256, 512], 512 KB per fp32 tile). bishengir
    reports "ub overflow, requires ... bits while 1572864 bits available!" on every
    triton-ascend version measured. GPUs keep such a tile in registers/spills and compile it.
rewrite: the same program loops over [BM, N] row tiles (BM = 16: 32 KB per fp32 tile).
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch

#: Rows per tile in the rewrite: a [16, 512] fp32 tile is 32 KB.
ROWS_PER_TILE = 16


@triton.jit
def _exp_affine_one_tile(X, O, M: tl.constexpr, N: tl.constexpr):
    offs = tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]
    x = tl.load(X + offs).to(tl.float32)
    tl.store(O + offs, (tl.exp(x) * 2.0 + x).to(O.dtype.element_ty))


@triton.jit
def _exp_affine_row_tiles(X, O, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr):
    for m0 in range(0, M, BM):
        offs = (m0 + tl.arange(0, BM))[:, None] * N + tl.arange(0, N)[None, :]
        x = tl.load(X + offs).to(tl.float32)
        tl.store(O + offs, (tl.exp(x) * 2.0 + x).to(O.dtype.element_ty))


def _check(x: torch.Tensor, bm: int) -> tuple[int, int]:
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"ub_overflow: x must be a 2-d float tensor, got {x.dtype} {list(x.shape)}")
    M, N = x.shape
    for name, size in (("M", M), ("N", N)):
        if size & (size - 1):
            raise ValueError(f"ub_overflow: {name} must be a power of two, got {size}")
    if M % bm:
        raise ValueError(f"ub_overflow: M must be a multiple of {bm}, got {M}")
    return M, N


def original(x, out=None):
    """``exp(x) * 2 + x`` with the whole [M, N] tensor as one tile."""
    M, N = _check(x, 1)
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    launch(LaunchPlan(kernel=_exp_affine_one_tile, grid=(1,), args=(x, out), meta=dict(M=M, N=N)))
    return out


def rewrite(x, out=None):
    """``exp(x) * 2 + x`` in [ROWS_PER_TILE, N] tiles, one after another in the same program."""
    bm = min(ROWS_PER_TILE, x.shape[0]) if x.dim() == 2 else ROWS_PER_TILE
    M, N = _check(x, bm)
    x = x.contiguous()
    out = torch.empty_like(x) if out is None else out
    launch(LaunchPlan(kernel=_exp_affine_row_tiles, grid=(1,), args=(x, out), meta=dict(M=M, N=N, BM=bm)))
    return out
