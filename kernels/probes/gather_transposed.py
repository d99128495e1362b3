"""Probe gather_transposed (porting_notes.md#gather_transposed): gather the K rows of selected
tokens (indices loaded from memory) directly as a transposed [D, N] tile, the shape
``tl.dot(q, kt)`` wants.

original: a pointer tensor with the loaded token indices on the INNER axis,
    ``tl.load((K + tok * stride)[None, :] + offs_d[:, None])``. triton-ascend 3.2.0rc2's adapter
    fails ("failed to legalize unresolved materialization ... to 'tensor<16x!tt.ptr<f16>>'") and
    then aborts; later versions compile it into one scalar load per element.
rewrite: gather whole rows [N, D] (``tok[:, None] * stride + offs_d[None, :]``), then
    ``tl.trans``.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _gather_kt_inner(K, IDX, KT, stride_kt, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    tok = tl.load(IDX + offs_n)
    k_ptr = K + tok * stride_kt
    kt = tl.load(k_ptr[None, :] + offs_d[:, None])  # [D, N]: the gathered tokens vary fastest
    tl.store(KT + offs_d[:, None] * N + offs_n[None, :], kt)


@triton.jit
def _gather_rows_then_trans(K, IDX, KT, stride_kt, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    tok = tl.load(IDX + offs_n)
    k = tl.load(K + tok[:, None] * stride_kt + offs_d[None, :])  # [N, D]: one row per token
    tl.store(KT + offs_d[:, None] * N + offs_n[None, :], tl.trans(k))


def _gather(kernel, k: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    (_, D), (N,) = k.shape, idx.shape
    if idx.dtype != torch.int32:
        raise TypeError(f"gather_transposed: idx must be int32, got {idx.dtype}")
    for name, size in (("N", N), ("D", D)):
        if size & (size - 1):
            raise ValueError(f"gather_transposed: {name} must be a power of two, got {size}")
    k, idx = k.contiguous(), idx.contiguous()
    if out is None:
        out = torch.empty((D, N), dtype=k.dtype, device=k.device)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(k, idx, out, k.stride(0)), meta=dict(N=N, D=D)))
    return out


def original(k, idx, out=None):
    """``k[idx].T`` [D, N], gathered with the token indices on the inner axis."""
    return _gather(_gather_kt_inner, k, idx, out)


def rewrite(k, idx, out=None):
    """``k[idx].T`` [D, N], gathered as rows [N, D] and transposed in registers."""
    return _gather(_gather_rows_then_trans, k, idx, out)
