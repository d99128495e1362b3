"""Probe gather_transposed (porting_notes.md#gather_transposed): gather the K rows of selected
tokens (indices loaded from memory) directly as a transposed [D, N] tile, the shape
``tl.dot(q, kt)`` wants, written the way the origin's sparse-token kernel wrote it.

original: the loaded token indices reshaped to a row, ``tl.reshape(tok, (1, N))``, on the INNER
    axis of the pointer grid: ``tl.load(K + tl.reshape(tok, (1, N)) * stride + offs_d[:, None])``.
    triton-ascend 3.2.0rc2's adapter warns "could not cast operand of type 'f16' to
    '!tt.ptr<f16>'", prints the ``"tt.reshape"(...) {MixUse}`` op and dies with SIGSEGV (the
    origin's recorded failure); later versions compile it into one scalar load per element.
rewrite: gather whole rows [N, D] (``tok[:, None] * stride + offs_d[None, :]``), then
    ``tl.trans``.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _gather_kt_reshaped(K, IDX, KT, stride_kt, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    tok = tl.load(IDX + offs_n)
    kt = tl.load(K + tl.reshape(tok, (1, N)) * stride_kt + offs_d[:, None])  # [D, N]
    tl.store(KT + offs_d[:, None] * N + offs_n[None, :], kt)


@triton.jit
def _gather_rows_then_trans(K, IDX, KT, stride_kt, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    tok = tl.load(IDX + offs_n)
    k = tl.load(K + tok[:, None] * stride_kt + offs_d[None, :])  # [N, D]: one row per token
    tl.store(KT + offs_d[:, None] * N + offs_n[None, :], tl.trans(k))


def gather(kernel, k: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None,
           probe: str = "gather_transposed") -> torch.Tensor:
    """``k[idx].T`` [D, N] with ``kernel``; N and D powers of two, idx int32."""
    (_, D), (N,) = k.shape, idx.shape
    if idx.dtype != torch.int32:
        raise TypeError(f"{probe}: idx must be int32, got {idx.dtype}")
    for name, size in (("N", N), ("D", D)):
        if size & (size - 1):
            raise ValueError(f"{probe}: {name} must be a power of two, got {size}")
    k, idx = k.contiguous(), idx.contiguous()
    if out is None:
        out = torch.empty((D, N), dtype=k.dtype, device=k.device)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(k, idx, out, k.stride(0)), meta=dict(N=N, D=D)))
    return out


def original(k, idx, out=None):
    """``k[idx].T`` [D, N], gathered through ``tl.reshape(tok, (1, N))`` on the inner axis."""
    return gather(_gather_kt_reshaped, k, idx, out)


def rewrite(k, idx, out=None):
    """``k[idx].T`` [D, N], gathered as rows [N, D] and transposed in registers."""
    return gather(_gather_rows_then_trans, k, idx, out)
