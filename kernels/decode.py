"""Dense decode attention (one query token) in Triton, with GQA packing and optional split-KV.

One program per (batch, KV head, KV split) loads the G = Hq / Hkv query heads that share the KV
head as the M dimension of ``tl.dot`` (padded to >= 16 rows, masked), so K/V are read once per
group instead of once per query head. When a split has more than one program per (batch, KV
head), each writes a partial output and its LSE to fp32 scratch and a second kernel merges them;
on CUDA (``_checks.use_fast_path``) the last split program of each group merges instead
(``_split.merge_in_last_program``), saving the second launch. Tiles and the split are tuned per
GPU on CUDA (``kernels._tune``); elsewhere ``decode_config`` gives the portable defaults. On
Ascend the (batch x KV head x split) tiles run on a persistent grid of one program per AI core
(``kernels._grid``), and the split aims at that core count instead of a GPU's SMs.

``decode`` validates, asks ``decode_plan`` for the launch (chain), then launches it.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._grid import npu_cores, npu_splits, plan_grid
from ._split import merge_in_last_program, merge_meta, merge_plan, NO_MERGE, scratch_of, split_outputs
from ._checks import (cdiv, DOT_INPUT_PRECISION, check_decode_qkv, check_flag, check_int_range,
                      check_launchable, check_out_lse, check_out_lse_aliases, check_rows_fit_int32,
                      check_scale, is_interpret, is_live, launch, LaunchPlan, next_pow2, on_ascend,
                      use_fast_path)
from ._tune import pick

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256
MIN_SPLIT_LEN = 512


@triton.jit
def _decode_tile(
    Q, K, V, O, LSE, OUT, LSE_OUT, COUNTER,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    stride_outb, stride_outh, stride_lob, stride_loh,
    Hkv, S, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale, pid_bk, split,
    RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr, FUSED_MERGE: tl.constexpr,
    RETURN_LSE_OUT: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_GM: tl.constexpr, BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr,
):
    """One KV split of one (batch, KV head): pid_bk is batch * Hkv + KV head."""
    b = (pid_bk // Hkv).to(tl.int64)
    hk = (pid_bk % Hkv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    heads = hk * G + offs_g
    d_ok = offs_d[None, :] < D
    io_mask = (offs_g[:, None] < G) & d_ok

    # Padding rows (g >= G) load zeros: finite scores, never stored.
    q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=io_mask, other=0.0)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh

    # The planner makes every split non-empty, so the first tile has a visible key in every row.
    start = split * SPLIT_LEN
    end = tl.minimum(start + SPLIT_LEN, S)
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for n in range(start, end, BLOCK_N):
        cols = n + offs_n
        kv_mask = (cols[:, None] < end) & d_ok
        k = tl.load(k_base + cols[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + cols[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # base-2 units
        s = tl.where(cols[None, :] < end, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    o = acc / l_i[:, None]
    tl.store(O + b * stride_ob + heads[:, None] * stride_oh + split * stride_osplit + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=io_mask)
    if RETURN_LSE:
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453  # natural log
        tl.store(LSE + b * stride_lb + heads * stride_lh + split * stride_lsplit, lse, mask=offs_g < G)
    if FUSED_MERGE:
        merge_in_last_program(O, LSE, OUT, LSE_OUT, COUNTER + pid_bk, b, hk * G, G, D,
                              stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh,
                              stride_lsplit, stride_outb, stride_outh, stride_lob, stride_loh,
                              NUM_SPLITS, RETURN_LSE_OUT, BLOCK_GM, BLOCK_SPLITS, SPLIT_CHUNK,
                              BLOCK_D)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=[
    "Hkv", "S", "G", "SPLIT_LEN", "NUM_SPLITS", "stride_lb", "stride_lh", "stride_lsplit",
    "stride_lob", "stride_loh", "n_bk", "n_work", "n_programs",
])
def _decode_fwd(
    Q, K, V, O, LSE, OUT, LSE_OUT, COUNTER,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    stride_outb, stride_outh, stride_lob, stride_loh,
    Hkv, S, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale, n_bk, n_work, n_programs,
    RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr, FUSED_MERGE: tl.constexpr,
    RETURN_LSE_OUT: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_GM: tl.constexpr, BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr,
    PERSISTENT: tl.constexpr,
):
    if PERSISTENT:
        # kernels/_grid.py. (batch, KV head) is the fast index, so the last split, the only one
        # that can be shorter, comes last in every program. The fused merge (CUDA only) stays
        # right when a program takes several splits in turn: it never waits on the ticket.
        for work in range(tl.program_id(0), n_work, n_programs):
            _decode_tile(Q, K, V, O, LSE, OUT, LSE_OUT, COUNTER, stride_qb, stride_qh, stride_kb,
                         stride_kh, stride_ks, stride_vb, stride_vh, stride_vs, stride_ob,
                         stride_oh, stride_osplit, stride_lb, stride_lh, stride_lsplit,
                         stride_outb, stride_outh, stride_lob, stride_loh,
                         Hkv, S, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale, work % n_bk, work // n_bk,
                         RETURN_LSE, DOT_PRECISION, FUSED_MERGE, RETURN_LSE_OUT,
                         BLOCK_G, BLOCK_N, BLOCK_D, BLOCK_GM, BLOCK_SPLITS, SPLIT_CHUNK)
    else:
        _decode_tile(Q, K, V, O, LSE, OUT, LSE_OUT, COUNTER, stride_qb, stride_qh, stride_kb,
                     stride_kh, stride_ks, stride_vb, stride_vh, stride_vs, stride_ob,
                     stride_oh, stride_osplit, stride_lb, stride_lh, stride_lsplit,
                     stride_outb, stride_outh, stride_lob, stride_loh,
                     Hkv, S, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale,
                     tl.program_id(0), tl.program_id(1),
                     RETURN_LSE, DOT_PRECISION, FUSED_MERGE, RETURN_LSE_OUT,
                     BLOCK_G, BLOCK_N, BLOCK_D, BLOCK_GM, BLOCK_SPLITS, SPLIT_CHUNK)


#: (BLOCK_N, num_warps, num_stages, target programs, floor programs) per 16-bit dtype?; the first
#: is the default. The split count is ``split_for``'s: splits of >= 512 keys, at least FLOOR and at
#: most TARGET programs in all. A batch that fills the GPU alone (B8 Hkv16: 128 programs) runs
#: unsplit; B1 Hkv8 D128 (H100, decode_variants.py, fp16, cold L2) takes 8 splits up to S = 4096
#: (S1024: 9.3 us with 8 splits, 10.4 with 4, 11.8 with 2; S4096: 14.1 with 8, 14.7 with 16) and
#: 16 from S = 8192 (S32000: 58.4 us with 16, 60.3 with 12, 66.7 with 32: one program per SM,
#: since 128-row tiles in 3 stages take 192 KB of shared memory). FLOOR 0: no floor (the
#: configs of the first tables).
_TILES = {
    True: [(128, 4, 3, 132, 64), (64, 4, 3, 132, 64), (128, 4, 3, 132, 0), (128, 8, 3, 132, 0),
           (64, 4, 3, 132, 0), (128, 4, 3, 264, 0), (64, 4, 2, 264, 0), (64, 4, 3, 528, 0),
           (32, 4, 3, 528, 0)],
    False: [(64, 4, 3, 132, 64), (64, 4, 3, 132, 0), (32, 4, 3, 132, 0), (64, 4, 2, 264, 0),
            (32, 4, 3, 528, 0)],
}


def decode_candidates(D: int, dtype: torch.dtype) -> list[dict]:
    """GPU launch configs the tuner may choose from; the first is the default. ``TARGET`` and
    ``FLOOR`` bound the program count the KV split aims at (``split_for``)."""
    shrink = max(1, max(16, next_pow2(D)) // 128)  # D=256: half the rows per tile, same bytes
    return [dict(BLOCK_N=max(16, block_n // shrink), num_warps=warps, num_stages=stages, TARGET=target,
                 **({"FLOOR": floor} if floor else {}))
            for block_n, warps, stages, target, floor in _TILES[dtype.itemsize == 2]]


def _with_split(cfg: dict, S: int, want: int) -> dict:
    split_len = cdiv(cdiv(S, want), cfg["BLOCK_N"]) * cfg["BLOCK_N"]
    return {**cfg, "SPLIT_LEN": split_len, "NUM_SPLITS": cdiv(S, split_len)}


def split_for(cfg: dict, B: int, Hkv: int, S: int, num_splits: Optional[int]) -> dict:
    """The tiles plus SPLIT_LEN and NUM_SPLITS: ``num_splits`` if given, else splits of at least
    MIN_SPLIT keys (MIN_SPLIT_LEN if the config names none), but enough for FLOOR programs (if
    named) and at most TARGET // (B * Hkv); rounded so every split is non-empty. A short context
    is latency-bound: its time is a few dependent memory trips per program, so it wants about
    half the SMs busy with short splits; a long one wants every SM, one program each."""
    cfg = dict(cfg)
    target = cfg.pop("TARGET", 0)
    floor = cfg.pop("FLOOR", 0)
    min_len = cfg.pop("MIN_SPLIT", MIN_SPLIT_LEN)
    want = num_splits or max(1, min(target // (B * Hkv), max(floor // (B * Hkv), cdiv(S, min_len))))
    return _with_split(cfg, S, want)


def decode_config(B: int, Hkv: int, S: int, D: int, G: int, dtype: torch.dtype, interpret: bool,
                  num_splits: Optional[int] = None, cores: Optional[int] = None) -> dict:
    """The portable default (interpreter, NPU, compile-only): BLOCK_G, BLOCK_N, BLOCK_D,
    num_warps, num_stages, SPLIT_LEN, NUM_SPLITS (every split non-empty). CUDA tunes from
    ``decode_candidates`` instead. ``cores``: planning for Ascend's persistent grid of that many
    programs (``_grid.npu_splits``) rather than a GPU's ~256."""
    block_d = max(16, next_pow2(D))
    block_g = max(16, next_pow2(G))  # tl.dot needs M >= 16
    if interpret:
        # Few, large programs: the interpreter's cost grows with program count.
        block_n, warps, stages = min(128, max(16, next_pow2(S))), 4, 1
        auto = cdiv(S, MIN_SPLIT_LEN)  # still exercises the merge for S > 512
    else:
        if dtype.itemsize == 2:
            block_n, warps, stages = (64, 4, 3) if block_d <= 128 else (32, 4, 2)
        else:
            block_n, warps, stages = (32, 4, 3) if block_d <= 128 else (16, 4, 2)
        if cores:
            auto = npu_splits(B * Hkv, cores, cdiv(S, MIN_SPLIT_LEN))
        else:
            auto = max(1, min(cdiv(256, B * Hkv), cdiv(S, MIN_SPLIT_LEN)))
    cfg = _with_split(dict(BLOCK_N=block_n, num_warps=warps, num_stages=stages), S,
                      auto if num_splits is None else num_splits)
    return dict(BLOCK_G=block_g, BLOCK_D=block_d, **cfg)


def decode_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                lse: Optional[torch.Tensor], *, scale: float, num_splits: Optional[int] = None,
                interpret: Optional[bool] = None, config: Optional[dict] = None) -> LaunchPlan:
    """The launch chain for validated inputs and allocated outputs (``lse`` None: no LSE).

    With more than one KV split, the plan allocates fp32 scratch for the partial results and its
    ``then`` is the merge launch.
    """
    B, Hq, _, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = Hq // Hkv
    interpret = is_interpret() if interpret is None else interpret
    tuning = "default"
    if config is None and (interpret or q.device.type != "cuda"):
        cores = npu_cores(q, vector=False) if on_ascend(q) else None
        cfg = decode_config(B, Hkv, S, D, G, q.dtype, interpret, num_splits, cores)
    else:
        if config is None:
            config, tuning = pick("decode", (B * Hkv, next_pow2(S), D, G, str(q.dtype), num_splits or 0),
                                  lambda: decode_candidates(D, q.dtype),
                                  lambda c: decode_plan(q, k, v, out, lse, scale=scale,
                                                        num_splits=num_splits, interpret=False,
                                                        config=c),
                                  q.device, live=is_live(q))
        cfg = dict(BLOCK_G=max(16, next_pow2(G)), BLOCK_D=max(16, next_pow2(D)),
                   **split_for(config, B, Hkv, S, num_splits))
    splits = cfg.pop("NUM_SPLITS")
    split_len = cfg.pop("SPLIT_LEN")
    return_lse = lse is not None
    o_dst, l_dst, write_lse, o_strides, l_strides = split_outputs(out, lse, splits, B, Hq, D)
    fused = splits > 1 and use_fast_path(q)
    # Fused merge: a zeroed ticket counter per (batch, KV head), which the last program of each
    # group sets back to zero; a repeat call reuses it on the same stream only (workspace).
    counter = torch.zeros(B * Hkv, dtype=torch.int32, device=q.device) if fused else out
    lse_out = lse if return_lse else out
    args = (q, k, v, o_dst, l_dst, out, lse_out, counter,
            q.stride(0), q.stride(1),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            *o_strides, *l_strides,
            out.stride(0), out.stride(1),
            *((lse.stride(0), lse.stride(1)) if return_lse else (0, 0)),
            Hkv, S, D, G, split_len, splits, float(scale) * LOG2E)
    meta = dict(RETURN_LSE=write_lse, DOT_PRECISION=DOT_INPUT_PRECISION, FUSED_MERGE=fused,
                RETURN_LSE_OUT=return_lse and fused, **cfg,
                **(merge_meta(splits, G, cfg["BLOCK_D"], cfg["num_warps"]) if fused else NO_MERGE))
    g = plan_grid((B * Hkv, splits), q, vector=False)
    meta["PERSISTENT"] = g.persistent
    plan = LaunchPlan(kernel=_decode_fwd, grid=g.grid, args=args + (B * Hkv, g.n_work, g.n_programs),
                      meta=meta, tuning=tuning,
                      workspace=scratch_of(out, o_dst, l_dst) + (((counter, True),) if fused else ()))
    if splits > 1 and not fused:
        plan.then = merge_plan(o_dst, l_dst, out, lse if return_lse else None, cfg["BLOCK_D"])
    return plan


def _validate(q, k, v, scale, return_lse, out, lse, num_splits) -> float:
    fn = "decode"
    B, Hq, Hkv, S, D = check_decode_qkv(fn, q, k, v, MAX_HEAD_DIM)
    check_rows_fit_int32(fn, "k", k, 2)
    check_rows_fit_int32(fn, "v", v, 2)
    check_flag(fn, "return_lse", return_lse)
    scale = check_scale(fn, scale, D)
    if num_splits is not None:
        check_int_range(fn, "num_splits", num_splits, 1, S)
    inputs = {"q": q, "k": k, "v": v}
    check_out_lse(fn, out, lse, return_lse, o_shape=(B, Hq, 1, D), o_dims="[B, Hq, 1, D]",
                  lse_shape=(B, Hq, 1), lse_dims="[B, Hq, 1]", like=q, inputs=inputs)
    check_launchable(fn, "q", q)
    return scale


def decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
           return_lse: bool = False, out: Optional[torch.Tensor] = None,
           lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
           ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """One-token attention: q [B, Hq, 1, D], k/v [B, Hkv, S, D] -> (o [B, Hq, 1, D], lse [B, Hq, 1] | None).

    Same dtype/GQA/scale/LSE/layout rules as ``prefill``. ``num_splits`` (optional, 1..S) asks for
    that many KV splits (rounded so every split is non-empty); default: chosen by ``decode_config``.
    A repeat of an earlier call's shapes and arguments skips validation and planning
    (``kernels._callcache``).
    """
    key = _CALLS.key((q, k, v), (out, lse), (scale, return_lse, num_splits))
    slot = _CALLS.lookup(key)
    if slot is None:
        _validate(q, k, v, scale, return_lse, out, lse, num_splits)
        slot = _CALLS.validated(key)
    elif out is not None or lse is not None:
        check_out_lse_aliases("decode", out, lse, {"q": q, "k": k, "v": v})
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
    plan = decode_plan(q, k, v, out, lse, scale=check_scale("decode", scale, q.shape[-1]),
                       num_splits=num_splits)
    _CALLS.run(slot, (), plan, tensors, is_live(q), launch)
    return out, lse


_CALLS = CallCache("decode")
