"""Probe block_ptr_order (porting_notes.md#block_ptr_order): attention scores ``S = Q K^T`` where
the kernel reads ``K^T`` through a column-major block pointer.

original: ``tl.make_block_ptr`` over ``K`` [N, D] (row-major) viewed as a [D, N] block with
    strides ``(1, stride_kn)`` and ``order=(0, 1)``. triton-ascend 3.2.0rc2's adapter stops with
    "Currently only support default order on block pointers"; upstream Triton 3.9 has no block
    pointers at all ("Block pointers have been removed in favor of the tensor descriptor API"),
    in its interpreter as in its compiler.
rewrite: load ``K`` row-major as [N, D] with ordinary pointers and let ``tl.dot`` take
    ``tl.trans(k)``, as the suite's prefill and decode kernels do.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import DOT_INPUT_PRECISION, LaunchPlan, launch


@triton.jit
def _scores_kt_block_ptr(Q, K, S, n_keys, stride_qm, stride_kn, stride_sm, M: tl.constexpr,
                         N: tl.constexpr, D: tl.constexpr, DOT_PRECISION: tl.constexpr):
    offs_m = tl.arange(0, M)
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :])
    # K^T as a [D, N] block over K stored [n_keys, D] row-major: element (d, n) at d + n * stride_kn.
    kt_ptr = tl.make_block_ptr(K, shape=(D, n_keys), strides=(1, stride_kn), offsets=(0, 0),
                               block_shape=(D, N), order=(0, 1))
    kt = tl.load(kt_ptr)
    s = tl.dot(q, kt, input_precision=DOT_PRECISION)
    tl.store(S + offs_m[:, None] * stride_sm + offs_n[None, :], s)


@triton.jit
def _scores_k_rows(Q, K, S, n_keys, stride_qm, stride_kn, stride_sm, M: tl.constexpr,
                   N: tl.constexpr, D: tl.constexpr, DOT_PRECISION: tl.constexpr):
    offs_m = tl.arange(0, M)
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * stride_qm + offs_d[None, :])
    k = tl.load(K + offs_n[:, None] * stride_kn + offs_d[None, :])  # [N, D], as stored
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    tl.store(S + offs_m[:, None] * stride_sm + offs_n[None, :], s)


def _scores(kernel, q: torch.Tensor, k: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    (M, D), (N, D2) = q.shape, k.shape
    if D2 != D:
        raise ValueError(f"block_ptr_order: k must have shape [N, {D}], got {list(k.shape)}")
    for name, size in (("M", M), ("N", N), ("D", D)):
        if size < 16 or size & (size - 1):
            raise ValueError(f"block_ptr_order: {name} must be a power of two >= 16 (tl.dot), got {size}")
    q, k = q.contiguous(), k.contiguous()
    if out is None:
        out = torch.empty((M, N), dtype=torch.float32, device=q.device)
    launch(LaunchPlan(kernel=kernel, grid=(1,),
                      args=(q, k, out, N, q.stride(0), k.stride(0), out.stride(0)),
                      meta=dict(M=M, N=N, D=D, DOT_PRECISION=DOT_INPUT_PRECISION)))
    return out


def original(q, k, out=None):
    """``q @ k.T`` (fp32) with K^T read through ``make_block_ptr(..., order=(0, 1))``."""
    return _scores(_scores_kt_block_ptr, q, k, out)


def rewrite(q, k, out=None):
    """``q @ k.T`` (fp32) with K loaded row-major and transposed by ``tl.trans``."""
    return _scores(_scores_k_rows, q, k, out)
