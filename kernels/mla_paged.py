"""Multi-head latent attention over a paged latent cache (kernels.md sections 10 and 11) in Triton:
decode (``mla_paged_decode``) and chunked prefill over a prefix cache (``mla_paged_prefill``).

All H query heads read ONE latent row per token, so a program packs BLOCK_H heads as the rows of
``tl.dot`` and reads each latent row once for all of them: the scores are ``q_nope @ ckv^T +
q_pe @ kpe^T`` ([BLOCK_H, BLOCK_N]) and the output accumulates ``p @ ckv`` ([BLOCK_H, Dc]): the
ckv tile loaded for the score is the value tile too.

A program is one (query row, head block, page split). In decode a query row is a sequence; in
prefill it is one query token, whose sequence the program finds by a binary search of
``qo_indptr`` (scalar loads) and whose number of visible cache tokens (causal, aligned
bottom-right: ``m - n + i + 1``) it derives from the page table, so the kernel is the same, a
causal row simply walks fewer pages, and the host issues no torch op for the rows. Pages are walked with one scalar
page-id load per page (a vector ``t // PAGE_SIZE`` lookup does not compile on triton-ascend
3.2.0rc2) and each page in BLOCK_N-slot chunks; the valid-slot mask is arithmetic. Long rows are
split over pages and merged by ``_split.merge_plan`` (LSE-weighted).

FP8 caches (``torch.float8_e4m3fn``): compiled CUDA on sm_89+ loads them as fp8 and converts
with Triton's own cast (or, FP8_WORDS, reads int32 words and converts them by
``cvt.rn.f16x2.e4m3x2``); everywhere else (the interpreter, which decodes the NaN encodings as
+-480; sm_80, where fp8e4nv does not compile; the Ascend 910B, which has no fp8 type) the kernel
reads the cache's bytes (a uint8 view of the same memory) and decodes e4m3 with integer
arithmetic (``_e4m3_bits``). Either way the tile is converted to q's dtype (every e4m3 value is
exact in fp16 and bf16). ``k_scale`` is folded
into the score scale and ``v_scale`` applied to the normalised output, which is exactly
``fp8.to(fp32) * scale`` on each side.

On Ascend the tiles are sized for the 192 KB unified buffer (BLOCK_H = BLOCK_N = 16 against a
512-wide latent row) and the grid is persistent (``kernels._grid``), one program per AI core.
"""
from __future__ import annotations

import numbers
import math
from typing import NamedTuple, Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._checks import (DOT_INPUT_PRECISION, FLOAT_DTYPES, LaunchPlan, cdiv, check_flag, check_index_tensor,
                      check_int_range, check_launchable, check_nonempty, check_out_lse, check_out_lse_aliases,
                      check_scale, check_tensor, is_interpret, is_live, launch, next_pow2, on_ascend,
                      use_fast_path)
from ._fp8 import BITS, NOT_FP8, f16_row_scale, fp8_mode, kernel_view
from ._grid import npu_cores, npu_splits, plan_grid
from ._paged import check_index_values, check_page_table
from ._softmax import online_softmax_fold, softmax_finish
from ._split import merge_plan, split_outputs

LOG2E = 1.4426950408889634
#: Latent and rope widths: multiples of 16 (tl.dot's K granularity, 32-byte rows in fp16 for
#: Ascend), up to DeepSeek's 512 and twice its 64.
MAX_DC, MAX_DR, DIM_MULTIPLE = 512, 128, 16
FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn",) if hasattr(torch, n))
#: Split a row over pages past this many tokens (as the paged decode kernel does).
MIN_SPLIT_TOKENS = 512
#: Programs of the decode tiles resident at once on an H100 or H200: 132 SMs, two each.
TARGET_PROGRAMS = 264


@triton.jit
def _e4m3_bits(bits):
    """float8_e4m3fn bytes (loaded as uint8) -> fp16 values, exactly: s eeee mmm is
    (-1)^s (8 + m) 2^(e - 10) for e > 0 and (-1)^s m 2^-9 for e == 0, all of them fp16 numbers
    (|x| <= 480, >= 2^-9), and each product below is a small integer times a power of two built
    from its bits. 16-bit lanes: on Ascend the decode of a [16, 512] tile in 32-bit lanes took
    the unified buffer to 99.5%. The NaN encodings (e = 15, m = 7) decode to 480; the kernel only
    decodes slots that hold tokens, the rest are masked to 0 by the load."""
    b = bits.to(tl.int16)
    e = (b >> 3) & 15
    m = (b & 7).to(tl.float16)
    # 2^(max(e, 1) - 10); the int16 cast again: triton-ascend 3.2 widens int16 arithmetic with
    # constants to int32.
    pow2 = ((tl.maximum(e, 1) + 5) << 10).to(tl.int16).to(tl.float16, bitcast=True)
    mag = tl.where(e > 0, m + 8.0, m) * pow2
    return tl.where((b & 128) != 0, -mag, mag)


@triton.jit
def _e4m3_words(words, ROWS: tl.constexpr, COLS: tl.constexpr, FP8_BYTES: tl.constexpr):
    """[ROWS, COLS // 4] int32 words of four float8_e4m3fn bytes -> [ROWS, COLS] fp16. Read as
    words, the tile reaches the dot operands as a 16-bit tile: read as fp8, Triton lays the dot
    operands out for 8-bit data (kWidth 4 on sm_90) and reshuffles every fp16 register pair
    (2.4x the instructions of a bf16 cache a token). Compiled CUDA (sm_89+) converts with the
    hardware instruction, two values each; FP8_BYTES (the interpreter, where the CPU tests run
    this path) decodes each byte with ``_e4m3_bits``."""
    if FP8_BYTES:
        b0 = _e4m3_bits(words & 255)
        b1 = _e4m3_bits((words >> 8) & 255)
        b2 = _e4m3_bits((words >> 16) & 255)
        b3 = _e4m3_bits((words >> 24) & 255)
    else:
        b0, b1, b2, b3 = _e4m3_cvt(words)
    # Byte k of word j is element 4j + k: (b0, b1, b2, b3) along the last axis.
    return tl.reshape(tl.join(tl.join(b0, b2), tl.join(b1, b3)), [ROWS, COLS])


@triton.jit
def _e4m3_cvt(words):
    """The four e4m3 bytes of each int32 word as fp16 (b0 the lowest byte), by sm_89+'s
    ``cvt.rn.f16x2.e4m3x2``."""
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .b16 lo, hi;
        .reg .b32 t0, t1;
        mov.b32 {lo, hi}, $4;
        cvt.rn.f16x2.e4m3x2 t0, lo;
        cvt.rn.f16x2.e4m3x2 t1, hi;
        mov.b32 {$0, $1}, t0;
        mov.b32 {$2, $3}, t1;
        }""",
        constraints="=h,=h,=h,=h,r", args=[words], dtype=(tl.float16, tl.float16, tl.float16, tl.float16),
        is_pure=True, pack=1)


@triton.jit
def _fp16_queries(qn, qp):
    """bf16 queries as fp16 for the fp8-cache dots, each head scaled by one power of two over both
    of its parts (``f16_row_scale``: exact). Returns (qn, qp, pow2 [BLOCK_H]), the factor the
    head's scores are multiplied by to undo it."""
    amax = tl.maximum(tl.max(tl.abs(qn.to(tl.float32)), axis=1), tl.max(tl.abs(qp.to(tl.float32)), axis=1))
    down, up = f16_row_scale(amax)
    # fp32 products (exact: a power of two): the interpreter's bf16 arithmetic is not to be trusted.
    qn16 = (qn.to(tl.float32) * down[:, None]).to(tl.float16)
    qp16 = (qp.to(tl.float32) * down[:, None]).to(tl.float16)
    return qn16, qp16, up


@triton.jit
def _latent_f16(ptrs, mask, rows, FP8_BYTES: tl.constexpr):
    """An fp8 latent tile as fp16 (``rows``: its tokens' part of ``mask``). The select after the
    cast keeps Triton from moving the cast past the shared-memory load into the dot operand
    layouts, where 8-bit tiles are read one byte per instruction (sm_90 has no transposing 8-bit
    ldmatrix); a row mask costs fewer registers than the tile's own."""
    if FP8_BYTES:
        x = _e4m3_bits(tl.load(ptrs, mask=mask, other=0))
    else:
        x = tl.where(rows[:, None], tl.load(ptrs, mask=mask, other=0.0).to(tl.float16), 0.0)
    return x


@triton.jit
def _fold_keys_m(st, v, m_i, l_i, acc, DOT_PRECISION: tl.constexpr):
    """``online_softmax_fold`` with the tile's keys as rows: scores ``st`` [BLOCK_N, BLOCK_H]
    (-inf where masked), values ``v`` [BLOCK_N, Dc], accumulator [Dc, BLOCK_H]. Both dots then
    have the tile's tokens (or the latent width) as M, which sm_90's warpgroup MMA needs (M a
    multiple of 64), and read the latent tile from shared memory in both orientations; with the
    heads as M (16 rows) each warp holds all of q and the dots are the older 16-row MMA."""
    m_new = tl.maximum(m_i, tl.max(st, 0))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(st - m_use[None, :])
    l_i = l_i * alpha + tl.sum(p, 0)
    acc = acc * alpha[None, :] + tl.dot(tl.trans(v), p.to(v.dtype), input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _mla_tile(
    QN, QP, CKV, KPE, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, QO_INDPTR, O, LSE,
    stride_qnr, stride_qnh, stride_qpr, stride_qph,
    stride_cp, stride_cs, stride_kp, stride_ks,
    stride_or, stride_oh, stride_osplit, stride_lr, stride_lh, stride_lsplit,
    H, DC, DR, NUM_SPLITS, qk_scale, v_scale, n_seqs, seq_steps, row, hb, split,
    PAGE_SIZE: tl.constexpr, HAS_ROWS: tl.constexpr, CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DC: tl.constexpr, BLOCK_DR: tl.constexpr, FP8: tl.constexpr, FP8_BYTES: tl.constexpr,
    KEYS_M: tl.constexpr, FP8_WORDS: tl.constexpr,
):
    """One page split of one query row for BLOCK_H heads: the row's visible pages in NUM_SPLITS
    near-equal runs, so the host needs no sequence length. FP8: the caches are e4m3fn, read as
    fp16 tiles (FP8_BYTES: through their uint8 view, decoded in the kernel)."""
    offs_h = hb * BLOCK_H + tl.arange(0, BLOCK_H)
    offs_n = tl.arange(0, BLOCK_N)
    offs_c = tl.arange(0, BLOCK_DC)
    offs_r = tl.arange(0, BLOCK_DR)
    h_ok = offs_h < H
    c_ok = offs_c < DC
    r_ok = offs_r < DR
    if FP8_WORDS:
        offs_cw = tl.arange(0, BLOCK_DC // 4)
        offs_rw = tl.arange(0, BLOCK_DR // 4)
        cw_ok = offs_cw < DC // 4
        rw_ok = offs_rw < DR // 4
    r64 = row.to(tl.int64)
    heads = offs_h.to(tl.int64)
    # Padding heads load zeros: finite scores, never stored.
    qn = tl.load(QN + r64 * stride_qnr + heads[:, None] * stride_qnh + offs_c[None, :],
                 mask=h_ok[:, None] & c_ok[None, :], other=0.0)
    qp = tl.load(QP + r64 * stride_qpr + heads[:, None] * stride_qph + offs_r[None, :],
                 mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    if HAS_ROWS:
        # Prefill: the row's sequence is the last b in [0, n_seqs) with qo_indptr[b] <= row,
        # found in seq_steps halvings. Every probe stays inside the table whatever it holds
        # (with the data checks off, a bad qo_indptr gives a wrong sequence, never a stray read).
        seq = row * 0
        hi = seq + n_seqs - 1
        for _ in range(seq_steps):
            mid = (seq + hi + 1) // 2
            below = tl.load(QO_INDPTR + mid) <= row
            seq = tl.where(below, mid, seq)
            hi = tl.where(below, hi, mid - 1)
    else:
        seq = row
    page_lo = tl.load(PAGE_INDPTR + seq)
    n_pages = tl.load(PAGE_INDPTR + seq + 1) - page_lo
    # last_page_len of a sequence without pages is 0: limit is then <= 0 and no page is walked.
    limit = (n_pages - 1) * PAGE_SIZE + tl.load(LAST_LEN + seq)
    if HAS_ROWS:
        # m cached tokens; causal: query i of the sequence's n (rows qo_indptr[b] ..
        # qo_indptr[b + 1] - 1) sees m - n + i + 1 of them.
        limit = tl.where(n_pages > 0, limit, 0)
        if CAUSAL:
            limit = limit - tl.load(QO_INDPTR + seq + 1) + row + 1
    n_visible = tl.minimum((limit + PAGE_SIZE - 1) // PAGE_SIZE, n_pages)
    per_split = (n_visible + NUM_SPLITS - 1) // NUM_SPLITS
    p_start = split * per_split
    p_end = tl.minimum(p_start + per_split, n_visible)
    if FP8:
        if qn.dtype == tl.bfloat16:
            qn, qp, q_pow2 = _fp16_queries(qn, qp)
            qk_row = qk_scale * q_pow2
        else:
            qk_row = tl.full([BLOCK_H], 1.0, tl.float32) * qk_scale
    else:
        qk_row = tl.full([BLOCK_H], 1.0, tl.float32) * qk_scale

    # Base-2 scores: qk_scale carries scale * k_scale * log2(e).
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    if KEYS_M:
        acc = tl.zeros([BLOCK_DC, BLOCK_H], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_H, BLOCK_DC], dtype=tl.float32)
    for p in range(p_start, p_end):
        # int64: pages * page_size * (Dc + Dr) can pass 2**31.
        page = tl.load(PAGE_INDICES + page_lo + p).to(tl.int64)
        for c in range(0, PAGE_SIZE, BLOCK_N):
            slot = c + offs_n
            tok_ok = (slot < PAGE_SIZE) & (p * PAGE_SIZE + slot < limit)
            c_ptrs = CKV + page * stride_cp + slot[:, None] * stride_cs + offs_c[None, :]
            r_ptrs = KPE + page * stride_kp + slot[:, None] * stride_ks + offs_r[None, :]
            if FP8_WORDS:
                # Byte strides in whole words and 16-byte aligned bases: ``word_aligned``.
                cw = tl.load(CKV.to(tl.pointer_type(tl.int32), bitcast=True) + page * (stride_cp // 4)
                             + slot[:, None] * (stride_cs // 4) + offs_cw[None, :],
                             mask=tok_ok[:, None] & cw_ok[None, :], other=0)
                rw = tl.load(KPE.to(tl.pointer_type(tl.int32), bitcast=True) + page * (stride_kp // 4)
                             + slot[:, None] * (stride_ks // 4) + offs_rw[None, :],
                             mask=tok_ok[:, None] & rw_ok[None, :], other=0)
                kc = _e4m3_words(cw, BLOCK_N, BLOCK_DC, FP8_BYTES)
                kr = _e4m3_words(rw, BLOCK_N, BLOCK_DR, FP8_BYTES)
            elif FP8:
                kc = _latent_f16(c_ptrs, tok_ok[:, None] & c_ok[None, :], tok_ok, FP8_BYTES)
                kr = _latent_f16(r_ptrs, tok_ok[:, None] & r_ok[None, :], tok_ok, FP8_BYTES)
            else:
                kc = tl.load(c_ptrs, mask=tok_ok[:, None] & c_ok[None, :], other=0.0)
                kr = tl.load(r_ptrs, mask=tok_ok[:, None] & r_ok[None, :], other=0.0)
            if KEYS_M:
                st = tl.dot(kc, tl.trans(qn), input_precision=DOT_PRECISION)
                st += tl.dot(kr, tl.trans(qp), input_precision=DOT_PRECISION)
                st = tl.where(tok_ok[:, None], st * qk_row[None, :], float("-inf"))
                m_i, l_i, acc = _fold_keys_m(st, kc, m_i, l_i, acc, DOT_PRECISION)
            else:
                s = tl.dot(qn, tl.trans(kc), input_precision=DOT_PRECISION)
                s += tl.dot(qp, tl.trans(kr), input_precision=DOT_PRECISION)
                s = tl.where(tok_ok[None, :], s * qk_row[:, None], float("-inf"))
                m_i, l_i, acc = online_softmax_fold(s, kc, m_i, l_i, acc, DOT_PRECISION)

    if KEYS_M:
        o, lse = softmax_finish(tl.trans(acc), m_i, l_i, v_scale)
    else:
        o, lse = softmax_finish(acc, m_i, l_i, v_scale)
    tl.store(O + r64 * stride_or + heads[:, None] * stride_oh + split * stride_osplit + offs_c[None, :],
             o.to(O.dtype.element_ty), mask=h_ok[:, None] & c_ok[None, :])
    if RETURN_LSE:
        tl.store(LSE + r64 * stride_lr + heads * stride_lh + split * stride_lsplit, lse, mask=h_ok)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["H", "NUM_SPLITS", "stride_lr", "stride_lh", "stride_lsplit",
                               "n_seqs", "seq_steps", "n_hblk", "n_rows", "n_work", "n_programs"])
def _mla_paged_fwd(
    QN, QP, CKV, KPE, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, QO_INDPTR, O, LSE,
    stride_qnr, stride_qnh, stride_qpr, stride_qph,
    stride_cp, stride_cs, stride_kp, stride_ks,
    stride_or, stride_oh, stride_osplit, stride_lr, stride_lh, stride_lsplit,
    H, DC, DR, NUM_SPLITS, qk_scale, v_scale, n_seqs, seq_steps, n_hblk, n_rows, n_work, n_programs,
    PAGE_SIZE: tl.constexpr, HAS_ROWS: tl.constexpr, CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_DC: tl.constexpr, BLOCK_DR: tl.constexpr, FP8: tl.constexpr, FP8_BYTES: tl.constexpr,
    KEYS_M: tl.constexpr, FP8_WORDS: tl.constexpr, PERSISTENT: tl.constexpr,
):
    """Plain grid: (rows * head blocks, splits). Persistent (Ascend): one program per core walks
    the tiles, (row, head block) the fast index, so the first (always full) splits go first."""
    if PERSISTENT:
        n_rh = n_rows * n_hblk
        for work in range(tl.program_id(0), n_work, n_programs):
            rh = work % n_rh
            _mla_tile(QN, QP, CKV, KPE, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, QO_INDPTR, O, LSE,
                      stride_qnr, stride_qnh, stride_qpr, stride_qph, stride_cp, stride_cs, stride_kp,
                      stride_ks, stride_or, stride_oh, stride_osplit, stride_lr, stride_lh, stride_lsplit,
                      H, DC, DR, NUM_SPLITS, qk_scale, v_scale, n_seqs, seq_steps, rh // n_hblk, rh % n_hblk,
                      work // n_rh, PAGE_SIZE, HAS_ROWS, CAUSAL, RETURN_LSE, DOT_PRECISION, BLOCK_H, BLOCK_N, BLOCK_DC, BLOCK_DR,
                      FP8, FP8_BYTES, KEYS_M, FP8_WORDS)
    else:
        rh = tl.program_id(0)
        _mla_tile(QN, QP, CKV, KPE, PAGE_INDPTR, PAGE_INDICES, LAST_LEN, QO_INDPTR, O, LSE,
                  stride_qnr, stride_qnh, stride_qpr, stride_qph, stride_cp, stride_cs, stride_kp,
                  stride_ks, stride_or, stride_oh, stride_osplit, stride_lr, stride_lh, stride_lsplit,
                  H, DC, DR, NUM_SPLITS, qk_scale, v_scale, n_seqs, seq_steps, rh // n_hblk, rh % n_hblk,
                  tl.program_id(1), PAGE_SIZE, HAS_ROWS, CAUSAL, RETURN_LSE, DOT_PRECISION, BLOCK_H, BLOCK_N, BLOCK_DC, BLOCK_DR,
                  FP8, FP8_BYTES, KEYS_M, FP8_WORDS)


# ----------------------------------------------------------------------------- planning

def wave_splits(programs: int, slots: int, most: int) -> int:
    """Runs per row for ``programs`` (row, head block) pairs on a GPU running ``slots`` programs
    at once: the fewest runs whose grid comes within 5% of the best fill of whole waves, at most
    ``most``. Two programs of these tiles fit an SM, so a grid just past a multiple of ``slots``
    runs a nearly empty last wave: measured on an H200 (docs/hardware-log.md, MLA decode
    splits), 32 rows x 9 runs (288 programs) took 102.5 us where 8 runs took 90.1, 128 rows x 3
    runs 353 us where 2 took 297."""
    def fill(runs: int) -> float:
        waves = programs * runs / slots
        return waves / math.ceil(waves)

    if programs * most <= slots:  # not one wave even at the most runs: every run adds programs
        return most
    best = max(fill(r) for r in range(1, most + 1))
    return next(r for r in range(1, most + 1) if fill(r) >= 0.95 * best)


def mla_config(rows: int, H: int, Dc: int, Dr: int, page_size: int, max_pages: int, cache_dtype: torch.dtype,
               interpret: bool, num_splits: Optional[int] = None, cores: Optional[int] = None,
               decode: bool = True, fast_path: bool = False) -> dict:
    """Tiles and the page split: BLOCK_H, BLOCK_N, BLOCK_DC, BLOCK_DR, num_warps, num_stages,
    NUM_SPLITS (each row's visible pages are cut into that many runs in the kernel).
    KEYS_M (tokens as the dots' rows, ``_fold_keys_m``) and FP8_WORDS (an fp8 tile read as int32
    words, ``_e4m3_words``; ignored for a 16-bit cache and where ``word_aligned`` says no)
    select the kernel's sm_90 shapes; ``fast_path``: the call may take them
    (``_checks.use_fast_path``: CUDA tensors, or any under kernel_path "fast").
    ``max_pages``: the page count of the longest or of an average row (``_split_pages``). ``cores``:
    planning for Ascend's persistent grid; ``decode``: one query row per sequence (prefill's tiles
    were not re-measured and keep the 32-token tile).

    Ascend: a 512-wide latent row makes the q, ckv and accumulator tiles [16, 512] each (16 KB,
    16 KB and 32 KB, plus the product and the rescaled accumulator in fp32): BLOCK_H = BLOCK_N =
    16 and one stage keep the unified buffer (192 KB) well under 90%.
    """
    block_dc, block_dr = max(16, next_pow2(Dc)), max(16, next_pow2(Dr))
    page_n = max(16, next_pow2(page_size))
    tokens = max_pages * page_size
    if interpret:
        # Few, large programs: the interpreter's cost grows with program and step count.
        block_h, block_n, warps, stages = max(16, min(128, next_pow2(H))), min(128, page_n), 4, 1
        # (kernel_path "fast": the word reads, each byte decoded in integer arithmetic)
        words = fast_path and cache_dtype in FP8_DTYPES
        auto = cdiv(tokens, MIN_SPLIT_TOKENS)
    elif cores:
        block_h, block_n, warps, stages, words = 16, min(16, page_n), 4, 1, False
        auto = npu_splits(rows * cdiv(H, 16), cores, cdiv(tokens, MIN_SPLIT_TOKENS))
    else:
        # [16, 512] fp32 accumulator over 4 warps: 64 registers a thread. Measured on an H100
        # (docs/hardware-log.md, MLA decode tiles): a 16-bit cache streams best in 64-token
        # tiles (0.88 of the copy bandwidth at B = 128, 8k tokens, against 0.79 with 32); an fp8
        # cache, whose tiles go through fp16 in shared memory, in 32-token tiles.
        # 8 warps (127 registers on sm_90 where 4 take 255 and spill) measured no faster on an
        # H200: 55.4 / 92.1 / 311.3 us against 55.3 / 90.2 / 295.8 at B32 L4096, B32 L8192,
        # B128 L8192. On the fast path an fp8 cache is read as int32 words (FP8_WORDS: inline
        # PTX, outside the portable subset; kernel_path "portable" keeps the byte reads): read as
        # fp8, Triton lays the fp16 dot operands out for 8-bit data and the loop took 166
        # instructions a token and warp, 93 as words (bf16: 58); on the H200 82.8 / 153.1 /
        # 572.3 us against 90.2 / 169.8 / 644.9 (docs/hardware-log.md).
        fp8 = cache_dtype in FP8_DTYPES
        block_h = 16 if H <= 16 or block_dc > 256 else 32
        block_n = min(32 if block_dc > 256 and (fp8 or not decode) else 64, page_n)
        warps, stages = 4, 2
        words = fp8 and fast_path
        auto = wave_splits(rows * cdiv(H, block_h), TARGET_PROGRAMS, cdiv(tokens, MIN_SPLIT_TOKENS))
    # Never more runs than the longest row has pages: the rest would only ever be empty.
    want = min(max(1, auto if num_splits is None else num_splits), max(1, max_pages))
    return dict(BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_DC=block_dc, BLOCK_DR=block_dr, num_warps=warps,
                num_stages=stages, KEYS_M=False, FP8_WORDS=words, NUM_SPLITS=want)


def kernel_caches(ckv_cache: torch.Tensor, kpe_cache: torch.Tensor) -> tuple:
    """The tensors the kernel is given for the two caches (byte views where fp8 is decoded)."""
    return kernel_view(ckv_cache, fp8_mode(ckv_cache)), kernel_view(kpe_cache, fp8_mode(kpe_cache))


def word_aligned(cache: torch.Tensor) -> bool:
    """Whether the kernel may read an fp8 cache (or its byte view) as int32 words: a 16-byte
    aligned base (part of the call cache's key, unlike a smaller alignment) and byte strides
    that are multiples of 4 (rows are contiguous: the shape checks ask it)."""
    return cache.data_ptr() % 16 == 0 and cache.stride(0) % 4 == 0 and cache.stride(1) % 4 == 0


def mla_plan(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
             qo_indptr, out, lse, *, scale: float, k_scale: float, v_scale: float, max_pages: int,
             num_splits: Optional[int] = None, config: Optional[dict] = None,
             views: Optional[tuple] = None, causal: bool = True) -> Optional[LaunchPlan]:
    """The launch chain for validated inputs: rows of ``q_nope`` ([R, H, Dc]) over the cache;
    ``qo_indptr`` (int32 [B+1], prefill) packs the rows by sequence, ``causal`` then aligning
    each to the end of its sequence's cache (None: decode, row b is sequence b, all of it). None
    when there is no row at all. ``views``: ``kernel_caches(ckv_cache, kpe_cache)``, when the
    caller made them already."""
    R, H, Dc = q_nope.shape
    Dr = q_pe.shape[2]
    page_size = ckv_cache.shape[1]
    if R == 0:
        return None
    ascend = on_ascend(q_nope)
    cfg = dict(config) if config is not None else mla_config(
        R, H, Dc, Dr, page_size, max_pages, ckv_cache.dtype, is_interpret(), num_splits,
        npu_cores(q_nope, vector=False) if ascend else None, decode=qo_indptr is None,
        fast_path=use_fast_path(q_nope))
    splits = cfg.pop("NUM_SPLITS")
    return_lse = lse is not None
    o_dst, l_dst, write_lse, o_strides, l_strides = split_outputs(out, lse, splits, R, H, Dc)
    has_rows = qo_indptr is not None
    n_seqs = qo_indptr.shape[0] - 1 if has_rows else R
    n_hblk = cdiv(H, cfg["BLOCK_H"])
    # fp8: compiled CUDA on sm_89+ converts with Triton's own cast; everywhere else the kernel
    # reads the same memory as bytes (a view, strides kept) and decodes them (kernels/_fp8.py).
    mode = fp8_mode(ckv_cache)
    ckv_cache, kpe_cache = views if views is not None else kernel_caches(ckv_cache, kpe_cache)
    cfg["FP8_WORDS"] = bool(cfg.get("FP8_WORDS") and mode != NOT_FP8 and word_aligned(ckv_cache)
                            and word_aligned(kpe_cache))
    args = (q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
            qo_indptr if has_rows else kv_page_indptr, o_dst, l_dst,
            q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
            ckv_cache.stride(0), ckv_cache.stride(1), kpe_cache.stride(0), kpe_cache.stride(1),
            *o_strides, *l_strides, H, Dc, Dr, splits, float(scale) * float(k_scale) * LOG2E, float(v_scale),
            n_seqs, max(0, n_seqs - 1).bit_length())
    g = plan_grid((R * n_hblk, splits), q_nope, vector=False)
    meta = dict(PAGE_SIZE=page_size, HAS_ROWS=has_rows, CAUSAL=has_rows and bool(causal), RETURN_LSE=write_lse, DOT_PRECISION=DOT_INPUT_PRECISION,
                FP8=mode != NOT_FP8, FP8_BYTES=mode == BITS, PERSISTENT=g.persistent, **cfg)
    workspace = () if o_dst is out else ((o_dst, False), (l_dst, False))
    plan = LaunchPlan(kernel=_mla_paged_fwd, grid=g.grid, args=args + (n_hblk, R, g.n_work, g.n_programs),
                      meta=meta, workspace=workspace)
    if splits > 1:
        plan.then = merge_plan(o_dst, l_dst, out, lse if return_lse else None, cfg["BLOCK_DC"])
    return plan


# ----------------------------------------------------------------------------- validation

def check_cache_scale(fn: str, name: str, value) -> float:
    """k_scale / v_scale: a finite positive real (per-tensor dequantisation factor) that stays
    finite as the kernel's float32, log2(e) factor included (k_scale is folded into the score
    scale; v_scale is held to the same bound, within a factor 1.45 of float32's largest)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a real number, got {type(value).__name__}")
    if not (math.isfinite(float(value)) and float(value) > 0):
        raise ValueError(f"{fn}: {name} must be finite and > 0, got {value}")
    return check_scale(fn, value, 1, name)


def check_folded_scale(fn: str, scale: float, k_scale: float) -> None:
    """The kernels receive float32(scale * k_scale * log2(e)): each factor may fit and the
    product not."""
    check_scale(fn, scale * k_scale, 1, "scale * k_scale")


def check_mla_inputs(fn: str, q_nope, q_pe, ckv_cache, kpe_cache, rows_name: str, allow_no_rows: bool):
    """Shapes, dtypes and devices of the queries and the two caches; returns (R, H, Dc, Dr, P)."""
    dims_q = f"[{rows_name}, H, Dc]"
    check_tensor(fn, "q_nope", q_nope, rank=3, dims=dims_q, dtypes=FLOAT_DTYPES)
    R, H, Dc = q_nope.shape
    if H == 0 or Dc == 0 or (R == 0 and not allow_no_rows):
        check_nonempty(fn, "q_nope", q_nope, dims_q)
    check_tensor(fn, "q_pe", q_pe, rank=3, dims=f"[{rows_name}, H, Dr]", dtypes=(q_nope.dtype,),
                 device=q_nope.device, like="q_nope")
    check_tensor(fn, "q_pe", q_pe, shape=(R, H, None), dims=f"[{rows_name}, H, Dr]")
    Dr = q_pe.shape[2]
    for name, d, top in (("q_nope", Dc, MAX_DC), ("q_pe", Dr, MAX_DR)):
        if d % DIM_MULTIPLE or not 0 < d <= top:
            raise ValueError(f"{fn}: the last dimension of {name} must be a multiple of {DIM_MULTIPLE} in "
                             f"[{DIM_MULTIPLE}, {top}], got {d}")
    cache_dtypes = (q_nope.dtype, *FP8_DTYPES)
    check_tensor(fn, "ckv_cache", ckv_cache, rank=3, dims="[num_pages, page_size, Dc]", dtypes=cache_dtypes,
                 device=q_nope.device, like="q_nope or float8_e4m3fn")
    num_pages, page_size = ckv_cache.shape[0], ckv_cache.shape[1]
    check_tensor(fn, "ckv_cache", ckv_cache, shape=(None, None, Dc), dims="[num_pages, page_size, Dc]")
    if page_size == 0:
        raise ValueError(f"{fn}: ckv_cache must have page_size >= 1 [num_pages, page_size, Dc], "
                         f"got {list(ckv_cache.shape)}")
    check_tensor(fn, "kpe_cache", kpe_cache, rank=3, dims="[num_pages, page_size, Dr]",
                 dtypes=(ckv_cache.dtype,), device=q_nope.device, like="ckv_cache")
    check_tensor(fn, "kpe_cache", kpe_cache, shape=(num_pages, page_size, Dr), dims="[num_pages, page_size, Dr]")
    return R, H, Dc, Dr, page_size


def check_outputs_free(fn: str, out, lse, return_lse: bool, R: int, H: int, Dc: int, q_nope, inputs: dict,
                       rows_name: str) -> None:
    check_out_lse(fn, out, lse, return_lse, o_shape=(R, H, Dc), o_dims=f"[{rows_name}, H, Dc]",
                  lse_shape=(R, H), lse_dims=f"[{rows_name}, H]", like=q_nope, inputs=inputs)


def _prepare(fn, q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *,
             scale, return_lse, out, lse, k_scale, v_scale, num_splits, check_indices, inputs, qo_indptr=None,
             causal=True):
    """Every check, the data-dependent ones last (one device sync); returns (scale, k_scale,
    v_scale, max_pages, B)."""
    prefill = qo_indptr is not None
    rows_name = "total_q" if prefill else "B"
    R, H, Dc, Dr, page_size = check_mla_inputs(fn, q_nope, q_pe, ckv_cache, kpe_cache, rows_name, prefill)
    check_flag(fn, "return_lse", return_lse)
    check_flag(fn, "check_indices", check_indices)
    check_flag(fn, "causal", causal)
    scale = check_scale(fn, scale, Dc + Dr)
    k_scale = check_cache_scale(fn, "k_scale", k_scale)
    v_scale = check_cache_scale(fn, "v_scale", v_scale)
    check_folded_scale(fn, scale, k_scale)
    if num_splits is not None:
        check_int_range(fn, "num_splits", num_splits, 1, 2**31 - 1)
    if prefill:
        check_index_tensor(fn, "qo_indptr", qo_indptr, device=q_nope.device, rank=1, dims="[B+1]", like="q_nope")
        if qo_indptr.shape[0] < 1:
            raise ValueError(f"{fn}: qo_indptr must have shape [B+1] with B >= 0, got {list(qo_indptr.shape)}")
        B = qo_indptr.shape[0] - 1
    else:
        B = R
    check_page_table(fn, B, q_nope.device, kv_page_indptr, kv_page_indices, kv_last_page_len)
    check_outputs_free(fn, out, lse, return_lse, R, H, Dc, q_nope, inputs, rows_name)
    check_launchable(fn, "q_nope", q_nope)
    if prefill and B == 0 and R > 0:
        # Shapes alone say qo_indptr cannot end at total_q (the kernel finds each row's
        # sequence in the table: with none there it would have nowhere to look).
        raise ValueError(f"{fn}: qo_indptr has no sequence (shape [1]) but q_nope has {R} query rows; "
                         f"qo_indptr[B] must equal q_nope.shape[0]")
    max_pages = _check_data(fn, q_nope, ckv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                            check_indices, qo_indptr, causal)
    return scale, k_scale, v_scale, max_pages, B


def _check_data(fn, q_nope, ckv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, check_indices,
                qo_indptr, causal) -> Optional[int]:
    """The data-dependent checks (one device sync) with ``check_indices``; returns the longest
    sequence's page count they read (None without them)."""
    if not check_indices:
        return None
    page_size = ckv_cache.shape[1]
    extra, ok, raise_ = (), None, None
    if qo_indptr is not None:
        extra, ok, raise_ = _qo_checks(fn, qo_indptr, q_nope.shape[0], page_size, kv_page_indptr,
                                       kv_last_page_len, causal)
    return check_index_values(fn, ckv_cache.shape[0], page_size, kv_page_indptr, kv_page_indices,
                              kv_last_page_len, extra_stats=extra, extra_ok=ok, extra_raise=raise_)


def _checked(cache: CallCache, fn, q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
             kv_last_page_len, *, scale, return_lse, out, lse, k_scale, v_scale, num_splits, check_indices, inputs,
             qo_indptr=None, causal=True):
    """``_prepare`` through the call cache: a key validated before skips the shape checks and
    takes what was derived from the key alone when it was validated (the converted scalars: the
    key holds their values and types; whether the interpreter runs; how each cache is read);
    the output's address checks and the data checks run anew. Returns (max_pages, slot,
    ``Facts``)."""
    key = cache.key(tuple(inputs.values()), (out, lse),
                    (scale, return_lse, k_scale, v_scale, num_splits, check_indices, causal))
    slot = cache.lookup(key)
    if slot is None:
        scale, k_scale, v_scale, max_pages, _ = _prepare(
            fn, q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
            scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale,
            num_splits=num_splits, check_indices=check_indices, inputs=inputs, qo_indptr=qo_indptr, causal=causal)
        facts = Facts(scale, k_scale, v_scale, is_interpret(), fp8_mode(ckv_cache), fp8_mode(kpe_cache))
        slot = cache.validated(key)
        if slot is not None:
            slot[FACTS] = facts
        return max_pages, slot, facts
    if out is not None or lse is not None:
        check_out_lse_aliases(fn, out, lse, inputs)
    facts = slot.get(FACTS)
    if facts is None:  # (pushed out by a great many page counts)
        facts = Facts(check_scale(fn, scale, q_nope.shape[2] + q_pe.shape[2]),
                      check_cache_scale(fn, "k_scale", k_scale), check_cache_scale(fn, "v_scale", v_scale),
                      is_interpret(), fp8_mode(ckv_cache), fp8_mode(kpe_cache))
    max_pages = _check_data(fn, q_nope, ckv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                            check_indices, qo_indptr, causal)
    return max_pages, slot, facts


class Facts(NamedTuple):
    """What a call derives from its key alone (kept in the key's slot of the call cache)."""
    scale: float
    k_scale: float
    v_scale: float
    interpret: bool
    ckv_mode: int
    kpe_mode: int

    def views(self, ckv_cache, kpe_cache) -> tuple:
        """``kernel_caches`` of the two caches."""
        return kernel_view(ckv_cache, self.ckv_mode), kernel_view(kpe_cache, self.kpe_mode)


#: Where a validated key's slot keeps its ``Facts`` (beside its bound plans, which are keyed by
#: page counts).
FACTS = "facts"


def _qo_checks(fn, qo_indptr, T, page_size, kv_page_indptr, kv_last_page_len, causal):
    """qo_indptr[0] == 0, non-decreasing, qo_indptr[B] == total_q, and (causal) n_b <= m_b.
    Differences in int64: int32 ones wrap, and a qo_indptr whose entries pass 2**31 would then
    look non-decreasing and end at total_q."""
    n = qo_indptr[1:].to(torch.int64) - qo_indptr[:-1]
    pages = kv_page_indptr[1:].to(torch.int64) - kv_page_indptr[:-1]
    m = torch.where(pages > 0, (pages - 1) * page_size + kv_last_page_len, 0)
    room = (m - n).min() if n.numel() else qo_indptr[0] * 0
    stats = [qo_indptr[0], qo_indptr[-1], n.min() if n.numel() else qo_indptr[0] * 0, room]

    def ok(vals):
        first, last, n_min, room_min = vals
        return first == 0 and last == T and n_min >= 0 and (room_min >= 0 or not causal)

    def raise_():
        q = qo_indptr.to(torch.int64)
        if int(q[0]) != 0:
            raise ValueError(f"{fn}: qo_indptr[0] must be 0, got {int(q[0])}")
        steps = q[1:] - q[:-1]
        if bool((steps < 0).any()):
            i = int((steps < 0).nonzero()[0, 0])
            raise ValueError(f"{fn}: qo_indptr must be non-decreasing, got qo_indptr[{i}] = {int(q[i])} > "
                             f"qo_indptr[{i + 1}] = {int(q[i + 1])}")
        if int(q[-1]) != T:
            raise ValueError(f"{fn}: qo_indptr[B] must equal q_nope.shape[0] = {T}, got {int(q[-1])}")
        bad = (m.to(torch.int64) - steps) < 0
        i = int(bad.nonzero()[0, 0])
        raise ValueError(f"{fn}: qo_indptr gives sequence {i} {int(steps[i])} queries but it has only "
                         f"{int(m[i])} cached tokens (causal prefill needs n <= m: the queries are the last "
                         f"n tokens of the cache)")
    return stats, ok, raise_


def _outputs(q_nope, out, lse, return_lse):
    R, H, Dc = q_nope.shape
    if out is None:
        out = torch.empty((R, H, Dc), dtype=q_nope.dtype, device=q_nope.device)
    if return_lse and lse is None:
        lse = torch.empty((R, H), dtype=torch.float32, device=q_nope.device)
    return out, (lse if return_lse else None)


def _split_pages(kv_page_indptr, kv_page_indices, checked_max, interpret: bool):
    """The page count the split is sized by. On a device, the average sequence's, from shapes
    alone (exact for one sequence or equal lengths): no device sync, so a call can be captured in
    a CUDA graph and a checked call plans as an unchecked one; a longer sequence still gets all
    of its pages, in longer runs. Under the interpreter the longest sequence's own count (host
    memory, free to read)."""
    if not interpret:
        return cdiv(kv_page_indices.shape[0], max(1, kv_page_indptr.shape[0] - 1))
    if checked_max is not None:
        return checked_max
    if kv_page_indptr.shape[0] < 2:
        return 0
    return max(0, int((kv_page_indptr[1:] - kv_page_indptr[:-1]).max()))


def mla_paged_decode(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                     kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor,
                     *, scale: Optional[float] = None, return_lse: bool = False,
                     out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                     k_scale: float = 1.0, v_scale: float = 1.0, num_splits: Optional[int] = None,
                     check_indices: bool = True) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """MLA decode: q_nope [B, H, Dc], q_pe [B, H, Dr] over ckv_cache [pages, P, Dc], kpe_cache
    [pages, P, Dr] (q's dtype, or float8_e4m3fn with k_scale / v_scale; the two may be views of
    one fused [pages, P, Dc + Dr] buffer) -> (o [B, H, Dc], lse [B, H] fp32 natural-log | None).
    ``scale=None``: 1/sqrt(Dc + Dr). Page table as paged_decode's (int32; a sequence with no page
    gives o = 0, lse = -inf). ``check_indices=False`` skips the page table's data checks."""
    fn = "mla_paged_decode"
    inputs = dict(q_nope=q_nope, q_pe=q_pe, ckv_cache=ckv_cache, kpe_cache=kpe_cache, kv_page_indptr=kv_page_indptr,
                  kv_page_indices=kv_page_indices, kv_last_page_len=kv_last_page_len)
    max_pages, slot, facts = _checked(
        _DECODE, fn, q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
        scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale,
        num_splits=num_splits, check_indices=check_indices, inputs=inputs)
    out, lse = _outputs(q_nope, out, lse, return_lse)
    max_pages = _split_pages(kv_page_indptr, kv_page_indices, max_pages, facts.interpret)
    views = facts.views(ckv_cache, kpe_cache)
    tensors = (q_nope, q_pe, *views, kv_page_indptr, kv_page_indices, kv_last_page_len, out, lse)
    bound = None if slot is None else slot.get(max_pages)
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = mla_plan(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                    None, out, lse, scale=facts.scale, k_scale=facts.k_scale, v_scale=facts.v_scale,
                    max_pages=max_pages, num_splits=num_splits, views=views)
    _DECODE.run(slot, max_pages, plan, tensors, is_live(q_nope), launch)
    return out, lse


def mla_paged_prefill(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor, ckv_cache: torch.Tensor,
                      kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                      kv_last_page_len: torch.Tensor, *, causal: bool = True, scale: Optional[float] = None,
                      return_lse: bool = False, out: Optional[torch.Tensor] = None,
                      lse: Optional[torch.Tensor] = None, k_scale: float = 1.0, v_scale: float = 1.0,
                      num_splits: Optional[int] = None, check_indices: bool = True,
                      ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """MLA chunked prefill over a prefix cache: q_nope [total_q, H, Dc], q_pe [total_q, H, Dr]
    packed by qo_indptr [B+1] (int32; sequence b's n_b queries are the last n_b of its m_b cached
    tokens) -> (o [total_q, H, Dc], lse [total_q, H] | None). Causal (default): query i of
    sequence b sees cache positions <= m_b - n_b + i (needs n_b <= m_b); ``causal=False``: all
    m_b. Caches, page table, scales and outputs as ``mla_paged_decode``."""
    fn = "mla_paged_prefill"
    inputs = dict(q_nope=q_nope, q_pe=q_pe, qo_indptr=qo_indptr, ckv_cache=ckv_cache, kpe_cache=kpe_cache,
                  kv_page_indptr=kv_page_indptr, kv_page_indices=kv_page_indices,
                  kv_last_page_len=kv_last_page_len)
    max_pages, slot, facts = _checked(
        _PREFILL, fn, q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
        scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale,
        num_splits=num_splits, check_indices=check_indices, inputs=inputs, qo_indptr=qo_indptr, causal=causal)
    out, lse = _outputs(q_nope, out, lse, return_lse)
    if q_nope.shape[0] == 0:
        return out, lse
    max_pages = _split_pages(kv_page_indptr, kv_page_indices, max_pages, facts.interpret)
    views = facts.views(ckv_cache, kpe_cache)
    tensors = (q_nope, q_pe, *views, kv_page_indptr, kv_page_indices, kv_last_page_len, qo_indptr, out, lse)
    bound = None if slot is None else slot.get(max_pages)
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = mla_plan(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                    qo_indptr, out, lse, scale=facts.scale, k_scale=facts.k_scale, v_scale=facts.v_scale,
                    max_pages=max_pages, num_splits=num_splits, views=views, causal=causal)
    _PREFILL.run(slot, max_pages, plan, tensors, is_live(q_nope), launch)
    return out, lse


_DECODE = CallCache("mla_paged_decode")
_PREFILL = CallCache("mla_paged_prefill")
