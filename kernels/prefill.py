"""Dense prefill attention: FlashAttention-2 style forward pass in Triton.

``prefill`` validates, asks ``prefill_plan`` for one fully specified launch, then launches it.
``prefill_plan`` is public so a compile-only tier can build exactly the specialization that a
call would launch.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._softmax import online_softmax_step
from ._checks import (DOT_INPUT_PRECISION, FLOAT_DTYPES, check_flag, check_gqa, check_launchable,
                      check_nonempty, check_out_lse, check_scale, check_tensor, is_interpret,
                      launch, LaunchPlan, next_pow2)

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256


@triton.jit
def _prefill_fwd(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    Hq, S, D, G, qk_scale,
    CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    # int64 bases: B*H*S*D can exceed 2**31 elements.
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < D
    io_mask = (offs_m[:, None] < S) & d_ok

    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=io_mask, other=0.0)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh

    # Per-row end of the visible keys. Every row (padding rows included) sees key 0, which is in
    # the first tile, so the running max is finite after one step and no row ever turns into NaN.
    if CAUSAL:
        kv_end = tl.minimum(offs_m + 1, S)
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        kv_end = tl.zeros([BLOCK_M], dtype=tl.int32) + S
        hi = S

    # Scores are kept in base 2 (qk_scale has log2(e) folded in) so the loop uses exp2.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(0, hi, BLOCK_N):
        cols = start + offs_n
        kv_mask = (cols[:, None] < S) & d_ok
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
        m_i, l_i, acc = online_softmax_step(q, k, v, cols[None, :] < kv_end[:, None], m_i, l_i, acc,
                                            qk_scale, DOT_PRECISION)

    o = acc / l_i[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=io_mask)
    if RETURN_LSE:
        # Back to natural log: lse = ln2 * (m + log2 l).
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
        tl.store(LSE + b * stride_lb + h * stride_lh + offs_m, lse, mask=offs_m < S)



def prefill_config(S: int, D: int, dtype: torch.dtype, interpret: bool) -> dict:
    """Tile sizes and launch meta for one call: BLOCK_M, BLOCK_N, BLOCK_D, num_warps, num_stages."""
    block_d = max(16, next_pow2(D))
    if interpret:
        # The interpreter's cost grows with program count, not tile size: few, large tiles.
        bm = bn = min(128, max(16, next_pow2(S)))
        warps, stages = 4, 1
    elif dtype.itemsize == 2:
        # H100, ~227 KB shared memory: q tile + num_stages * (k + v tiles) must fit.
        if block_d <= 64:
            bm, bn, warps, stages = 128, 64, 4, 3
        elif block_d == 128:
            bm, bn, warps, stages = 128, 64, 8, 3
        else:
            bm, bn, warps, stages = 64, 32, 4, 2
    else:
        # fp32 tiles are twice the bytes.
        if block_d <= 64:
            bm, bn, warps, stages = 64, 64, 4, 3
        elif block_d == 128:
            bm, bn, warps, stages = 64, 32, 4, 2
        else:
            bm, bn, warps, stages = 32, 32, 4, 2
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d, num_warps=warps, num_stages=stages)


def prefill_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: Optional[torch.Tensor], *, causal: bool, scale: float,
                 interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch for already-validated inputs and allocated outputs (``lse`` None: no LSE)."""
    B, Hq, S, D = q.shape
    Hkv = k.shape[1]
    interpret = is_interpret() if interpret is None else interpret
    cfg = prefill_config(S, D, q.dtype, interpret)
    return_lse = lse is not None
    lse_arg = lse if return_lse else out  # never touched when RETURN_LSE is False
    lse_strides = (lse.stride(0), lse.stride(1)) if return_lse else (0, 0)
    args = (q, k, v, out, lse_arg,
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            *lse_strides,
            Hq, S, D, Hq // Hkv, float(scale) * LOG2E)
    meta = dict(CAUSAL=bool(causal), RETURN_LSE=return_lse, DOT_PRECISION=DOT_INPUT_PRECISION,
                **cfg)
    grid = (triton.cdiv(S, cfg["BLOCK_M"]), B * Hq)
    return LaunchPlan(kernel=_prefill_fwd, grid=grid, args=args, meta=meta)


def _validate(q, k, v, causal, scale, return_lse, out, lse) -> float:
    fn = "prefill"
    check_tensor(fn, "q", q, rank=4, dims="[B, Hq, S, D]", dtypes=FLOAT_DTYPES)
    check_nonempty(fn, "q", q, "[B, Hq, S, D]")
    B, Hq, S, D = q.shape
    if D > MAX_HEAD_DIM:
        raise ValueError(f"{fn}: q head dim D must be <= {MAX_HEAD_DIM}, got {D}")
    check_tensor(fn, "k", k, rank=4, dims="[B, Hkv, S, D]", dtypes=(q.dtype,), device=q.device, like="q")
    check_nonempty(fn, "k", k, "[B, Hkv, S, D]")
    Hkv = k.shape[1]
    kv_shape = (B, Hkv, S, D)
    check_tensor(fn, "k", k, shape=kv_shape, dims="[B, Hkv, S, D]")
    check_tensor(fn, "v", v, rank=4, dims="[B, Hkv, S, D]", dtypes=(q.dtype,), device=q.device,
                 like="q", shape=kv_shape)
    check_gqa(fn, Hq, Hkv)
    check_flag(fn, "causal", causal)
    check_flag(fn, "return_lse", return_lse)
    scale = check_scale(fn, scale, D)
    inputs = {"q": q, "k": k, "v": v}
    check_out_lse(fn, out, lse, return_lse, o_shape=(B, Hq, S, D), o_dims="[B, Hq, S, D]",
                  lse_shape=(B, Hq, S), lse_dims="[B, Hq, S]", like=q, inputs=inputs)
    check_launchable(fn, "q", q)
    return scale


def prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
            scale: Optional[float] = None, return_lse: bool = False,
            out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
            ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Attention over q [B, Hq, S, D], k/v [B, Hkv, S, D] -> (o [B, Hq, S, D], lse [B, Hq, S] | None).

    fp16/bf16/fp32; query head h reads KV head h // (Hq // Hkv); causal masks key j > query i;
    scale defaults to 1/sqrt(D); lse is fp32 natural log. Tensors must be contiguous in their
    last dimension; other strides are honoured. ``out``/``lse`` are written in place if given.
    """
    scale = _validate(q, k, v, causal, scale, return_lse, out, lse)
    B, Hq, S, D = q.shape
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if return_lse and lse is None:
        lse = torch.empty((B, Hq, S), dtype=torch.float32, device=q.device)
    plan = prefill_plan(q, k, v, out, lse if return_lse else None, causal=causal, scale=scale)
    launch(plan)
    return out, (lse if return_lse else None)
