"""Sparse-token decode over a paged KV cache (docs/contract.md section 6), and the kernel MagicPIG shares.

Each query head has its own token list (``sparse_ind [B, Hq, L_max]``, first ``sparse_nnz[b, h]``
entries valid), so there is no GQA packing: one program per (batch, query head, split of the
list) computes scores elementwise (q broadcast over a [BLOCK_N, D] tile, ``tl.sum`` over D) in
fp32 from the upcast K/V values -- no ``tl.dot`` (it would need M >= 16 rows of one shared list).

Logical positions are translated to physical row ids on the host (``_paged.sparse_rows``: one
vectorized torch pass; the in-kernel page lookup with a vector ``t // PAGE_SIZE`` is the Ascend
"cannot div 0" construct; on CUDA the fast path, ``LOOKUP``, does that lookup in the kernel
instead). The kernel then loads a contiguous window of row ids and gathers whole
rows (``row[:, None] * unit + arange(D)[None, :]``), the portable gather form. Tail masks are
arithmetic (``j < end``). ``MAGICPIG`` (constexpr) adds the LSH collision-probability correction
``-log(u)`` to every score (see ``magicpig_decode``), as a weight on its softmax term; the per-key
norms are computed over the same tile, which MagicPIG lays out as [D chunks, BLOCK_N, D_CHUNK]
(``d_chunk``) so that fewer lanes repeat each key's weight.

Two loop options (constexpr, from the config; MagicPIG's GPU tiles and the interpreter use both,
the plain kernel's tiles and the npu path neither). ``SLOT_SOFTMAX``: each of the tile's BLOCK_N
key slots keeps its own running max, sum and [D] accumulator, combined once after the loop, so
the loop has no reduction over keys (no shuffles or shared-memory round trips a tile, and one
exp2 a key for the rescale instead of one a tile); its accumulator has the tile's shape, which
costs no registers where a thread holds one key (``_SLOT_TILES``). ``PREFETCH``: before tile n's
math, the K/V rows of tile n + 1, the page ids of n + 2 and the positions of n + 3 are requested
(each from the step before, requested one iteration earlier), so three tiles are in flight.

Long lists are split; each split writes a normalised partial output and its LSE and
``_split.merge_plan`` combines them. nnz == 0: o = 0, lse = -inf.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._checks import (cdiv, check_flag, check_gqa, check_int_range, check_launchable,
                      check_out_lse_aliases, check_scale, is_interpret, is_live, launch, LaunchPlan,
                      next_pow2, on_ascend, use_fast_path)
from ._tune import pick
from ._math import magicpig_weight, recip
from ._split import merge_in_last_program, merge_meta, merge_plan, NO_MERGE, scratch_of, split_outputs
from ._grid import NPU_VECTOR_CORES, npu_cores, npu_splits, plan_grid
from ._paged import (check_index_values, check_layout, check_outputs, check_page_table,
                     check_paged_kv, check_q, check_row_ids_fit, check_sparse_indices, kv_dims,
                     kv_strides, sparse_rows)

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256
MIN_SPLIT_LEN = 256


@triton.jit
def _list_slots(row_ptr, n, end, offs_n):
    """The list entries of the tile of slots [n, n + BLOCK_N) before ``end`` (0 past it): logical
    positions (``LOOKUP``) or row ids, and which slots are valid."""
    j = n + offs_n
    ok = j < end
    return tl.load(row_ptr + j, mask=ok, other=0), ok


@triton.jit
def _page_of(t, ok, PAGE_INDICES, page_lo, LOOKUP: tl.constexpr, PAGE_SIZE: tl.constexpr):
    """(page id, slot in the page) of each entry; without ``LOOKUP`` (row ids) the row id and 0."""
    if LOOKUP:
        # CUDA fast path: ROWS holds logical positions; the page lookup happens here, which
        # saves the host pre-pass (~10 small launches). Ascend rejects the vector `t // P`.
        page = tl.load(PAGE_INDICES + page_lo + t // PAGE_SIZE, mask=ok, other=0)
        slot = t % PAGE_SIZE
    else:
        page = t
        slot = t * 0
    return page, slot


@triton.jit
def _gather_kv(k_base, page, slot, ok, offs_d, d_ok, stride_kv, row_unit, stride_page,
               stride_slot, LOOKUP: tl.constexpr):
    """K and V rows of the tile (storage dtype): whole-row gathers [chunks, BLOCK_N, D_CHUNK]
    from a window of row ids (int64 offsets)."""
    if LOOKUP:
        row = page.to(tl.int64) * stride_page + slot.to(tl.int64) * stride_slot
    else:
        row = page.to(tl.int64) * row_unit
    kv_mask = ok[None, :, None] & d_ok[:, None, :]
    kv_off = row[None, :, None] + offs_d[:, None, :]
    # Both gathers issued before the math (H200: ~20% faster than loading V after the scores).
    k = tl.load(k_base + kv_off, mask=kv_mask, other=0.0)
    v = tl.load(k_base + stride_kv + kv_off, mask=kv_mask, other=0.0)
    return k, v


@triton.jit
def _sparse_paged_tile(
    Q, KV, ROWS, NNZ, KP, LP, O, LSE, PAGE_INDPTR, PAGE_INDICES, OUT, LSE_OUT, COUNTER,
    stride_qb, stride_qh,
    stride_kv, stride_head, row_unit, stride_page, stride_slot,
    stride_rb, stride_rh,
    stride_nb, stride_nh,
    stride_kpb, stride_kph, stride_lpb, stride_lph,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    stride_outb, stride_outh, stride_lob, stride_loh,
    Hq, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale, pid, split,
    MAGICPIG: tl.constexpr, RETURN_LSE: tl.constexpr, LOOKUP: tl.constexpr,
    FUSED_MERGE: tl.constexpr, RETURN_LSE_OUT: tl.constexpr,
    PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D_CHUNK: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr, SLOT_SOFTMAX: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """One split of one row's token list: pid is batch * Hq + head. (Reading the next tile's
    positions and page ids while this tile's rows are in flight was tried on the H100: it held
    more registers than it saved latency, 104 us against 96 at the bench cache, kept 2%.)
    ``PREFETCH`` reads ahead all three steps of that chain instead (the module docstring): the
    next tile's K/V rows, in their storage dtype, the page ids of the one after and the positions
    of the third are all issued before this tile's math. No dependent load then waits inside an
    iteration, for one more K/V tile of registers (fp16 D = 256, 8 rows over 4 warps: +24)."""
    b = (pid // Hq).to(tl.int64)
    h = (pid % Hq).to(tl.int64)
    hk = h // G
    offs_n = tl.arange(0, BLOCK_N)
    # D as [BLOCK_D // D_CHUNK, D_CHUNK]: a [chunks, BLOCK_N, D_CHUNK] tile puts fewer lanes on D
    # and the rest on the keys, so a per-key value (MagicPIG's weight) is computed by fewer lanes
    # each (D_CHUNK = BLOCK_D: the plain [BLOCK_N, BLOCK_D] tile).
    offs_d = tl.arange(0, BLOCK_D // D_CHUNK)[:, None] * D_CHUNK + tl.arange(0, D_CHUNK)[None, :]
    d_ok = offs_d < D

    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    if MAGICPIG:
        q_norm = tl.sqrt(tl.sum(tl.sum(q * q, 1), 0))
        q_inv = 1.0 / tl.maximum(q_norm, 1e-30)
        k_exp = tl.load(KP + b * stride_kpb + h * stride_kph)
        l_minus_1 = tl.load(LP + b * stride_lpb + h * stride_lph) - 1.0
    start = split * SPLIT_LEN
    row_ptr = ROWS + b * stride_rb + h * stride_rh
    if LOOKUP:
        page_lo = tl.load(PAGE_INDPTR + b)
    else:
        page_lo = 0
    nnz = tl.load(NNZ + b * stride_nb + h * stride_nh)
    end = tl.minimum(start + SPLIT_LEN, nnz)
    k_base = KV + hk * stride_head

    # Scores in base 2 (qk_scale has log2(e) folded in). The running max is replaced by 0 while it
    # is still -inf, so a fully masked tile or an empty split never produces NaN.
    if SLOT_SOFTMAX:
        m_i = tl.full([BLOCK_N], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc = tl.zeros([BLOCK_D // D_CHUNK, BLOCK_N, D_CHUNK], dtype=tl.float32)
    else:
        m_i = tl.max(tl.full([BLOCK_N], float("-inf"), dtype=tl.float32), 0)  # 0-d fp32 -inf
        l_i = tl.sum(tl.zeros([BLOCK_N], dtype=tl.float32), 0)  # 0-d fp32 0
        acc = tl.zeros([BLOCK_D // D_CHUNK, D_CHUNK], dtype=tl.float32)
    if PREFETCH:
        # Loop entry: K/V rows of the first tile, page ids of the second, positions of the third.
        t0, ok = _list_slots(row_ptr, start, end, offs_n)
        page0, slot0 = _page_of(t0, ok, PAGE_INDICES, page_lo, LOOKUP, PAGE_SIZE)
        k_raw, v_raw = _gather_kv(k_base, page0, slot0, ok, offs_d, d_ok, stride_kv, row_unit,
                                  stride_page, stride_slot, LOOKUP)
        t1, ok1 = _list_slots(row_ptr, start + BLOCK_N, end, offs_n)
        page1, slot1 = _page_of(t1, ok1, PAGE_INDICES, page_lo, LOOKUP, PAGE_SIZE)
        t2, ok2 = _list_slots(row_ptr, start + 2 * BLOCK_N, end, offs_n)
    for n in range(start, end, BLOCK_N):
        if PREFETCH:
            t3, ok3 = _list_slots(row_ptr, n + 3 * BLOCK_N, end, offs_n)
            page2, slot2 = _page_of(t2, ok2, PAGE_INDICES, page_lo, LOOKUP, PAGE_SIZE)
            k_next, v_next = _gather_kv(k_base, page1, slot1, ok1, offs_d, d_ok, stride_kv,
                                        row_unit, stride_page, stride_slot, LOOKUP)
        else:
            t, ok = _list_slots(row_ptr, n, end, offs_n)
            page, slot = _page_of(t, ok, PAGE_INDICES, page_lo, LOOKUP, PAGE_SIZE)
            k_raw, v_raw = _gather_kv(k_base, page, slot, ok, offs_d, d_ok, stride_kv, row_unit,
                                      stride_page, stride_slot, LOOKUP)
        k = k_raw.to(tl.float32)
        v = v_raw.to(tl.float32)
        if SLOT_SOFTMAX:
            # Over the chunks first (in-thread adds), then across the lanes on D: one shuffle tree
            # a key instead of one a chunk.
            qk = tl.sum(tl.sum(k * q[:, None, :], 0), 1)
        else:
            # The plain tiles: each chunk across its lanes first (H200, bench case kept 2%: 77.9
            # us against 83.3 with the chunks summed first).
            qk = tl.sum(tl.sum(k * q[:, None, :], 2), 0)
        s = qk * qk_scale
        if MAGICPIG:
            # score = q.k * scale - log(max(u, 1e-10)) is s + log(weight) + log(1e10) (base 2 here):
            # the weight multiplies the softmax terms below and log2(1e10) joins the LSE, so the
            # running max stays the plain score's (_math.magicpig_weight).
            # c = clamp(q.k / (|q||k| + 1e-8), -1 + 1e-7, 1 - 1e-7), as 1 - |c| >= 1e-7 and |c|.
            k_norm = tl.sqrt(tl.sum(tl.sum(k * k, 0), 1))
            nn = q_norm * k_norm
            inv = recip(nn + 1e-8)
            abs_c = tl.minimum(tl.abs(qk) * inv, 1.0)
            one_minus_abs = 1.0 - abs_c
            near_one = tl.max(abs_c, 0) > 0.5
            if near_one:
                # Near |c| = 1 the difference 1 - |c| cancels; with q^, k^ the unit vectors and
                # sg = sign(q.k): (1 - |c|)(|q||k| + eps) = |q||k| |q^ - sg k^|^2 / 2 + eps, a sum
                # of squares, here as |k| |q - sg |q| k^|^2 / (2 |q|) (no unit query held in
                # registers). Below |c| = 1/2 the plain difference has the same relative accuracy
                # (its absolute error, ~1e-7, is at most twice that relative to 1 - |c|), so the
                # extra pass over the tile runs only for tiles holding such a key.
                w = tl.where(qk < 0, -q_norm, q_norm) / tl.maximum(k_norm, 1e-30)
                diff = q[:, None, :] - k * w[None, :, None]
                sq = tl.sum(tl.sum(diff * diff, 0), 1)
                exact = (k_norm * q_inv * (sq * 0.5) + 1e-8) * inv
                one_minus_abs = tl.where(abs_c > 0.5, exact, one_minus_abs)
            # A tile with every |c| <= 1/2 has no P > 1/4 when K >= 3.5 (_math.magicpig_weight).
            weight = magicpig_weight(qk < 0, tl.maximum(one_minus_abs, 1e-7), abs_c, k_exp,
                                     l_minus_1, near_one | (k_exp < 3.5))
        s = tl.where(ok, s, float("-inf"))
        if SLOT_SOFTMAX:
            m_new = tl.maximum(m_i, s)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 0))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp2(m_i - m_use)
        pr = tl.exp2(s - m_use)
        if MAGICPIG:
            pr = pr * weight
        if SLOT_SOFTMAX:
            l_i = l_i * alpha + pr
            acc = acc * alpha[None, :, None] + pr[None, :, None] * v
        else:
            l_i = l_i * alpha + tl.sum(pr, 0)
            acc = acc * alpha + tl.sum(pr[None, :, None] * v, 1)
        m_i = m_new
        if PREFETCH:
            k_raw, v_raw, ok = k_next, v_next, ok1
            page1, slot1, ok1 = page2, slot2, ok2
            t2, ok2 = t3, ok3

    if SLOT_SOFTMAX:
        m_all = tl.max(m_i, 0)
        slot_scale = tl.exp2(m_i - tl.where(m_all == float("-inf"), 0.0, m_all))
        l_i = tl.sum(l_i * slot_scale, 0)
        acc = tl.sum(acc * slot_scale[None, :, None], 1)
        m_i = m_all

    nonempty = l_i > 0
    o = acc / tl.where(nonempty, l_i, 1.0)
    tl.store(O + b * stride_ob + h * stride_oh + split * stride_osplit + offs_d,
             o.to(O.dtype.element_ty), mask=d_ok)
    if RETURN_LSE:
        lse2 = m_i + tl.log2(tl.where(nonempty, l_i, 1.0))
        if MAGICPIG:
            lse2 = lse2 + 33.219280948873624  # log2(1e10): the weights are 1e-10 / max(u, 1e-10)
        lse = tl.where(nonempty, lse2 * 0.6931471805599453, float("-inf"))
        tl.store(LSE + b * stride_lb + h * stride_lh + split * stride_lsplit, lse)
    if FUSED_MERGE:  # one row's splits: a group of one head
        merge_in_last_program(O, LSE, OUT, LSE_OUT, COUNTER + pid, b, h, 1, D,
                              stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh,
                              stride_lsplit, stride_outb, stride_outh, stride_lob, stride_loh,
                              NUM_SPLITS, RETURN_LSE_OUT, 1, BLOCK_SPLITS, SPLIT_CHUNK, BLOCK_D)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=[
    "Hq", "G", "SPLIT_LEN", "NUM_SPLITS", "stride_rb", "stride_rh", "stride_nb",
    "stride_nh", "stride_kpb", "stride_kph", "stride_lpb", "stride_lph", "stride_lb", "stride_lh",
    "stride_lsplit", "stride_lob", "stride_loh", "n_bh", "n_work", "n_programs",
])
def _sparse_paged_fwd(
    Q, KV, ROWS, NNZ, KP, LP, O, LSE, PAGE_INDPTR, PAGE_INDICES, OUT, LSE_OUT, COUNTER,
    stride_qb, stride_qh,
    stride_kv, stride_head, row_unit, stride_page, stride_slot,
    stride_rb, stride_rh,
    stride_nb, stride_nh,
    stride_kpb, stride_kph, stride_lpb, stride_lph,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    stride_outb, stride_outh, stride_lob, stride_loh,
    Hq, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale, n_bh, n_work, n_programs,
    MAGICPIG: tl.constexpr, RETURN_LSE: tl.constexpr, LOOKUP: tl.constexpr,
    FUSED_MERGE: tl.constexpr, RETURN_LSE_OUT: tl.constexpr,
    PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, D_CHUNK: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr, PERSISTENT: tl.constexpr,
    SLOT_SOFTMAX: tl.constexpr, PREFETCH: tl.constexpr,
):
    if PERSISTENT:  # kernels/_grid.py: rows are the fast index, so every row's first split goes first
        for work in range(tl.program_id(0), n_work, n_programs):
            _sparse_paged_tile(Q, KV, ROWS, NNZ, KP, LP, O, LSE, PAGE_INDPTR, PAGE_INDICES,
                               OUT, LSE_OUT, COUNTER,
                               stride_qb, stride_qh, stride_kv, stride_head, row_unit, stride_page,
                               stride_slot, stride_rb, stride_rh, stride_nb, stride_nh, stride_kpb,
                               stride_kph, stride_lpb, stride_lph, stride_ob, stride_oh,
                               stride_osplit, stride_lb, stride_lh, stride_lsplit,
                               stride_outb, stride_outh, stride_lob, stride_loh,
                               Hq, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale, work % n_bh,
                               work // n_bh,
                               MAGICPIG, RETURN_LSE, LOOKUP, FUSED_MERGE, RETURN_LSE_OUT,
                               PAGE_SIZE,
                           BLOCK_N, BLOCK_D, D_CHUNK, BLOCK_SPLITS, SPLIT_CHUNK, SLOT_SOFTMAX,
                               PREFETCH)
    else:
        _sparse_paged_tile(Q, KV, ROWS, NNZ, KP, LP, O, LSE, PAGE_INDPTR, PAGE_INDICES,
                           OUT, LSE_OUT, COUNTER,
                           stride_qb, stride_qh, stride_kv, stride_head, row_unit, stride_page,
                           stride_slot, stride_rb, stride_rh, stride_nb, stride_nh, stride_kpb,
                           stride_kph, stride_lpb, stride_lph, stride_ob, stride_oh,
                           stride_osplit, stride_lb, stride_lh, stride_lsplit,
                           stride_outb, stride_outh, stride_lob, stride_loh,
                           Hq, D, G, SPLIT_LEN, NUM_SPLITS, qk_scale, tl.program_id(0),
                           tl.program_id(1),
                           MAGICPIG, RETURN_LSE, LOOKUP, FUSED_MERGE, RETURN_LSE_OUT,
                               PAGE_SIZE,
                           BLOCK_N, BLOCK_D, D_CHUNK, BLOCK_SPLITS, SPLIT_CHUNK, SLOT_SOFTMAX,
                               PREFETCH)


#: (BLOCK_N, num_warps, num_stages, target programs, least slots a split or 0 for MIN_SPLIT_LEN)
#: GPU candidates for 16-bit D <= 128 (BLOCK_N halves for D=256 and for fp32, keeping a tile's
#: K/V under 16 KB); the first is the default.
_TILES = [(16, 2, 2, 4096, 64), (64, 4, 2, 1024, 0), (64, 4, 3, 1024, 0), (32, 4, 2, 1024, 0),
          (64, 8, 2, 512, 0), (32, 2, 2, 2048, 0), (64, 4, 2, 2048, 0), (128, 8, 2, 512, 0),
          (16, 2, 2, 8192, 32), (16, 1, 2, 8192, 32), (16, 2, 2, 16384, 16), (16, 1, 2, 16384, 16)]


#: MagicPIG's GPU tiles, listed before _TILES (the first is its default), all with SLOT_SOFTMAX:
#: (D_CHUNK, num_warps, target programs, least slots a split, PREFETCH). BLOCK_N puts one key on
#: each thread: a thread loads 16 bytes of a row, so D_CHUNK / (16 / itemsize) lanes share a key
#: and the warps' other lanes hold other keys (fp16 D = 256: 8 rows with chunks of 128 and 4
#: warps); a thread then evaluates one key's weight per tile and holds no key axis of the
#: accumulator that it would reduce over.
_SLOT_TILES = [(128, 2, 4096, 32, True), (128, 4, 2048, 64, True), (64, 4, 2048, 64, True),
               (64, 4, 2048, 64, False), (128, 4, 2048, 64, False), (128, 4, 1024, 64, True),
               (128, 4, 4096, 32, True), (64, 2, 4096, 32, True), (128, 8, 1024, 64, True)]


def sparse_paged_candidates(D: int, dtype: torch.dtype, magicpig: bool = False,
                            ascend: bool = False, cores: int = NPU_VECTOR_CORES) -> list[dict]:
    """GPU launch configs the tuner may choose from; the first is the default. ``ascend``: the
    one npu-path config (``_ascend_tile``), its list split over ``cores`` persistent programs.

    The loop is a chain of dependent loads (row ids, page ids, then K/V rows), so it wants many
    small programs in flight more than big tiles: the default is 16-row tiles, 2 warps, splits of
    >= 64 slots over about 4096 programs. H100, the bench cache (D=256) kept 2%: 85.6 us, against
    96.5 with 32-row tiles over 672 programs and 138 with 4 warps. The default tile also comes
    with the other D chunk widths (``d_chunk``). MagicPIG lists its own tiles first
    (``_SLOT_TILES``, about 2048 programs): compiled for sm_90 at the bench shape, its earlier
    default (16 rows, chunks of 64, 2 warps) took 230 registers and 179 SASS instructions a key
    in the loop, and the tuned 1-warp tile 255 registers with 304 bytes of spills a thread; the
    slot tiles take 95-200 registers and no spills. Measured on an H200 at the bench case (graph
    replay; sparse paged decode's tuned tile 82.7 us): the first slot tile (chunks of 128 over 2
    warps, 4 rows, about 4096 programs, PREFETCH) 83.9 us, 8 rows over 4 warps 84.8-94.0, the
    tuned 1-warp tile 195.2 (docs/hardware-log.md). Then the plain tiles (their TARGET
    halved), which the shipped tables may still name. The plain kernel's list ends with the slot
    tiles (sm_90, bench shape: 8 rows and chunks of 128 over 4 warps, 77 instructions a key
    without PREFETCH against 83 for its tuned tile).
    A tile holds at most 16 KB of input: the unified buffer on Ascend is 192 KB
    (fp16 D=256: 32 rows; fp32 D=128 with 64 rows overflows it).
    """
    block_d = max(16, next_pow2(D))
    if ascend:
        return [dict(_ascend_tile(block_d, dtype, magicpig), BLOCK_D=block_d, num_warps=4,
                     num_stages=2, CORES=cores)]
    cap = max(16, 16384 // (block_d * dtype.itemsize))
    chunk = d_chunk(block_d, magicpig, False)
    tiles = [dict(BLOCK_N=min(block_n, cap), BLOCK_D=block_d, D_CHUNK=chunk, num_warps=warps,
                  num_stages=stages, TARGET=target // 2 if magicpig else target,
                  **({"MIN_SPLIT": least} if least else {}))
             for block_n, warps, stages, target, least in _TILES]
    # The default tile with the other D chunk widths (more lanes on keys, or the whole row).
    widths = {min(block_d, w) for w in (32, 64, 128)} | {block_d}
    tiles += [dict(tiles[0], D_CHUNK=c) for c in sorted(widths - {chunk})]
    vec = max(1, 16 // dtype.itemsize)
    slot = []
    for width, warps, target, least, prefetch in _SLOT_TILES:
        width = min(block_d, width)
        keys = warps * 32 * vec // width  # one key a thread
        cfg = dict(BLOCK_N=min(cap, max(2, next_pow2(keys))), BLOCK_D=block_d, D_CHUNK=width,
                   num_warps=warps, num_stages=2, TARGET=target if magicpig else 2 * target,
                   MIN_SPLIT=least, SLOT_SOFTMAX=True, PREFETCH=prefetch)
        if cfg not in slot:  # narrow rows make some of them the same
            slot.append(cfg)
    # The plain kernel may take the slot tiles too (twice the programs, as its own tiles have).
    return slot + tiles if magicpig else tiles + slot


def _ascend_tile(block_d: int, dtype: torch.dtype, magicpig: bool) -> dict:
    """The npu path's rows per gather step: 4096 fp32 elements a tile (64, 32, 16 rows at
    D = 64, 128, 256), MagicPIG at most 32. bishengir's UB plan is not monotonic in the tile
    (fp16, persistent grid, triton-ascend 3.2.0): the plain kernel takes 63% at 64x64, 67% at
    32x128, 69% at 16x256, but 94% at 64x128 and 95% at 32x256; MagicPIG 50%, 57%, 59% at
    32x64, 32x128, 16x256 (with its sampling weight; 50%, 53%, 54% with the log-form correction
    before it), but 95-97% with the GPU's rows (64x64, 64x128, 32x256)."""
    rows = min(64, max(16, 8192 // (block_d * max(2, dtype.itemsize))))
    return dict(BLOCK_N=min(32, rows) if magicpig else rows)


def d_chunk(block_d: int, magicpig: bool, ascend: bool, interpret: bool = False) -> int:
    """Width of the tile's D chunks (``D_CHUNK``). MagicPIG's per-key weight runs on every lane
    that holds part of a key, so its tile puts at most 64 of D on a warp's lanes (8 lanes of 8
    fp16) and the other lanes on keys: at D = 256, 2 warps and 16 keys a thread holds 2 keys'
    weights instead of 8. The key loop compiled for sm_90 at the bench shape: 1431 SASS
    instructions per warp and tile with chunks of 64, 1624 with 32 (the reductions over keys take
    more shuffles), 2491 with the whole row. Its cost is registers: 8 lanes on D hold the query,
    its unit vector and the accumulator 4x over (230 registers a thread against 127 for the
    log-form correction with the whole row, 220 for this weight with the whole row, 195 for
    chunks of 64 without the tile-level branch), i.e. half the resident programs of a
    latency-bound gather loop: the tuner's candidates carry widths 32, 64, 128 and the whole row.
    32 in the interpreter, so that CPU runs cover several chunks at D = 64. The plain kernel (its
    loop is 810 instructions with the whole row, 762 with chunks of 64: the tuner's candidates
    have both) and the Ascend path keep the whole row. (These figures are of the loop before
    ``SLOT_SOFTMAX``; MagicPIG's slot tiles name their own widths, ``_SLOT_TILES``.)"""
    if not magicpig or ascend:
        return block_d
    return min(block_d, 32 if interpret else 64)


def list_split(cfg: dict, B: int, Hq: int, L_max: int, num_splits: Optional[int]) -> dict:
    cfg = dict(cfg)
    target = cfg.pop("TARGET", 0)
    cores = cfg.pop("CORES", 0)
    min_len = cfg.pop("MIN_SPLIT", MIN_SPLIT_LEN)
    if cores:
        want = num_splits or npu_splits(B * Hq, cores, cdiv(L_max, min_len))
    else:
        want = num_splits or min(cdiv(target, B * Hq), cdiv(L_max, min_len))
    return _with_split(cfg, L_max, want)


def _with_split(cfg: dict, L_max: int, want: int) -> dict:
    block_n = cfg["BLOCK_N"]
    split_len = max(block_n, cdiv(cdiv(max(L_max, 1), max(1, want)), block_n) * block_n)
    return {**cfg, "SPLIT_LEN": split_len, "NUM_SPLITS": max(1, cdiv(L_max, split_len))}


def sparse_paged_config(B: int, Hq: int, L_max: int, D: int, dtype: torch.dtype, interpret: bool,
                        num_splits: Optional[int] = None, magicpig: bool = False,
                        ascend: bool = False, cores: int = NPU_VECTOR_CORES) -> dict:
    """The default tiles, launch meta and list split: BLOCK_N, BLOCK_D, num_warps, num_stages,
    SPLIT_LEN, NUM_SPLITS (splits cover [0, L_max); those past a row's nnz are empty and merge
    as -inf). (H200, bench cache, kept ratio 0.05: ~1.6 TB/s of gathered K/V rows plain,
    ~1.0 TB/s MagicPIG.)"""
    if interpret:
        block_n = min(128, max(16, next_pow2(L_max)))
        block_d = max(16, next_pow2(D))
        # MagicPIG runs its GPU default's loop (per-slot softmax, gathers in flight ahead).
        cfg = dict(BLOCK_N=block_n, BLOCK_D=block_d, num_warps=4, num_stages=1,
                   D_CHUNK=d_chunk(block_d, magicpig, ascend, interpret=True),
                   SLOT_SOFTMAX=magicpig and not ascend, PREFETCH=magicpig and not ascend)
        return _with_split(cfg, L_max, cdiv(L_max, 512) if num_splits is None else num_splits)
    return list_split(sparse_paged_candidates(D, dtype, magicpig, ascend, cores)[0], B, Hq, L_max,
                      num_splits)


def sparse_kernel_plan(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                       kv_page_indices: torch.Tensor, sparse_ind: torch.Tensor,
                       sparse_nnz: torch.Tensor, out: torch.Tensor, lse: Optional[torch.Tensor], *,
                       layout: str, scale: float, K: Optional[torch.Tensor] = None,
                       L: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                       interpret: Optional[bool] = None, config: Optional[dict] = None,
                       rows: Optional[tuple] = None) -> LaunchPlan:
    """Shared planner of sparse_paged_decode (K, L None) and magicpig_decode (K, L given).

    Portable path: runs the host pre-pass (``_paged.sparse_rows``) that makes the int32 physical
    row ids the kernel reads (``rows``: its result, when the caller ran it already). CUDA fast path (``_checks.use_fast_path``): the kernel looks the
    pages up itself (``LOOKUP``). With more than one split it allocates fp32 scratch and chains
    the merge.
    """
    B, Hq, D = q.shape
    _, Hkv, page_size, _ = kv_dims(kv_cache, layout)
    stride_page, stride_kv, stride_head, stride_slot = kv_strides(kv_cache, layout)
    L_max = sparse_ind.shape[2]
    magicpig = K is not None
    interpret = is_interpret() if interpret is None else interpret
    lookup = use_fast_path(q)
    ascend = on_ascend(q)
    cores = npu_cores(q, vector=True) if ascend else NPU_VECTOR_CORES
    tuning = "default"
    if interpret and config is None:
        cfg = sparse_paged_config(B, Hq, L_max, D, q.dtype, True, num_splits, magicpig)
    else:
        if config is None:
            config, tuning = pick("magicpig_decode" if magicpig else "sparse_paged_decode",
                                  (B * Hq, next_pow2(max(L_max, 1)), D, str(q.dtype), int(lookup),
                                   num_splits or 0),
                                  lambda: sparse_paged_candidates(D, q.dtype, magicpig, ascend,
                                                                  cores),
                                  lambda c: sparse_kernel_plan(q, kv_cache, kv_page_indptr,
                                                               kv_page_indices, sparse_ind, sparse_nnz,
                                                               out, lse, layout=layout, scale=scale,
                                                               K=K, L=L, num_splits=num_splits,
                                                               interpret=False, config=c, rows=rows),
                                  q.device, live=is_live(q))
        cfg = list_split(config, B, Hq, L_max, num_splits)
    splits = cfg.pop("NUM_SPLITS")
    split_len = cfg.pop("SPLIT_LEN")
    cfg.setdefault("D_CHUNK", d_chunk(cfg["BLOCK_D"], magicpig, ascend))
    if lookup:
        rows, unit = sparse_ind, 1
    elif rows is not None:
        rows, unit = rows
    else:
        rows, unit = sparse_rows(kv_cache, layout, kv_page_indptr, kv_page_indices, sparse_ind,
                                 sparse_nnz)
    return_lse = lse is not None
    fused = lookup and splits > 1
    o_dst, l_dst, write_lse, o_strides, l_strides = split_outputs(out, lse, splits, B, Hq, D)
    # Fast path: the last split program of each row merges (zeroed tickets, left at zero).
    counter = torch.zeros(B * Hq, dtype=torch.int32, device=q.device) if fused else out
    k_arg, l_arg = (K, L) if magicpig else (q, q)  # never read without MAGICPIG
    k_strides = (K.stride(0), K.stride(1), L.stride(0), L.stride(1)) if magicpig else (0, 0, 0, 0)
    args = (q, kv_cache, rows, sparse_nnz, k_arg, l_arg, o_dst, l_dst, kv_page_indptr,
            kv_page_indices, out, lse if return_lse else out, counter,
            q.stride(0), q.stride(1),
            stride_kv, stride_head, unit, stride_page, stride_slot,
            rows.stride(0), rows.stride(1),
            sparse_nnz.stride(0), sparse_nnz.stride(1),
            *k_strides,
            *o_strides, *l_strides,
            out.stride(0), out.stride(1),
            *((lse.stride(0), lse.stride(1)) if return_lse else (0, 0)),
            Hq, D, Hq // Hkv, split_len, splits, float(scale) * LOG2E)
    g = plan_grid((B * Hq, splits), q, vector=True)
    merge = merge_meta(splits, 1, cfg["BLOCK_D"], cfg["num_warps"]) if fused else NO_MERGE
    meta = dict(MAGICPIG=magicpig, RETURN_LSE=write_lse, LOOKUP=lookup, FUSED_MERGE=fused,
                RETURN_LSE_OUT=fused and return_lse, PAGE_SIZE=page_size,
                BLOCK_SPLITS=merge["BLOCK_SPLITS"], SPLIT_CHUNK=merge["SPLIT_CHUNK"],
                PERSISTENT=g.persistent, **cfg)
    meta.setdefault("SLOT_SOFTMAX", False)
    meta.setdefault("PREFETCH", False)
    plan = LaunchPlan(kernel=_sparse_paged_fwd, grid=g.grid,
                      args=args + (B * Hq, g.n_work, g.n_programs), meta=meta, tuning=tuning,
                      workspace=scratch_of(out, o_dst, l_dst) + (((counter, True),) if fused else ()))
    if splits > 1 and not fused:
        plan.then = merge_plan(o_dst, l_dst, out, lse if return_lse else None, cfg["BLOCK_D"])
    return plan


def sparse_paged_decode_plan(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                             kv_page_indices: torch.Tensor, sparse_ind: torch.Tensor,
                             sparse_nnz: torch.Tensor, out: torch.Tensor,
                             lse: Optional[torch.Tensor], *, layout: str, scale: float,
                             num_splits: Optional[int] = None,
                             interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch chain for validated inputs and allocated outputs (``lse`` None: no LSE)."""
    return sparse_kernel_plan(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                              out, lse, layout=layout, scale=scale, num_splits=num_splits,
                              interpret=interpret)


def validate_sparse_paged(fn: str, q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind,
                          sparse_nnz, kv_last_page_len, layout, scale, return_lse, out, lse,
                          num_splits, check_indices, extra_inputs: Optional[dict] = None,
                          extra_checks=None) -> float:
    """The checks of sparse_paged_decode / magicpig_decode that read no device memory; returns
    the scale. ``extra_checks(B, Hq)`` runs the family's own structural checks. The contents
    are ``check_sparse_paged_values``'s (after these)."""
    B, Hq, D = check_q(fn, q, MAX_HEAD_DIM)
    check_layout(fn, layout)
    num_pages, Hkv, page_size = check_paged_kv(fn, q, kv_cache, layout)
    check_gqa(fn, Hq, Hkv, kv_name="kv_cache")
    check_row_ids_fit(fn, kv_cache, layout)
    check_flag(fn, "return_lse", return_lse)
    check_flag(fn, "check_indices", check_indices)
    scale = check_scale(fn, scale, D)
    if num_splits is not None:
        check_int_range(fn, "num_splits", num_splits, 1, 2**31 - 1)
    check_page_table(fn, B, q.device, kv_page_indptr, kv_page_indices, kv_last_page_len)
    check_sparse_indices(fn, B, Hq, q.device, sparse_ind, sparse_nnz)
    if extra_checks is not None:
        extra_checks(B, Hq)
    inputs = _inputs(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                     kv_last_page_len, extra_inputs)
    check_outputs(fn, out, lse, return_lse, B, Hq, D, q, inputs)
    check_launchable(fn, "q", q)
    return scale


def _inputs(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, kv_last_page_len,
            extra_inputs) -> dict:
    return {"q": q, "kv_cache": kv_cache, "kv_page_indptr": kv_page_indptr,
            "kv_page_indices": kv_page_indices, "sparse_ind": sparse_ind,
            "sparse_nnz": sparse_nnz, "kv_last_page_len": kv_last_page_len, **(extra_inputs or {})}


def check_sparse_paged_values(fn: str, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind,
                              sparse_nnz, kv_last_page_len, layout, extra_values=None) -> None:
    """Data-dependent checks: one device sync. ``extra_values()`` returns (0-d statistics, a
    judge of their values, a function raising the precise message) for the family's own data
    checks, which join that sync."""
    num_pages, _, page_size, _ = kv_dims(kv_cache, layout)
    stats, judge, raise_first = extra_values() if extra_values is not None else ((), None, None)
    check_index_values(fn, num_pages, page_size, kv_page_indptr, kv_page_indices,
                       kv_last_page_len, sparse_ind, sparse_nnz, extra_stats=stats,
                       extra_ok=judge, extra_raise=raise_first)


def run_sparse_paged(fn: str, cache: CallCache, q, kv_cache, kv_page_indptr, kv_page_indices,
                     sparse_ind, sparse_nnz, K, L, *, layout, kv_last_page_len, scale, return_lse,
                     out, lse, num_splits, check_indices, extra_checks=None, extra_values=None,
                     launcher=None) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The call path shared by sparse_paged_decode (K, L None) and magicpig_decode: validation
    (skipped for a key validated before, but for aliasing), the data checks when asked, the
    portable path's host pre-pass, and the launch (bound plan on a repeat call)."""
    magicpig = K is not None
    extra_inputs = {"K": K, "L": L} if magicpig else None
    tensors_in = (q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                  kv_last_page_len) + ((K, L) if magicpig else ())
    key = cache.key(tensors_in[:6] + tensors_in[7:], (kv_last_page_len, out, lse),
                    (layout, scale, return_lse, num_splits, check_indices))
    slot = cache.lookup(key)
    if slot is None:
        validate_sparse_paged(fn, q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind,
                              sparse_nnz, kv_last_page_len, layout, scale, return_lse, out, lse,
                              num_splits, check_indices, extra_inputs, extra_checks)
        slot = cache.validated(key)
    elif out is not None or lse is not None:
        check_out_lse_aliases(fn, out, lse, _inputs(q, kv_cache, kv_page_indptr, kv_page_indices,
                                                     sparse_ind, sparse_nnz, kv_last_page_len,
                                                     extra_inputs))
    if check_indices:
        check_sparse_paged_values(fn, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind,
                                  sparse_nnz, kv_last_page_len, layout, extra_values)
    B, Hq, D = q.shape
    if out is None:
        out = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    if return_lse and lse is None:
        lse = torch.empty((B, Hq), dtype=torch.float32, device=q.device)
    if not return_lse:
        lse = None
    rows = None
    if not use_fast_path(q):  # the portable kernel reads physical row ids made per call
        rows = sparse_rows(kv_cache, layout, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz)
    tensors = tensors_in + (out, lse, None if rows is None else rows[0])
    bound = None if slot is None else slot.get(())
    if bound is not None:
        bound.launch(tensors, launcher or launch)
        return out, lse
    plan = sparse_kernel_plan(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                              out, lse, layout=layout, scale=check_scale(fn, scale, D), K=K, L=L,
                              num_splits=num_splits, rows=rows)
    cache.run(slot, (), plan, tensors, is_live(q), launcher or launch)
    return out, lse


def sparse_paged_decode(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                        kv_page_indices: torch.Tensor, sparse_ind: torch.Tensor,
                        sparse_nnz: torch.Tensor, *, layout: str = "HND",
                        kv_last_page_len: Optional[torch.Tensor] = None,
                        scale: Optional[float] = None, return_lse: bool = False,
                        out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                        num_splits: Optional[int] = None, check_indices: bool = True,
                        ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Decode over selected tokens of a paged KV cache: q [B, Hq, D] -> (o [B, Hq, D], lse [B, Hq] | None).

    Cache and page table as in ``paged_decode``. sparse_ind [B, Hq, L_max] int32 holds logical
    token positions of sequence b (first sparse_nnz[b, h] entries valid; the rest, -1 padding or
    anything else, is ignored); unsorted and duplicated entries are fine (multiset softmax).
    Valid positions: [0, L_b) with ``kv_last_page_len``, else [0, page_size * pages_b).
    nnz == 0: o = 0, lse = -inf. ``num_splits`` (optional) asks for that many splits of the list;
    ``check_indices=False`` skips the data-dependent checks.
    """
    return run_sparse_paged("sparse_paged_decode", _CALLS, q, kv_cache, kv_page_indptr,
                            kv_page_indices, sparse_ind, sparse_nnz, None, None, layout=layout,
                            kv_last_page_len=kv_last_page_len, scale=scale, return_lse=return_lse,
                            out=out, lse=lse, num_splits=num_splits, check_indices=check_indices,
                            launcher=launch)


_CALLS = CallCache("sparse_paged_decode")
