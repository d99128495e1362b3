"""Split-KV: the partial-result scratch a split kernel writes and the merge that combines it.

A split program writes its normalised partial output ``o_i`` and natural-log ``lse_i`` in fp32;
the merge computes ``o = sum_i e^(lse_i - m) o_i / sum_i e^(lse_i - m)``. Shared by every decode
kernel that splits its keys (dense, paged, sparse, sparse paged, MagicPIG).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._checks import LaunchPlan, next_pow2
from ._grid import plan_grid


@triton.jit
def _merge_row(
    OP, LP, O, LSE,
    stride_pb, stride_ph, stride_ps,
    stride_lpb, stride_lph, stride_lps,
    stride_ob, stride_oh,
    stride_lb, stride_lh,
    Hq, D, NUM_SPLITS, pid,
    RETURN_LSE: tl.constexpr, BLOCK_SPLITS: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One (batch, query head), pid = batch * Hq + head: o = sum_i w_i o_i / sum_i w_i with
    w_i = e^(lse_i - m).

    Empty splits carry lse_i = -inf and o_i = 0; a row where every split is empty gets o = 0 and
    lse = -inf (no NaN: the max is replaced by 0 before it is subtracted).
    """
    b = (pid // Hq).to(tl.int64)
    h = (pid % Hq).to(tl.int64)
    offs_s = tl.arange(0, BLOCK_SPLITS)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < NUM_SPLITS
    d_ok = offs_d < D
    lse_p = tl.load(LP + b * stride_lpb + h * stride_lph + offs_s * stride_lps, mask=s_ok,
                    other=float("-inf"))
    o_p = tl.load(OP + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_d[None, :],
                  mask=s_ok[:, None] & d_ok[None, :], other=0.0)
    m = tl.max(lse_p, 0)
    m_use = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse_p - m_use)
    w_sum = tl.sum(w, 0)
    nonempty = w_sum > 0
    o = tl.sum(o_p * w[:, None], 0) / tl.where(nonempty, w_sum, 1.0)
    tl.store(O + b * stride_ob + h * stride_oh + offs_d, o.to(O.dtype.element_ty), mask=d_ok)
    if RETURN_LSE:
        lse = tl.where(nonempty, m_use + tl.log(tl.where(nonempty, w_sum, 1.0)), float("-inf"))
        tl.store(LSE + b * stride_lb + h * stride_lh, lse)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=[
    "Hq", "NUM_SPLITS", "stride_lpb", "stride_lph", "stride_lps", "stride_lb", "stride_lh",
    "n_work", "n_programs",
])
def _merge_splits(
    OP, LP, O, LSE,
    stride_pb, stride_ph, stride_ps,
    stride_lpb, stride_lph, stride_lps,
    stride_ob, stride_oh,
    stride_lb, stride_lh,
    Hq, D, NUM_SPLITS, n_work, n_programs,
    RETURN_LSE: tl.constexpr, BLOCK_SPLITS: tl.constexpr, BLOCK_D: tl.constexpr,
    PERSISTENT: tl.constexpr,
):
    """The merge launch: one program per (batch, query head), or on Ascend one per vector core
    looping over them (kernels/_grid.py)."""
    if PERSISTENT:
        for work in range(tl.program_id(0), n_work, n_programs):
            _merge_row(OP, LP, O, LSE, stride_pb, stride_ph, stride_ps, stride_lpb, stride_lph,
                       stride_lps, stride_ob, stride_oh, stride_lb, stride_lh, Hq, D, NUM_SPLITS,
                       work, RETURN_LSE, BLOCK_SPLITS, BLOCK_D)
    else:
        _merge_row(OP, LP, O, LSE, stride_pb, stride_ph, stride_ps, stride_lpb, stride_lph,
                   stride_lps, stride_ob, stride_oh, stride_lb, stride_lh, Hq, D, NUM_SPLITS,
                   tl.program_id(0), RETURN_LSE, BLOCK_SPLITS, BLOCK_D)


@triton.jit
def merge_in_last_program(OP, LP, OUT, LSE_OUT, counter, b, heads, g_ok, offs_d, io_mask,
                           stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh, stride_lsplit,
                           stride_outb, stride_outh, stride_lob, stride_loh,
                           NUM_SPLITS, RETURN_LSE_OUT: tl.constexpr):
    """CUDA fast path: the split-KV merge done by whichever split program of a (batch, KV head)
    finishes last, instead of a second launch (~4 us of device time, and as much again of host
    time, on the H100). Each program's partial stores are ordered before its ticket by the
    barrier and the acq_rel atomic; the last one reads them past L1 (``.cg``) and resets the
    counter. Same math as ``_merge_splits``, empty splits (lse -inf) included. No program waits
    on a ticket, so a persistent program may run several splits of one group in turn (the
    last ticket's program may then merge partials it stored itself)."""
    tl.debug_barrier()
    ticket = tl.atomic_add(counter, 1, sem="acq_rel")
    if ticket == NUM_SPLITS - 1:
        m = tl.full(heads.shape, float("-inf"), dtype=tl.float32)
        for i in range(0, NUM_SPLITS):
            li = tl.load(LP + b * stride_lb + heads * stride_lh + i * stride_lsplit, mask=g_ok,
                         other=float("-inf"), cache_modifier=".cg")
            m = tl.maximum(m, li)
        # Every split empty (a sequence without tokens): m stays -inf; 0 keeps the weights 0, not NaN.
        m_use = tl.where(m == float("-inf"), 0.0, m)
        w_sum = tl.zeros(heads.shape, dtype=tl.float32)
        acc = tl.zeros(io_mask.shape, dtype=tl.float32)
        for i in range(0, NUM_SPLITS):
            li = tl.load(LP + b * stride_lb + heads * stride_lh + i * stride_lsplit, mask=g_ok,
                         other=float("-inf"), cache_modifier=".cg")
            oi = tl.load(OP + b * stride_ob + heads[:, None] * stride_oh + i * stride_osplit
                         + offs_d[None, :], mask=io_mask, other=0.0, cache_modifier=".cg")
            w = tl.exp(li - m_use)
            w_sum += w
            acc += w[:, None] * oi
        nonempty = w_sum > 0
        o = acc / tl.where(nonempty, w_sum, 1.0)[:, None]
        tl.store(OUT + b * stride_outb + heads[:, None] * stride_outh + offs_d[None, :],
                 o.to(OUT.dtype.element_ty), mask=io_mask)
        if RETURN_LSE_OUT:
            lse = tl.where(nonempty, m + tl.log(tl.where(nonempty, w_sum, 1.0)), float("-inf"))
            tl.store(LSE_OUT + b * stride_lob + heads * stride_loh, lse, mask=g_ok)
        tl.atomic_xchg(counter, 0)



def split_scratch(B: int, Hq: int, splits: int, D: int, device: torch.device):
    """fp32 partial outputs [B, Hq, splits, D] and LSEs [B, Hq, splits]."""
    return (torch.empty((B, Hq, splits, D), dtype=torch.float32, device=device),
            torch.empty((B, Hq, splits), dtype=torch.float32, device=device))


def merge_plan(o_part: torch.Tensor, l_part: torch.Tensor, out: torch.Tensor,
               lse: Optional[torch.Tensor], block_d: int) -> LaunchPlan:
    """The merge launch: partials [B, Hq, splits, D] / [B, Hq, splits] -> out [B, Hq, D], lse [B, Hq]."""
    B, Hq, splits, D = o_part.shape
    return_lse = lse is not None
    args = (o_part, l_part, out, lse if return_lse else out,
            *o_part.stride()[:3], *l_part.stride(),
            out.stride(0), out.stride(1),
            *((lse.stride(0), lse.stride(1)) if return_lse else (0, 0)),
            Hq, D, splits)
    g = plan_grid((B * Hq,), out, vector=True)
    meta = dict(RETURN_LSE=return_lse, BLOCK_SPLITS=next_pow2(splits), BLOCK_D=block_d,
                num_warps=4, num_stages=1, PERSISTENT=g.persistent)
    return LaunchPlan(kernel=_merge_splits, grid=g.grid, args=args + (g.n_work, g.n_programs),
                      meta=meta)


def scratch_of(out: torch.Tensor, o_dst: torch.Tensor, l_dst: torch.Tensor) -> tuple:
    """The split scratch as ``LaunchPlan.workspace`` entries (none when writing to ``out``)."""
    return () if o_dst is out else ((o_dst, False), (l_dst, False))


def split_outputs(out: torch.Tensor, lse: Optional[torch.Tensor], splits: int, B: int, Hq: int, D: int):
    """Where a split kernel writes: straight into out/lse when there is one split, else into fp32
    scratch for the merge. Returns (o_dst, l_dst, write_lse, o_strides, l_strides): strides of
    (batch, head, split); lse may be None (l_dst is then ``out``, never written)."""
    if splits == 1:
        write_lse = lse is not None
        l_strides = (lse.stride(0), lse.stride(1), 0) if write_lse else (0, 0, 0)
        return out, (lse if write_lse else out), write_lse, (out.stride(0), out.stride(1), 0), l_strides
    o_dst, l_dst = split_scratch(B, Hq, splits, D, out.device)
    return o_dst, l_dst, True, o_dst.stride()[:3], l_dst.stride()
