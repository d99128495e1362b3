"""Probe gathered_index_select (porting_notes.md#gathered_index_select): gather the rows of a
list of slot ids loaded from memory, where -1 means "no slot" and gives a zero row (the id
lists of DeepSeek sparse attention).

original: the ids are clamped before they become an address, ``row = tl.where(ok, ids, 0)``
    (``ok = ids >= 0``), so even the masked-off lanes point into the tensor. triton-ascend
    3.2.0rc2's adapter warns "could not cast operand of type 'f16' to '!tt.ptr<f16>'", prints
    the ``"arith.select"(...) {MixUse}`` op and dies with SIGSEGV; ``tl.maximum(ids, 0)`` and
    ``ids + (ids < 0)`` die the same way.
rewrite: the ids go into the address unchanged (cast and multiplied only); the row mask ``ok``
    keeps the negative offset of a -1 from being read.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _gather_clamped(K, IDS, ROWS, stride_k, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    ids = tl.load(IDS + offs_n)
    ok = ids >= 0
    row = tl.where(ok, ids, 0).to(tl.int64)
    k = tl.load(K + row[:, None] * stride_k + offs_d[None, :], mask=ok[:, None], other=0.0)
    tl.store(ROWS + offs_n[:, None] * D + offs_d[None, :], k)


@triton.jit
def _gather_masked(K, IDS, ROWS, stride_k, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    ids = tl.load(IDS + offs_n)
    ok = ids >= 0
    row = ids.to(tl.int64)
    k = tl.load(K + row[:, None] * stride_k + offs_d[None, :], mask=ok[:, None], other=0.0)
    tl.store(ROWS + offs_n[:, None] * D + offs_d[None, :], k)


def gather(kernel, k: torch.Tensor, ids: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """Rows ``k[ids]`` [N, D], zero where an id is -1; N and D powers of two, ids int32."""
    (_, D), (N,) = k.shape, ids.shape
    if ids.dtype != torch.int32:
        raise TypeError(f"gathered_index_select: ids must be int32, got {ids.dtype}")
    for name, size in (("N", N), ("D", D)):
        if size & (size - 1):
            raise ValueError(f"gathered_index_select: {name} must be a power of two, got {size}")
    k, ids = k.contiguous(), ids.contiguous()
    if out is None:
        out = torch.empty((N, D), dtype=k.dtype, device=k.device)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(k, ids, out, k.stride(0)), meta=dict(N=N, D=D)))
    return out


def original(k, ids, out=None):
    """``k[ids]`` with -1 rows zero, the ids clamped with ``tl.where`` before the address."""
    return gather(_gather_clamped, k, ids, out)


def rewrite(k, ids, out=None):
    """``k[ids]`` with -1 rows zero, the ids used unchanged under the row mask."""
    return gather(_gather_masked, k, ids, out)


def listed_rows(k: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Reference: ``k[ids]`` with the rows of -1 ids zero."""
    return k[ids.clamp(min=0).long()] * (ids >= 0).to(k.dtype)[:, None]
