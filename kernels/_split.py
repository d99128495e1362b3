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
def last_to_arrive(counter, n):
    """Whether this program takes the last of ``n`` tickets at ``counter`` (CUDA fast paths).
    The barrier and the acq_rel atomic order every load and store the program made before its
    ticket, so the last one to arrive sees what all ``n`` did, and may use or clear it."""
    tl.debug_barrier()
    return tl.atomic_add(counter, 1, sem="acq_rel") == n - 1


@triton.jit
def merge_in_last_program(OP, LP, OUT, LSE_OUT, counter, b, head0, G, D,
                          stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh, stride_lsplit,
                          stride_outb, stride_outh, stride_lob, stride_loh,
                          NUM_SPLITS, RETURN_LSE_OUT: tl.constexpr, BLOCK_GM: tl.constexpr,
                          BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr,
                          BLOCK_D: tl.constexpr):
    """CUDA fast path: the split-KV merge of query heads ``head0 .. head0 + G - 1`` of batch
    ``b``, done by whichever split program of the group finishes last, instead of a second
    launch (~4 us of device time, and as much again of host time, on the H100). Each program's
    partial stores are ordered before its ticket by the barrier and the acq_rel atomic; the last
    one reads them past L1 (``.cg``) and resets the counter. Same math as ``_merge_splits``,
    empty splits (lse -inf) included. No program waits on a ticket, so a persistent program may
    run several splits of one group in turn (the last ticket's program may then merge partials
    it stored itself).

    Every split's LSE and partial output are read as one tile ([splits, heads] and [splits,
    heads, D]; ``merge_meta`` sizes it), so the merge costs one L2 round trip however many
    splits there are, where a loop over the splits waits for one round trip per split and per
    pass (the long context's 16 splits: 32 in a row). Only when the tile would not fit the
    registers does it walk the splits ``SPLIT_CHUNK`` at a time."""
    if last_to_arrive(counter, NUM_SPLITS):
        offs_g = tl.arange(0, BLOCK_GM)
        offs_d = tl.arange(0, BLOCK_D)
        g_ok = offs_g < G
        heads = head0 + offs_g
        io_mask = g_ok[:, None] & (offs_d[None, :] < D)
        lp_base = LP + b * stride_lb + heads[None, :] * stride_lh
        op_base = OP + b * stride_ob + heads[None, :, None] * stride_oh + offs_d[None, None, :]
        if SPLIT_CHUNK >= BLOCK_SPLITS:
            offs_s = tl.arange(0, BLOCK_SPLITS)
            s_ok = offs_s < NUM_SPLITS
            # Both loads are issued before either is used: one round trip.
            li = tl.load(lp_base + offs_s[:, None] * stride_lsplit, mask=s_ok[:, None] & g_ok[None, :],
                         other=float("-inf"), cache_modifier=".cg")
            oi = tl.load(op_base + offs_s[:, None, None] * stride_osplit,
                         mask=s_ok[:, None, None] & io_mask[None, :, :], other=0.0,
                         cache_modifier=".cg")
            m = tl.max(li, 0)
            # Every split empty (a sequence without tokens): m stays -inf; 0 keeps the weights 0.
            m_use = tl.where(m == float("-inf"), 0.0, m)
            w = tl.exp(li - m_use[None, :])
            w_sum = tl.sum(w, 0)
            acc = tl.sum(oi * w[:, :, None], 0)
        else:
            # Too many splits for one tile: the same in chunks, two passes (max, then sums).
            m = tl.full([BLOCK_GM], float("-inf"), dtype=tl.float32)
            for c in range(0, NUM_SPLITS, SPLIT_CHUNK):
                offs_c = c + tl.arange(0, SPLIT_CHUNK)
                lc = tl.load(lp_base + offs_c[:, None] * stride_lsplit,
                             mask=(offs_c[:, None] < NUM_SPLITS) & g_ok[None, :],
                             other=float("-inf"), cache_modifier=".cg")
                m = tl.maximum(m, tl.max(lc, 0))
            m_use = tl.where(m == float("-inf"), 0.0, m)
            w_sum = tl.zeros([BLOCK_GM], dtype=tl.float32)
            acc = tl.zeros([BLOCK_GM, BLOCK_D], dtype=tl.float32)
            for c in range(0, NUM_SPLITS, SPLIT_CHUNK):
                offs_c = c + tl.arange(0, SPLIT_CHUNK)
                c_ok = offs_c < NUM_SPLITS
                lc = tl.load(lp_base + offs_c[:, None] * stride_lsplit,
                             mask=c_ok[:, None] & g_ok[None, :], other=float("-inf"),
                             cache_modifier=".cg")
                oc = tl.load(op_base + offs_c[:, None, None] * stride_osplit,
                             mask=c_ok[:, None, None] & io_mask[None, :, :], other=0.0,
                             cache_modifier=".cg")
                wc = tl.exp(lc - m_use[None, :])
                w_sum += tl.sum(wc, 0)
                acc += tl.sum(oc * wc[:, :, None], 0)
        nonempty = w_sum > 0
        o = acc / tl.where(nonempty, w_sum, 1.0)[:, None]
        tl.store(OUT + b * stride_outb + heads[:, None] * stride_outh + offs_d[None, :],
                 o.to(OUT.dtype.element_ty), mask=io_mask)
        if RETURN_LSE_OUT:
            lse = tl.where(nonempty, m + tl.log(tl.where(nonempty, w_sum, 1.0)), float("-inf"))
            tl.store(LSE_OUT + b * stride_lob + heads * stride_loh, lse, mask=g_ok)
        tl.atomic_xchg(counter, 0)


#: fp32 elements of one merge tile per warp (64 registers a thread, free once the key loop is
#: done): G=4, D=128 merges 16 splits at once with 4 warps.
MERGE_ELEMS_PER_WARP = 2048


#: The merge constexprs of a kernel that does not merge in-kernel (one specialization).
NO_MERGE = dict(BLOCK_GM=1, BLOCK_SPLITS=1, SPLIT_CHUNK=1)


def merge_meta(splits: int, G: int, block_d: int, num_warps: int) -> dict:
    """Constexprs of ``merge_in_last_program`` for ``splits`` partials of G heads each."""
    block_gm = next_pow2(G)
    block_splits = next_pow2(splits)
    fit = max(1, MERGE_ELEMS_PER_WARP * num_warps // (block_gm * block_d))
    chunk = 1 << (fit.bit_length() - 1)
    if block_splits <= chunk:
        return dict(BLOCK_GM=block_gm, BLOCK_SPLITS=block_splits, SPLIT_CHUNK=block_splits)
    # Chunked (BLOCK_SPLITS > SPLIT_CHUNK selects it); one specialization for any longer list.
    return dict(BLOCK_GM=block_gm, BLOCK_SPLITS=2 * chunk, SPLIT_CHUNK=chunk)


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
