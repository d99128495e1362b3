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
from ._checks import (cdiv, DOT_INPUT_PRECISION, FLOAT_DTYPES, check_flag, check_gqa, check_launchable,
                      check_nonempty, check_out_lse, check_out_lse_aliases, check_rows_fit_int32,
                      check_scale, check_tensor, is_interpret, is_live, launch, LaunchPlan, next_pow2,
                      on_ascend, use_fast_path)
from ._tune import pick
from . import attn_fast
from ._prefill_tiles import prefill_candidates, prefill_config
from ._callcache import CallCache
from ._grid import persistent, plan_grid

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256


@triton.jit
def _prefill_tile(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    Hq, S, D, G, qk_scale, tile_m, pid_bh,
    CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One query block: tile_m counts query blocks in launch order, pid_bh is batch * Hq + head."""
    if CAUSAL:
        # Heaviest query blocks (most keys) first, so the short ones fill the tail of the wave.
        # (A tl.cdiv(S, BLOCK_M) here stopped triton-ascend 3.2's frontend with "'NotImplementedType'
        # object has no attribute 'type'" in the compile-only tier; not reduced to a probe yet.)
        pid_m = tile_m * -1 + ((S + BLOCK_M - 1) // BLOCK_M - 1)
    else:
        pid_m = tile_m
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

    # Keys [0, lo) are visible to every row of the block: no mask there. Keys [lo, hi) get the
    # per-row mask (the diagonal tiles, or the partial last tile). Every row (padding rows
    # included) sees key 0, which is in the first tile either loop visits, so the running max is
    # finite after one step and no row ever turns into NaN.
    if CAUSAL:
        kv_end = tl.minimum(offs_m + 1, S)
        lo = (pid_m * BLOCK_M) // BLOCK_N * BLOCK_N
        hi = tl.minimum((pid_m + 1) * BLOCK_M, S)
    else:
        kv_end = tl.zeros([BLOCK_M], dtype=tl.int32) + S
        lo = S // BLOCK_N * BLOCK_N
        hi = S

    # Scores are kept in base 2 (qk_scale has log2(e) folded in) so the loop uses exp2.
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(0, lo, BLOCK_N):
        cols = start + offs_n
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :], mask=d_ok, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :], mask=d_ok, other=0.0)
        m_i, l_i, acc = online_softmax_step(q, k, v, d_ok, m_i, l_i, acc, qk_scale, DOT_PRECISION,
                                            MASKED=False)
    for start in range(lo, hi, BLOCK_N):
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


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hq", "S", "G", "stride_lb", "stride_lh", "n_bh", "n_work",
                               "n_programs"])
def _prefill_fwd(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    Hq, S, D, G, qk_scale, n_bh, n_work, n_programs,
    CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PERSISTENT: tl.constexpr,
):
    if PERSISTENT:  # kernels/_grid.py: heads are the fast index, so heavy causal blocks go first
        for work in range(tl.program_id(0), n_work, n_programs):
            _prefill_tile(Q, K, V, O, LSE, stride_qb, stride_qh, stride_qs, stride_kb, stride_kh,
                          stride_ks, stride_vb, stride_vh, stride_vs, stride_ob, stride_oh,
                          stride_os, stride_lb, stride_lh, Hq, S, D, G, qk_scale,
                          work // n_bh, work % n_bh, CAUSAL, RETURN_LSE, DOT_PRECISION,
                          BLOCK_M, BLOCK_N, BLOCK_D)
    else:
        _prefill_tile(Q, K, V, O, LSE, stride_qb, stride_qh, stride_qs, stride_kb, stride_kh,
                      stride_ks, stride_vb, stride_vh, stride_vs, stride_ob, stride_oh,
                      stride_os, stride_lb, stride_lh, Hq, S, D, G, qk_scale,
                      tl.program_id(0), tl.program_id(1), CAUSAL, RETURN_LSE, DOT_PRECISION,
                      BLOCK_M, BLOCK_N, BLOCK_D)


def prefill_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                 lse: Optional[torch.Tensor], *, causal: bool, scale: float,
                 interpret: Optional[bool] = None, config: Optional[dict] = None) -> LaunchPlan:
    """The launch for already-validated inputs and allocated outputs (``lse`` None: no LSE).
    ``config`` fixes the tiles; by default they are the tuned ones on a GPU (``kernels._tune``)."""
    B, Hq, S, D = q.shape
    interpret = is_interpret() if interpret is None else interpret
    if use_fast_path(q) and not persistent(q):
        return _fast_plan(q, k, v, out, lse, causal=causal, scale=scale, interpret=interpret,
                          config=config)
    # The portable kernel's row offsets along S are int32 (the fast path's are int64).
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        check_rows_fit_int32("prefill", name, t, 2)
    tuning = "default"
    if config is not None:
        cfg = dict(config)
    elif interpret or q.device.type != "cuda":
        cfg = prefill_config(S, D, q.dtype, interpret, on_ascend(q))
    else:  # the default is prefill_candidates(...)[0]
        cfg, tuning = pick("prefill", (int(causal), next_pow2(S), D, str(q.dtype)),
                           lambda: prefill_candidates(D, q.dtype),
                           lambda c: prefill_plan(q, k, v, out, lse, causal=causal, scale=scale,
                                                  interpret=False, config=c),
                           q.device, live=is_live(q))
    return_lse = lse is not None
    args = _kernel_args(q, k, v, out, lse, scale)
    g = plan_grid((cdiv(S, cfg["BLOCK_M"]), B * Hq), q, vector=False)
    meta = dict(CAUSAL=bool(causal), RETURN_LSE=return_lse, DOT_PRECISION=DOT_INPUT_PRECISION,
                PERSISTENT=g.persistent, **cfg)
    return LaunchPlan(kernel=_prefill_fwd, grid=g.grid, args=args + (B * Hq, g.n_work, g.n_programs),
                      meta=meta, tuning=tuning)


def _kernel_args(q, k, v, out, lse, scale) -> tuple:
    """The arguments both prefill kernels (portable and fast) take, in their order."""
    B, Hq, S, D = q.shape
    lse_strides = (lse.stride(0), lse.stride(1)) if lse is not None else (0, 0)
    return (q, k, v, out, out if lse is None else lse,  # never touched when RETURN_LSE is False
            q.stride(0), q.stride(1), q.stride(2),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            out.stride(0), out.stride(1), out.stride(2),
            *lse_strides,
            Hq, S, D, Hq // k.shape[1], float(scale) * LOG2E)


def _fast_plan(q, k, v, out, lse, *, causal: bool, scale: float, interpret: bool,
               config: Optional[dict]) -> LaunchPlan:
    """The CUDA fast path (``kernels/attn_fast.py``): descriptor loads, the scale in the exponent."""
    B, Hq, S, D = q.shape
    tuning = "default"
    if config is not None:
        cfg = dict(config)
    else:
        cfg, tuning = pick("prefill_fast", (int(causal), next_pow2(S), D, str(q.dtype)),
                           lambda: attn_fast.fast_candidates(S, D, q.dtype),
                           lambda c: _fast_plan(q, k, v, out, lse, causal=causal, scale=scale,
                                                interpret=False, config=c),
                           q.device, live=is_live(q) and not interpret)
    cfg = attn_fast.finish_config(cfg, S, D, (q, k, v), interpret)
    if cfg["USE_TMA"] and q.device.type == "cuda":
        attn_fast.ensure_allocator()
    return_lse = lse is not None
    args = _kernel_args(q, k, v, out, lse, scale)
    meta = dict(CAUSAL=bool(causal), RETURN_LSE=return_lse, DOT_PRECISION=DOT_INPUT_PRECISION,
                NEG_SCALE=float(scale) < 0, **cfg)
    return LaunchPlan(kernel=attn_fast._prefill_fast, grid=(cdiv(S, cfg["BLOCK_M"]), B * Hq),
                      args=args, meta=meta, tuning=tuning)


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
    key = _CALLS.key((q, k, v), (out, lse), (causal, scale, return_lse))
    slot = _CALLS.lookup(key)
    if slot is None:
        _validate(q, k, v, causal, scale, return_lse, out, lse)
        slot = _CALLS.validated(key)
    elif out is not None or lse is not None:
        check_out_lse_aliases("prefill", out, lse, {"q": q, "k": k, "v": v})
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if return_lse and lse is None:
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    if not return_lse:
        lse = None
    tensors = (q, k, v, out, lse)
    bound = None if slot is None else slot.get(())
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = prefill_plan(q, k, v, out, lse, causal=causal, scale=check_scale("prefill", scale, q.shape[-1]))
    _CALLS.run(slot, (), plan, tensors, is_live(q), launch)
    return out, lse


_CALLS = CallCache("prefill")
