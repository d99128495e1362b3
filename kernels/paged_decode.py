"""Paged-KV decode attention (docs/contract.md section 4) in Triton, FlashInfer's CSR page table.

One program per (batch, KV head, page split) packs the G = Hq / Hkv query heads of that KV head as
the rows of ``tl.dot`` (padded to >= 16, masked), so K/V pages are read once per group. The
program walks its pages with one scalar page-id load per page, then the page in BLOCK_N-slot
chunks; the valid-token mask is arithmetic (``p * PAGE_SIZE + slot < seq_len``), never an ``if``
inside the loop. Long sequences are split over pages; each split writes a normalised partial
output and its LSE, and ``_split.merge_plan`` combines them. Zero-page sequences (and empty
splits) give o = 0, lse = -inf. That is the portable kernel (NPU, interpreter, compile-only). On
Ascend its tiles run on a persistent grid of one program per AI core (``kernels._grid``), and the
page split aims at that core count.

On CUDA (``_checks.use_fast_path``) ``_paged_decode_flat`` runs instead: one flat token loop with
a per-token page lookup, splits sized without a device sync, merged in-kernel by the last split.

``paged_decode`` validates, asks ``paged_decode_plan`` for the launch (chain), then launches it.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._checks import (cdiv, DOT_INPUT_PRECISION, check_flag, check_gqa, check_int_range, check_launchable,
                      check_out_lse_aliases, check_scale, is_interpret, is_live, launch, LaunchPlan,
                      next_pow2, on_ascend, use_fast_path)
from ._tune import pick
from ._grid import npu_cores, npu_splits, plan_grid
from ._split import merge_in_last_program, merge_meta, merge_plan, NO_MERGE, scratch_of, split_outputs
from ._softmax import online_softmax_fold
from ._fp8 import FP8_DTYPE, NOT_FP8, call_scales, check_kv_scales, f16_row_scale, fp8_mode, kernel_view, load_kv
from ._paged import (check_index_values, check_layout, check_outputs, check_page_table,
                     check_paged_kv, check_q, kv_dims, kv_strides)

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256
# H100: 132 SMs; split the pages until (batch x KV heads x splits) gives about two waves.
TARGET_PROGRAMS = 256
MIN_SPLIT_TOKENS = 512
#: BLOCK_N x BLOCK_D of an fp8 cache's tile on Ascend (see paged_decode_config).
FP8_NPU_TILE = 4096


@triton.jit
def _guarded_step(q, k, v, tok_ok, m_i, l_i, acc, qk_scale, DOT_PRECISION: tl.constexpr):
    """One chunk of keys into the running (max, sum, acc) of the G packed query rows; a fully
    masked chunk never produces NaN (``online_softmax_fold``'s guard)."""
    s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale
    s = tl.where(tok_ok[None, :], s, float("-inf"))
    return online_softmax_fold(s, v, m_i, l_i, acc, DOT_PRECISION)


@triton.jit
def _store_split(O, LSE, b64, heads, split, offs_d, io_mask, g_ok, acc, m_i, l_i,
                 stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh, stride_lsplit,
                 RETURN_LSE: tl.constexpr):
    """A split's normalised output and natural-log LSE; nothing seen: o = 0, lse = -inf."""
    nonempty = l_i > 0
    o = acc / tl.where(nonempty, l_i, 1.0)[:, None]
    tl.store(O + b64 * stride_ob + heads[:, None] * stride_oh + split * stride_osplit + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=io_mask)
    if RETURN_LSE:
        lse = tl.where(nonempty, (m_i + tl.log2(tl.where(nonempty, l_i, 1.0))) * 0.6931471805599453,
                       float("-inf"))
        tl.store(LSE + b64 * stride_lb + heads * stride_lh + split * stride_lsplit, lse, mask=g_ok)


@triton.jit
def _paged_decode_tile(
    Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
    stride_qb, stride_qh,
    stride_page, stride_kv, stride_head, stride_slot,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    Hkv, D, G, PAGES_PER_SPLIT, qk_scale, v_scale, pid_bk, split,
    PAGE_SIZE: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, KV_FP8: tl.constexpr,
):
    """One page split of one (batch, KV head): pid_bk is batch * Hkv + KV head. An fp8 cache
    (KV_FP8, kernels/_fp8.py) is decoded to q's dtype unscaled: k_scale is folded into qk_scale
    on the host, v_scale multiplies the accumulator once."""
    b = pid_bk // Hkv
    hk = (pid_bk % Hkv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    heads = hk * G + offs_g
    d_ok = offs_d[None, :] < D
    io_mask = (offs_g[:, None] < G) & d_ok
    b64 = b.to(tl.int64)

    # Padding rows (g >= G) load zeros: finite scores, never stored.
    q = tl.load(Q + b64 * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=io_mask,
                other=0.0)

    page_lo = tl.load(PAGE_INDPTR + b)
    n_pages = tl.load(PAGE_INDPTR + b + 1) - page_lo
    # Only read when the sequence has pages (the loop below is empty otherwise).
    seq_len = (n_pages - 1) * PAGE_SIZE + tl.load(LAST_LEN + b)
    p_start = split * PAGES_PER_SPLIT
    p_end = tl.minimum(p_start + PAGES_PER_SPLIT, n_pages)

    # Scores in base 2 (qk_scale has log2(e) folded in); see _guarded_step for the -inf guard.
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for p in range(p_start, p_end):
        # Scalar page-id load per page; int64 base: pages * 2 * Hkv * page_size * D can pass 2**31.
        page = tl.load(PAGE_INDICES + page_lo + p).to(tl.int64)
        k_base = KV + page * stride_page + hk * stride_head
        for c in range(0, PAGE_SIZE, BLOCK_N):
            slot = c + offs_n
            tok_ok = (slot < PAGE_SIZE) & (p * PAGE_SIZE + slot < seq_len)
            kv_mask = tok_ok[:, None] & d_ok
            kv_off = slot[:, None] * stride_slot + offs_d[None, :]
            k = load_kv(k_base + kv_off, kv_mask, KV_FP8, q.dtype)
            v = load_kv(k_base + stride_kv + kv_off, kv_mask, KV_FP8, q.dtype)
            m_i, l_i, acc = _guarded_step(q, k, v, tok_ok, m_i, l_i, acc, qk_scale, DOT_PRECISION)

    if KV_FP8 != 0:
        acc = acc * v_scale
    _store_split(O, LSE, b64, heads, split, offs_d, io_mask, offs_g < G, acc, m_i, l_i,
                 stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh, stride_lsplit, RETURN_LSE)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hkv", "G", "PAGES_PER_SPLIT", "stride_lb", "stride_lh", "stride_lsplit",
                               "n_bk", "n_work", "n_programs"])
def _paged_decode_fwd(
    Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
    stride_qb, stride_qh,
    stride_page, stride_kv, stride_head, stride_slot,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    Hkv, D, G, PAGES_PER_SPLIT, qk_scale, v_scale, n_bk, n_work, n_programs,
    PAGE_SIZE: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PERSISTENT: tl.constexpr, KV_FP8: tl.constexpr = 0,
):
    if PERSISTENT:
        # kernels/_grid.py. (batch, KV head) is the fast index: every program takes the first
        # splits, always full, before the late ones, which short sequences leave empty.
        for work in range(tl.program_id(0), n_work, n_programs):
            _paged_decode_tile(Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
                               stride_qb, stride_qh, stride_page, stride_kv, stride_head,
                               stride_slot, stride_ob, stride_oh, stride_osplit,
                               stride_lb, stride_lh, stride_lsplit,
                               Hkv, D, G, PAGES_PER_SPLIT, qk_scale, v_scale, work % n_bk,
                               work // n_bk, PAGE_SIZE, RETURN_LSE, DOT_PRECISION, BLOCK_G, BLOCK_N,
                               BLOCK_D, KV_FP8)
    else:
        _paged_decode_tile(Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
                           stride_qb, stride_qh, stride_page, stride_kv, stride_head,
                           stride_slot, stride_ob, stride_oh, stride_osplit,
                           stride_lb, stride_lh, stride_lsplit,
                           Hkv, D, G, PAGES_PER_SPLIT, qk_scale, v_scale, tl.program_id(0),
                           tl.program_id(1), PAGE_SIZE, RETURN_LSE, DOT_PRECISION, BLOCK_G, BLOCK_N,
                           BLOCK_D, KV_FP8)


@triton.jit
def _paged_decode_flat_tile(
    Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
    stride_qb, stride_qh,
    stride_page, stride_kv, stride_head, stride_slot,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    Hkv, D, G, TOKENS_PER_SPLIT, qk_scale, v_scale,
    OUT, LSE_OUT, COUNTER, stride_outb, stride_outh, stride_lob, stride_loh, NUM_SPLITS,
    pid_bk, split,
    PAGE_SIZE: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    FUSED_MERGE: tl.constexpr, RETURN_LSE_OUT: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_GM: tl.constexpr, BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr,
    KV_FP8: tl.constexpr,
):
    """One token split of one (batch, KV head) for ``_paged_decode_flat``."""
    b = pid_bk // Hkv
    hk = (pid_bk % Hkv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    heads = hk * G + offs_g
    d_ok = offs_d[None, :] < D
    io_mask = (offs_g[:, None] < G) & d_ok
    b64 = b.to(tl.int64)
    q = tl.load(Q + b64 * stride_qb + heads[:, None] * stride_qh + offs_d[None, :], mask=io_mask,
                other=0.0)
    qk_row = tl.full([BLOCK_G], 1.0, tl.float32) * qk_scale
    if KV_FP8 == 1:
        if q.dtype == tl.bfloat16:  # the cache's hardware cast goes to fp16 (f16_row_scale)
            down, up = f16_row_scale(tl.max(tl.abs(q.to(tl.float32)), axis=1))
            q = (q.to(tl.float32) * down[:, None]).to(tl.float16)
            qk_row = qk_row * up
    page_lo = tl.load(PAGE_INDPTR + b)
    n_pages = tl.load(PAGE_INDPTR + b + 1) - page_lo
    seq_len = tl.where(n_pages > 0, (n_pages - 1) * PAGE_SIZE + tl.load(LAST_LEN + b), 0)
    t_start = split * TOKENS_PER_SPLIT
    t_end = tl.minimum(t_start + TOKENS_PER_SPLIT, seq_len)
    kv_base = KV + hk * stride_head
    m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
    for n in range(t_start, t_end, BLOCK_N):
        t = n + offs_n
        tok_ok = t < t_end
        page = tl.load(PAGE_INDICES + page_lo + t // PAGE_SIZE, mask=tok_ok, other=0).to(tl.int64)
        row = page * stride_page + (t % PAGE_SIZE) * stride_slot
        kv_mask = tok_ok[:, None] & d_ok
        k = load_kv(kv_base + row[:, None] + offs_d[None, :], kv_mask, KV_FP8, q.dtype)
        v = load_kv(kv_base + stride_kv + row[:, None] + offs_d[None, :], kv_mask, KV_FP8, q.dtype)
        if KV_FP8 == 1 and BLOCK_D > 128:
            # A no-op select (masked slots read 0) that keeps Triton from moving the cast past the
            # shared-memory read into p @ v's operand layout, where an 8-bit tile is read one byte
            # per instruction (sm_90 has no transposing 8-bit ldmatrix); converted first, it goes
            # through a 16-bit transposing read. Measured on an H200: 429 us against 460 at the
            # D=256 bench shape, but 324 against 294 at D=128 (docs/hardware-log.md).
            v = tl.where(tok_ok[:, None], v, 0.0)
        m_i, l_i, acc = _guarded_step(q, k, v, tok_ok, m_i, l_i, acc, qk_row[:, None], DOT_PRECISION)
    if KV_FP8 != 0:
        acc = acc * v_scale
    # An empty split (t_start >= t_end) leaves l_i = 0: it is stored as o = 0, lse = -inf.
    _store_split(O, LSE, b64, heads, split, offs_d, io_mask, offs_g < G, acc, m_i, l_i,
                 stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh, stride_lsplit, RETURN_LSE)
    if FUSED_MERGE:
        merge_in_last_program(O, LSE, OUT, LSE_OUT, COUNTER + pid_bk, b64, hk * G, G, D,
                              stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh,
                              stride_lsplit, stride_outb, stride_outh, stride_lob, stride_loh,
                              NUM_SPLITS, RETURN_LSE_OUT, BLOCK_GM, BLOCK_SPLITS, SPLIT_CHUNK,
                              BLOCK_D)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=[
    "Hkv", "G", "TOKENS_PER_SPLIT", "NUM_SPLITS", "stride_lb", "stride_lh", "stride_lsplit",
    "n_bk", "n_work", "n_programs",
])
def _paged_decode_flat(
    Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
    stride_qb, stride_qh,
    stride_page, stride_kv, stride_head, stride_slot,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    Hkv, D, G, TOKENS_PER_SPLIT, qk_scale, v_scale,
    OUT, LSE_OUT, COUNTER, stride_outb, stride_outh, stride_lob, stride_loh, NUM_SPLITS,
    n_bk, n_work, n_programs,
    PAGE_SIZE: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    FUSED_MERGE: tl.constexpr, RETURN_LSE_OUT: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_GM: tl.constexpr, BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr,
    PERSISTENT: tl.constexpr, KV_FP8: tl.constexpr = 0,
):
    """CUDA fast path: one flat loop over the split's tokens, BLOCK_N at a time whatever the page
    size; each token's page id is gathered (``t // PAGE_SIZE``, a shift) and its K/V row read
    from that page. Small pages then cost no more steps than big ones. The vector page lookup is
    the construct triton-ascend rejects ("cannot div 0"), so the portable kernel above stays.
    The persistent loop is only ever forced (``persistent_programs``); the fused merge never
    waits on its ticket, so a program may take several splits in turn."""
    if PERSISTENT:
        for work in range(tl.program_id(0), n_work, n_programs):
            _paged_decode_flat_tile(Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
                                    stride_qb, stride_qh, stride_page, stride_kv, stride_head,
                                    stride_slot, stride_ob, stride_oh, stride_osplit,
                                    stride_lb, stride_lh, stride_lsplit,
                                    Hkv, D, G, TOKENS_PER_SPLIT, qk_scale, v_scale,
                                    OUT, LSE_OUT, COUNTER, stride_outb, stride_outh, stride_lob,
                                    stride_loh, NUM_SPLITS, work % n_bk, work // n_bk,
                                    PAGE_SIZE, RETURN_LSE, DOT_PRECISION, FUSED_MERGE,
                                    RETURN_LSE_OUT, BLOCK_G, BLOCK_N, BLOCK_D,
                                    BLOCK_GM, BLOCK_SPLITS, SPLIT_CHUNK, KV_FP8)
    else:
        _paged_decode_flat_tile(Q, KV, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, O, LSE,
                                stride_qb, stride_qh, stride_page, stride_kv, stride_head,
                                stride_slot, stride_ob, stride_oh, stride_osplit,
                                stride_lb, stride_lh, stride_lsplit,
                                Hkv, D, G, TOKENS_PER_SPLIT, qk_scale, v_scale,
                                OUT, LSE_OUT, COUNTER, stride_outb, stride_outh, stride_lob,
                                stride_loh, NUM_SPLITS, tl.program_id(0), tl.program_id(1),
                                PAGE_SIZE, RETURN_LSE, DOT_PRECISION, FUSED_MERGE,
                                RETURN_LSE_OUT, BLOCK_G, BLOCK_N, BLOCK_D,
                                BLOCK_GM, BLOCK_SPLITS, SPLIT_CHUNK, KV_FP8)


#: Fast path (flat token loop) configs: (BLOCK_N, num_warps, num_stages, target programs), 16-bit
#: dtypes; the first is the default. As dense decode: unsplit when B x Hkv fills the GPU.
_FLAT_TILES = [(64, 4, 3, 132), (128, 4, 3, 132), (64, 4, 2, 264), (32, 4, 3, 264), (64, 8, 3, 132),
               (32, 4, 3, 528), (64, 4, 5, 132)]
#: An fp8 cache first tries twice the tokens a tile (the same bytes) on twice the programs: with
#: the 16-bit default, 4-warp programs stalled on the in-register conversion (ncu on an H200:
#: 6.8% occupancy, fixed-latency stalls), 1016 us at the P256 D256 bench shape against 462 with
#: the first tile below (docs/hardware-log.md). Its default is that tile.
_FP8_FLAT_TILES = [(128, 4, 2, 264), (128, 8, 3, 264), (64, 8, 2, 528), (64, 4, 3, 528), (128, 8, 2, 528)]


def flat_candidates(D: int, dtype: torch.dtype, kv_fp8: bool = False) -> list[dict]:
    shrink = max(1, max(16, next_pow2(D)) // 128) * (1 if dtype.itemsize == 2 else 2)
    tiles = (_FP8_FLAT_TILES + _FLAT_TILES) if kv_fp8 else _FLAT_TILES
    return [dict(BLOCK_N=max(16, block_n // shrink), num_warps=warps, num_stages=stages, TARGET=target)
            for block_n, warps, stages, target in tiles]


def flat_split(cfg: dict, B: int, Hkv: int, typical: int, longest: int,
               num_splits: Optional[int]) -> dict:
    """The tiles plus TOKENS_PER_SPLIT (a multiple of BLOCK_N, sized for a ``typical`` sequence)
    and NUM_SPLITS covering the ``longest`` one; shorter ones leave their last splits empty
    (merged as -inf)."""
    cfg = dict(cfg)
    target = cfg.pop("TARGET", 0)
    want = num_splits or max(1, min(target // (B * Hkv), cdiv(typical, MIN_SPLIT_TOKENS)))
    block_n = cfg["BLOCK_N"]
    per = max(block_n, cdiv(cdiv(max(typical, 1), want), block_n) * block_n)
    return {**cfg, "TOKENS_PER_SPLIT": per, "NUM_SPLITS": max(1, cdiv(longest, per))}


def paged_decode_config(B: int, Hkv: int, G: int, D: int, page_size: int, max_pages: int,
                        dtype: torch.dtype, interpret: bool, num_splits: Optional[int] = None,
                        cores: Optional[int] = None, kv_fp8: bool = False) -> dict:
    """Tiles, launch meta and the page split: BLOCK_G, BLOCK_N, BLOCK_D, num_warps, num_stages,
    PAGES_PER_SPLIT, NUM_SPLITS. ``cores``: planning for Ascend's persistent grid of that many
    programs (``_grid.npu_splits``) rather than TARGET_PROGRAMS.

    BLOCK_N is the chunk of one page handled per step (>= 16 for ``tl.dot``; a page smaller than
    16 slots leaves the rest of the chunk masked).
    """
    block_d = max(16, next_pow2(D))
    block_g = max(16, next_pow2(G))  # tl.dot needs M >= 16
    page_n = max(16, next_pow2(page_size))
    if interpret:
        # Few, large programs: the interpreter's cost grows with program and step count.
        block_n, warps, stages = min(128, page_n), 4, 1
        auto_splits = cdiv(max_pages * page_size, MIN_SPLIT_TOKENS)
    else:
        # H200, bench shape (fp16, D=256, page 256): BLOCK_N 64, 4 warps, 2 stages reads K/V at
        # ~4.2 TB/s; BLOCK_N 32 with 2 stages ~3.7.
        if dtype.itemsize == 2:
            block_n, warps, stages = (64, 4, 3) if block_d <= 128 else (64, 4, 2)
        else:
            block_n, warps, stages = (32, 4, 3) if block_d <= 128 else (32, 4, 2)
        block_n = min(block_n, page_n)
        if kv_fp8 and cores:
            # The byte decode's int32 temporaries on Ascend (triton-ascend 3.2.0, 910B2, pages of
            # 256): BLOCK_N 64 took 95% of the UB at D=128 and overflowed it (176%) at D=256.
            block_n = max(16, min(block_n, FP8_NPU_TILE // block_d))
        most = cdiv(max_pages * page_size, MIN_SPLIT_TOKENS)
        if cores:
            auto_splits = npu_splits(B * Hkv, cores, most)
        else:
            auto_splits = min(cdiv(TARGET_PROGRAMS, B * Hkv), most)
    want = max(1, auto_splits if num_splits is None else num_splits)
    pages_per_split = max(1, cdiv(max_pages, want))
    splits = max(1, cdiv(max_pages, pages_per_split))
    return dict(BLOCK_G=block_g, BLOCK_N=block_n, BLOCK_D=block_d, num_warps=warps,
                num_stages=stages, PAGES_PER_SPLIT=pages_per_split, NUM_SPLITS=splits)


def paged_decode_plan(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                      kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor,
                      out: torch.Tensor, lse: Optional[torch.Tensor], *, layout: str, scale: float,
                      num_splits: Optional[int] = None, max_pages: Optional[int] = None,
                      interpret: Optional[bool] = None, config: Optional[dict] = None,
                      k_scale: float = 1.0, v_scale: float = 1.0,
                      kv_mode: Optional[int] = None) -> LaunchPlan:
    """The launch chain for validated inputs and allocated outputs (``lse`` None: no LSE).

    An fp8 cache (``torch.float8_e4m3fn``, or its ``uint8`` byte view with ``kv_mode=BITS``)
    takes the fp32 scales ``k_scale``/``v_scale``; ``kv_mode`` (kernels/_fp8.py) defaults to
    ``fp8_mode(kv_cache)``.

    ``max_pages`` (the most pages of any sequence) sizes the page split; if None it is read from
    ``kv_page_indptr`` (one device sync). With more than one split the plan allocates fp32
    scratch and its ``then`` is the merge launch. On CUDA (``_checks.use_fast_path``) the plan is
    the flat-token kernel with tuned tiles; elsewhere the portable page-walking kernel. A given
    ``config`` (``paged_decode_config``'s keys) runs the portable kernel with it.
    """
    B, Hq, D = q.shape
    _, Hkv, page_size, _ = kv_dims(kv_cache, layout)
    G = Hq // Hkv
    interpret = is_interpret() if interpret is None else interpret
    if kv_mode is None:
        kv_mode = fp8_mode(kv_cache)
        kv_cache = kernel_view(kv_cache, kv_mode)
    fp8 = dict(k_scale=k_scale, v_scale=v_scale, kv_mode=kv_mode)
    if use_fast_path(q) and config is None:
        return _flat_plan(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, out, lse,
                          layout=layout, scale=scale, num_splits=num_splits, max_pages=max_pages,
                          **fp8)
    if max_pages is None:
        max_pages = max(0, int((kv_page_indptr[1:] - kv_page_indptr[:-1]).max()))
    cfg = dict(config) if config is not None else paged_decode_config(
        B, Hkv, G, D, page_size, max_pages, q.dtype, interpret, num_splits,
        npu_cores(q, vector=False) if on_ascend(q) else None, kv_fp8=kv_mode != NOT_FP8)
    splits = cfg.pop("NUM_SPLITS")
    pages_per_split = cfg.pop("PAGES_PER_SPLIT")
    return _plan(_paged_decode_fwd, q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                 out, lse, layout, scale, splits, pages_per_split, cfg, "default", **fp8)


def _flat_plan(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, out, lse, *, layout,
               scale, num_splits, max_pages, config=None, k_scale=1.0, v_scale=1.0,
               kv_mode=NOT_FP8) -> LaunchPlan:
    B, Hq, D = q.shape
    _, Hkv, page_size, _ = kv_dims(kv_cache, layout)
    G = Hq // Hkv
    if max_pages is None:
        # No device sync for the longest sequence: the splits are sized for an average one and
        # cover the whole page list (exact for B = 1; extra splits of shorter sequences are
        # empty programs that exit at once, merged in-kernel).
        longest = kv_page_indices.shape[0] * page_size
        typical = cdiv(longest, B)
    else:
        longest = typical = max_pages * page_size
    tuning = "default"
    if config is None:
        # An fp8 cache is tuned apart (its key says so); a 16-bit one keeps its old key.
        config, tuning = pick("paged_decode_flat",
                              (B * Hkv, next_pow2(typical), page_size, D, G,
                               str(q.dtype), num_splits or 0) + (("fp8",) if kv_mode else ()),
                              lambda: flat_candidates(D, q.dtype, kv_mode != NOT_FP8),
                              lambda c: _flat_plan(q, kv_cache, kv_page_indptr, kv_page_indices,
                                                   kv_last_page_len, out, lse, layout=layout,
                                                   scale=scale, num_splits=num_splits,
                                                   max_pages=max_pages, config=c, k_scale=k_scale,
                                                   v_scale=v_scale, kv_mode=kv_mode),
                              q.device, live=is_live(q))
    cfg = flat_split(config, B, Hkv, typical, longest, num_splits)
    splits = cfg.pop("NUM_SPLITS")
    per = cfg.pop("TOKENS_PER_SPLIT")
    cfg.update(BLOCK_G=max(16, next_pow2(G)), BLOCK_D=max(16, next_pow2(D)))
    return _plan(_paged_decode_flat, q, kv_cache, kv_page_indptr, kv_page_indices,
                 kv_last_page_len, out, lse, layout, scale, splits, per, cfg, tuning, fused=True,
                 k_scale=k_scale, v_scale=v_scale, kv_mode=kv_mode)


def _plan(kernel, q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, out, lse, layout,
          scale, splits, per_split, cfg, tuning, fused=False, k_scale=1.0, v_scale=1.0,
          kv_mode=NOT_FP8) -> LaunchPlan:
    """``fused``: the flat kernel's extra arguments; it merges splits itself (no second launch).
    ``kv_cache`` is what the kernel reads (an fp8 cache's byte view under the bit decode)."""
    B, Hq, D = q.shape
    _, Hkv, page_size, _ = kv_dims(kv_cache, layout)
    stride_page, stride_kv, stride_head, stride_slot = kv_strides(kv_cache, layout)
    return_lse = lse is not None
    o_dst, l_dst, write_lse, o_strides, l_strides = split_outputs(out, lse, splits, B, Hq, D)
    args = (q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, o_dst, l_dst,
            q.stride(0), q.stride(1),
            stride_page, stride_kv, stride_head, stride_slot,
            *o_strides, *l_strides,
            Hkv, D, Hq // Hkv, per_split, float(scale) * LOG2E * float(k_scale), float(v_scale))
    meta = dict(PAGE_SIZE=page_size, RETURN_LSE=write_lse, DOT_PRECISION=DOT_INPUT_PRECISION,
                KV_FP8=kv_mode, **cfg)
    workspace = scratch_of(out, o_dst, l_dst)
    if fused:
        merge = splits > 1
        # Zeroed tickets, left at zero by the last program of each group (reusable workspace).
        counter = torch.zeros(B * Hkv, dtype=torch.int32, device=q.device) if merge else out
        args += (out, lse if return_lse else out, counter, out.stride(0), out.stride(1),
                 *((lse.stride(0), lse.stride(1)) if return_lse else (0, 0)), splits)
        meta.update(FUSED_MERGE=merge, RETURN_LSE_OUT=merge and return_lse,
                    **(merge_meta(splits, Hq // Hkv, cfg["BLOCK_D"], cfg["num_warps"]) if merge
                       else NO_MERGE))
        if merge:
            workspace += ((counter, True),)
    g = plan_grid((B * Hkv, splits), q, vector=False)
    meta["PERSISTENT"] = g.persistent
    plan = LaunchPlan(kernel=kernel, grid=g.grid, args=args + (B * Hkv, g.n_work, g.n_programs),
                      meta=meta, tuning=tuning, workspace=workspace)
    if splits > 1 and not fused:
        plan.then = merge_plan(o_dst, l_dst, out, lse if return_lse else None, cfg["BLOCK_D"])
    return plan


def _validate(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout, scale,
              return_lse, out, lse, num_splits, check_indices, k_scale=1.0, v_scale=1.0) -> float:
    """Every check that reads no device memory; returns the scale. The page table's contents
    are ``check_index_values``'s (after these, as before)."""
    fn = "paged_decode"
    B, Hq, D = check_q(fn, q, MAX_HEAD_DIM)
    check_layout(fn, layout)
    num_pages, Hkv, page_size = check_paged_kv(fn, q, kv_cache, layout, other_dtypes=(FP8_DTYPE,))
    check_kv_scales(fn, kv_cache, k_scale, v_scale)
    check_gqa(fn, Hq, Hkv, kv_name="kv_cache")
    check_flag(fn, "return_lse", return_lse)
    check_flag(fn, "check_indices", check_indices)
    scale = check_scale(fn, scale, D)
    if num_splits is not None:
        check_int_range(fn, "num_splits", num_splits, 1, 2**31 - 1)
    check_page_table(fn, B, q.device, kv_page_indptr, kv_page_indices, kv_last_page_len)
    inputs = {"q": q, "kv_cache": kv_cache, "kv_page_indptr": kv_page_indptr,
              "kv_page_indices": kv_page_indices, "kv_last_page_len": kv_last_page_len}
    check_outputs(fn, out, lse, return_lse, B, Hq, D, q, inputs)
    check_launchable(fn, "q", q)
    return scale


def paged_decode(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                 kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                 layout: str = "HND", scale: Optional[float] = None, return_lse: bool = False,
                 out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                 num_splits: Optional[int] = None, check_indices: bool = True,
                 k_scale: float = 1.0, v_scale: float = 1.0,
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Decode over a paged KV cache: q [B, Hq, D] -> (o [B, Hq, D], lse [B, Hq] fp32 | None).

    kv_cache [P, 2, Hkv, page_size, D] ("HND") or [P, 2, page_size, Hkv, D] ("NHD"), same dtype
    and device as q; kv_page_indptr [B+1], kv_page_indices [indptr[B]], kv_last_page_len [B], all
    int32. Sequence b has L_b = page_size * (pages_b - 1) + last_b tokens (0 with no pages: o = 0,
    lse = -inf). ``num_splits`` (optional) asks for that many page splits per sequence;
    ``check_indices=False`` skips the data-dependent checks of the page table (then, on the CUDA
    fast path, the call never waits for the device).

    kv_cache may also be ``torch.float8_e4m3fn`` (q stays fp16/bf16): K and V are then
    ``cache.to(fp32) * k_scale`` / ``* v_scale``, per-tensor fp32 scales (floats or one-element
    fp32 tensors, read once per call); 16-bit caches take only the default 1.0 (docs/fp8.md).
    """
    fn = "paged_decode"
    tensors_in = (q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len)
    k_scale, v_scale = call_scales(fn, kv_cache, k_scale, v_scale)
    key = _CALLS.key(tensors_in, (out, lse), (layout, scale, return_lse, num_splits, check_indices,
                                              k_scale, v_scale))
    slot = _CALLS.lookup(key)
    if slot is None:
        _validate(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout, scale,
                  return_lse, out, lse, num_splits, check_indices, k_scale, v_scale)
        slot = _CALLS.validated(key)
    elif out is not None or lse is not None:
        check_out_lse_aliases(fn, out, lse, dict(zip(_INPUTS, tensors_in)))
    max_pages = None
    if check_indices:  # data-dependent (reads the page table: one device sync), after the rest
        num_pages, _, page_size, _ = kv_dims(kv_cache, layout)
        max_pages = check_index_values(fn, num_pages, page_size, kv_page_indptr, kv_page_indices,
                                       kv_last_page_len)
    elif not use_fast_path(q):
        # The portable kernel sizes its page split by the longest sequence (a device sync).
        max_pages = max(0, int((kv_page_indptr[1:] - kv_page_indptr[:-1]).max()))
    B, Hq, D = q.shape
    if out is None:
        out = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    if return_lse and lse is None:
        lse = torch.empty((B, Hq), dtype=torch.float32, device=q.device)
    if not return_lse:
        lse = None
    kv_mode = fp8_mode(kv_cache)
    kv_arg = kernel_view(kv_cache, kv_mode)  # the tensor the kernel is bound to
    tensors = (q, kv_arg) + tensors_in[2:] + (out, lse)
    bound = None if slot is None else slot.get(max_pages)
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = paged_decode_plan(q, kv_arg, kv_page_indptr, kv_page_indices, kv_last_page_len, out,
                             lse, layout=layout, scale=check_scale(fn, scale, D),
                             num_splits=num_splits, max_pages=max_pages, k_scale=k_scale,
                             v_scale=v_scale, kv_mode=kv_mode)
    _CALLS.run(slot, max_pages, plan, tensors, is_live(q), launch)
    return out, lse


_INPUTS = ("q", "kv_cache", "kv_page_indptr", "kv_page_indices", "kv_last_page_len")
_CALLS = CallCache("paged_decode")
