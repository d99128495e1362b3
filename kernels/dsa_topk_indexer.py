"""DeepSeek's lightning indexer (kernels.md section 12): a logit per cached token, then its top-k.

``logit[b, t] = sum_h weights[b, h] * relu(q_idx[b, h] . k_idx[t] * k_scale[t])`` over the paged
index-key cache, for logical positions t < seq_lens[b]. fp8 e4m3 values are read as bytes and
converted in the kernel: by the hardware on compiled CUDA (sm_89+), elsewhere by bit arithmetic
(sign, 4 exponent bits, 3 mantissa bits; Ascend 910B has no fp8 type, and the interpreter
decodes the NaN codes wrongly). Every e4m3 value is exact in fp16, so the decoded tiles feed an
fp16 ``tl.dot`` with an fp32 accumulator: the products are exact and only the fp32 sums round
(docs/dsa.md derives the tolerance from that).

One call is a chain of launches with no host sync and, on a repeat call, no allocation: the
selection's histograms (zeroed once, left zero by the last launch) and a logits buffer the
caller does not get back are workspace the call cache keeps (kernels/_callcache.py).

1. ``_indexer_logits``: program (b, g) walks tiles g, g + G, ... of row b, with q decoded once
   per program (all heads at once, off Ascend), and stores the fp32 logits (-inf past seq_len).
   Off Ascend the tile's tokens are the rows of its dot (``TOKEN_ROWS``): sm_90 then sums the
   heads within a thread's registers and keeps 2 logits a thread, not 16 (about a quarter of the
   instructions a token). On the CUDA fast path
   (``use_fast_path``) it looks each token's page up in the block table itself (one read a tile
   when BLOCK_N divides the page size) and counts the
   logits' top key byte (pass 0 of the radix select); on the portable path the host computes
   the element offsets of each position's key row and scale (vectorized torch: triton-ascend
   scalarizes or rejects the in-kernel lookup, porting_notes.md#page_div_zero) and pass 0 is a
   launch of its own.
2. ``kernels/_radix_select.py``: the remaining count passes over the row's logits, then the
   gather of min(topk, seq_len) positions, -1 after them: on the fast path one launch of one
   program a row for rows up to ``ROW_PROGRAM_MAX_N`` tokens (two launches in all), else a chain
   of three passes and the gather over many programs a row (five); six on the portable path.

The plain layout (fp8 [pages, P, Di] + fp32 scales [pages, P]) and FlashInfer's packed pages
(uint8 [pages, P, 1, 132]: per page, its P rows of 128 fp8 values, then its P fp32 scales;
DeepGEMM's layout) are two sets of strides over the same kernel.
"""
from __future__ import annotations

import functools
import numbers
from typing import Optional

import torch
import triton
import triton.language as tl

from ._checks import (DOT_INPUT_PRECISION, INT32_MAX, LaunchPlan, cdiv, check_flag, check_index_tensor,
                      check_launchable, check_no_alias, check_nonempty, check_output, check_tensor,
                      check_values_in_range,
                      is_interpret, is_live, launch, next_pow2, on_ascend,
                      use_fast_path)
from ._callcache import CallCache
from ._grid import npu_cores
from ._radix_select import (RADIX, RADIX_BITS, count_digits, flush_counts, key_digit, order_key, select_config,
                            select_plans, workspace)
from . import settings

FP8 = torch.float8_e4m3fn
PACKED_DIM = 128
PACKED_ROW = PACKED_DIM + 4
MAX_DI = 256


@triton.jit
def _e4m3(x):
    """fp8 e4m3fn bytes -> fp16 values, exact (NaN for the two NaN codes; e4m3fn has no
    infinities). e4m3's exponent and mantissa fields moved into fp16's read as value * 2^-8,
    subnormals included; one exact multiplication by 256 restores it. Few, 16-bit temporaries:
    a wider decode overflowed Ascend's unified buffer at 32 x 128 tiles."""
    b = x.to(tl.int16) & 255
    h = (((b & 127) << 7) | ((b & 128) << 8)).to(tl.float16, bitcast=True)
    return tl.where((b & 127) == 127, float("nan"), h * 256.0)


@triton.jit
def _decode_fp8(x, NATIVE_FP8: tl.constexpr):
    """fp8 bytes -> fp16: the hardware conversion on compiled CUDA (sm_89+), else ``_e4m3``."""
    if NATIVE_FP8:
        h = x.to(tl.float8e4nv, bitcast=True).to(tl.float16)
    else:
        h = _e4m3(x)
    return h


@triton.jit
def _dot_operand(x, NATIVE_FP8: tl.constexpr, FP8_DOT: tl.constexpr):
    """fp8 bytes -> a tl.dot operand: the fp8 values themselves (FP8_DOT: fp8 tensor-core
    products, CUDA sm_89+ only), else their exact fp16 decode."""
    if FP8_DOT:
        h = x.to(tl.float8e4nv, bitcast=True)
    else:
        h = _decode_fp8(x, NATIVE_FP8)
    return h


@triton.jit(do_not_specialize=["HI", "N", "P", "page_shift", "n_tiles"])
def _indexer_logits(Q, W, K, KS, BT, KOFF, SOFF, SEQ, LOGITS, WS,
                    stride_qb, stride_qh, stride_wb, stride_wh, stride_kp, stride_ks, stride_sp, stride_ss,
                    stride_tb, stride_ob, stride_lb, stride_wsb,
                    HI, DI, N, P, page_shift, n_tiles,
                    BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                    CHUNK_H: tl.constexpr, TOKEN_ROWS: tl.constexpr, PAGE_POW2: tl.constexpr, TILE_IN_PAGE: tl.constexpr,
                    FP8_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr, NATIVE_FP8: tl.constexpr,
                    PAGE_LOOKUP: tl.constexpr, FILL_TAIL: tl.constexpr, COUNT_KEYS: tl.constexpr, RADIX: tl.constexpr, RADIX_BITS: tl.constexpr,
                    HBINS: tl.constexpr, HISTOGRAM: tl.constexpr):
    """Program (b, g) computes tiles g, g + G, ... of row b's logits; with COUNT_KEYS (the fast
    path) it also counts their top key bytes (pass 0 of kernels/_radix_select.py) in registers,
    added to the row's histogram once. The portable path counts them in a launch of its own:
    the one-hot count here took Ascend's UB from 42% to 88% at 64 heads."""
    b = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    n_prog = tl.num_programs(1)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < DI
    seq_len = tl.maximum(tl.minimum(tl.load(SEQ + b), N), 0)
    # Past seq_len only the -inf fill of a returned logits buffer is left to do.
    n_row = n_tiles if FILL_TAIL else tl.cdiv(seq_len, BLOCK_N)
    if CHUNK_H == BLOCK_H:  # every head at once: q decoded once for all the program's tiles
        heads = tl.arange(0, BLOCK_H)
        h_ok = heads < HI
        q_all = _dot_operand(tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                                     mask=h_ok[:, None] & d_ok[None, :], other=0), NATIVE_FP8, FP8_DOT)
        w_all = tl.load(W + b * stride_wb + heads * stride_wh, mask=h_ok, other=0.0)
    counts = tl.zeros([HBINS], dtype=tl.int32)
    for t in range(g, n_row, n_prog):
        j = t * BLOCK_N + tl.arange(0, BLOCK_N)
        ok = j < seq_len
        if PAGE_LOOKUP and TILE_IN_PAGE:
            # BLOCK_N divides page_size: the tile's tokens are consecutive slots of one page, one
            # block-table read and contiguous rows (the loads vectorize, no per-token addresses).
            start = t * BLOCK_N
            page_idx = (start >> page_shift) if PAGE_POW2 else start // P
            page = tl.load(BT + b * stride_tb + page_idx, mask=start < seq_len, other=0).to(tl.int64)
            slot = start - page_idx * P + tl.arange(0, BLOCK_N)
            # The page's base in 64 bits once, the offsets within it in 32 (the host checks a
            # page's rows span less than 2**31 elements).
            k_rows = (K + page * stride_kp) + slot * stride_ks
            s_ptrs = (KS + page * stride_sp) + slot * stride_ss
        elif PAGE_LOOKUP:  # the fast path: each token's page read from the block table here
            if PAGE_POW2:  # a shift and a mask, not an integer division per token
                page = tl.load(BT + b * stride_tb + (j >> page_shift), mask=ok, other=0).to(tl.int64)
                slot = (j & (P - 1)).to(tl.int64)
            else:
                page = tl.load(BT + b * stride_tb + j // P, mask=ok, other=0).to(tl.int64)
                slot = (j % P).to(tl.int64)
            k_rows = K + (page * stride_kp + slot * stride_ks)
            s_ptrs = KS + (page * stride_sp + slot * stride_ss)
        else:  # offsets from the host (porting_notes.md#page_div_zero)
            k_rows = K + tl.load(KOFF + b * stride_ob + j, mask=ok, other=0)
            s_ptrs = KS + tl.load(SOFF + b * stride_ob + j, mask=ok, other=0)
        k = _dot_operand(tl.load(k_rows[:, None] + offs_d[None, :], mask=ok[:, None] & d_ok[None, :], other=0),
                         NATIVE_FP8, FP8_DOT)
        ks = tl.load(s_ptrs, mask=ok, other=0.0)
        if CHUNK_H == BLOCK_H and TOKEN_ROWS:
            # Tokens as the dot's rows: the head sum stays within a thread and its lane quad, and
            # each thread then holds 2 of the tile's logits (not 16 as with heads as the rows),
            # which is what the scale loads and the digit count below cost per thread.
            s = tl.dot(k, tl.trans(q_all), input_precision=DOT_PRECISION)   # [BLOCK_N, BLOCK_H], fp32 sums
            logit = tl.sum(tl.maximum(s * ks[:, None], 0.0) * w_all[None, :], 1)
        elif CHUNK_H == BLOCK_H:
            s = tl.dot(q_all, tl.trans(k), input_precision=DOT_PRECISION)   # [BLOCK_H, BLOCK_N], fp32 sums
            logit = tl.sum(tl.maximum(s * ks[None, :], 0.0) * w_all[:, None], 0)
        else:
            # Heads in chunks of CHUNK_H (16 on Ascend, where 64 decoded query rows and their
            # scores at once took 99.5% of the unified buffer).
            logit = tl.zeros([BLOCK_N], dtype=tl.float32)
            for h0 in tl.static_range(0, BLOCK_H, CHUNK_H):
                hc = h0 + tl.arange(0, CHUNK_H)
                hc_ok = hc < HI
                q = _decode_fp8(tl.load(Q + b * stride_qb + hc[:, None] * stride_qh + offs_d[None, :],
                                        mask=hc_ok[:, None] & d_ok[None, :], other=0), NATIVE_FP8)
                w = tl.load(W + b * stride_wb + hc * stride_wh, mask=hc_ok, other=0.0)
                s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
                logit += tl.sum(tl.maximum(s * ks[None, :], 0.0) * w[:, None], 0)
        logit = tl.where(ok, logit, float("-inf"))
        tl.store(LOGITS + b * stride_lb + j, logit, mask=j < N)
        if COUNT_KEYS:
            d = tl.where(ok, key_digit(order_key(logit), 0, RADIX_BITS), RADIX)
            counts += count_digits(d, HBINS, HISTOGRAM)
    if COUNT_KEYS:
        flush_counts(WS + b * stride_wsb, counts, HBINS, HISTOGRAM)


PACKED_DTYPES = (torch.uint8, torch.int8)


def split_index_cache(k_cache: torch.Tensor, k_scale: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(key bytes uint8 [pages, P, Di], scales fp32 [pages, P]) as views of either layout. A
    packed page is page_size rows of 128 fp8 bytes, then page_size fp32 scales (DeepGEMM's
    layout, seen as [pages, P, 1, 132]); both views keep the pool's page stride."""
    if k_cache.dtype in PACKED_DTYPES:
        pages, P = k_cache.shape[0], k_cache.shape[1]
        raw = k_cache if k_cache.dtype == torch.uint8 else k_cache.view(torch.uint8)
        page = raw.stride(0)
        keys = raw.as_strided((pages, P, PACKED_DIM), (page, PACKED_DIM, 1))
        words = raw.view(torch.float32)  # [pages, P, 1, 33]: same storage, 4-byte units
        scales = words.as_strided((pages, P), (page // 4, 1), words.storage_offset() + P * PACKED_DIM // 4)
        return keys, scales
    return k_cache.view(torch.uint8), k_scale


def token_offsets(keys: torch.Tensor, scales: torch.Tensor, block_table: torch.Tensor, N: int):
    """Element offsets [B, N] (int64) of each logical position's key row and scale, for the
    portable kernel (vectorized torch, once per call); positions whose page the table does not
    list read offset 0 (the kernel masks them by seq_len)."""
    P = keys.shape[1]
    pos = torch.arange(N, device=block_table.device)
    page = block_table.to(torch.int64)[:, pos // P].clamp(min=0)
    slot = (pos % P).to(torch.int64)
    return (page * keys.stride(0) + slot * keys.stride(1), page * scales.stride(0) + slot * scales.stride(1))


def validate(fn: str, q_idx, k_cache, weights, seq_lens, block_table, topk, k_scale, out, logits,
             return_logits) -> tuple[int, int, int]:
    """Every check that reads no device data; returns (num_pages, page_size, N)."""
    check_tensor(fn, "q_idx", q_idx, rank=3, dims="[B, Hi, Di]", dtypes=(FP8,))
    check_nonempty(fn, "q_idx", q_idx, "[B, Hi, Di]")
    B, Hi, Di = q_idx.shape
    if Di % 16 or Di > MAX_DI:
        raise ValueError(f"{fn}: q_idx head dim Di must be a multiple of 16 and <= {MAX_DI}, got {Di}")
    dev = q_idx.device
    if not isinstance(k_cache, torch.Tensor):
        raise TypeError(f"{fn}: k_cache must be a torch.Tensor, got {type(k_cache).__name__}")
    if k_cache.dtype in PACKED_DTYPES and k_cache.dim() == 4:
        check_tensor(fn, "k_cache", k_cache, rank=4, dims="[num_pages, page_size, 1, 132]", device=dev,
                     like="q_idx", shape=(None, None, 1, PACKED_ROW))
        if Di != PACKED_DIM:
            raise ValueError(f"{fn}: the packed k_cache holds {PACKED_DIM} values a row, but q_idx has Di={Di}")
        if k_scale is not None:
            raise ValueError(f"{fn}: k_scale must be None with the packed k_cache (its pages carry the scales)")
        if k_cache.shape[1] > 1 and k_cache.stride(1) != PACKED_ROW:
            raise ValueError(f"{fn}: each page of the packed k_cache must be one contiguous block of "
                             f"page_size * 132 bytes (slot stride 132), got strides {tuple(k_cache.stride())}")
        if k_cache.stride(0) % 4 or k_cache.storage_offset() % 4:
            raise ValueError(f"{fn}: the packed k_cache's pages must start on 4-byte boundaries (their fp32 "
                             f"scales are read in place), got strides {tuple(k_cache.stride())}")
    else:
        check_tensor(fn, "k_cache", k_cache, rank=3, dims="[num_pages, page_size, Di] (or the packed "
                     "[num_pages, page_size, 1, 132])", dtypes=(FP8, torch.uint8), device=dev, like="q_idx",
                     shape=(None, None, Di))
        check_tensor(fn, "k_scale", k_scale, rank=2, dims="[num_pages, page_size]", dtypes=(torch.float32,),
                     device=dev, like="q_idx", shape=k_cache.shape[:2])
    pages, P = k_cache.shape[0], k_cache.shape[1]
    if P == 0:
        raise ValueError(f"{fn}: k_cache must have page_size >= 1, got {list(k_cache.shape)}")
    check_tensor(fn, "weights", weights, dims="[B, Hi]", dtypes=(torch.float32,), device=dev, like="q_idx",
                 shape=(B, Hi))
    check_index_tensor(fn, "seq_lens", seq_lens, device=dev, rank=1, shape=(B,), dims="[B]", like="q_idx")
    check_index_tensor(fn, "block_table", block_table, device=dev, rank=2, shape=(B, None),
                       dims="[B, max_pages]", like="q_idx")
    if isinstance(topk, bool) or not isinstance(topk, numbers.Integral):
        raise TypeError(f"{fn}: topk must be an int, got {type(topk).__name__} {topk!r}")
    if topk < 1:
        raise ValueError(f"{fn}: topk must be an int >= 1, got {topk!r}")
    check_flag(fn, "return_logits", return_logits)
    N = block_table.shape[1] * P
    if N > INT32_MAX:  # the kernel counts positions in int32: past it they wrap negative
        raise ValueError(f"{fn}: block_table [B, max_pages] with page_size {P} gives {N} positions, more than "
                         f"int32 positions reach (2**31 - 1)")
    inputs = {"q_idx": q_idx, "k_cache": k_cache, "weights": weights, "seq_lens": seq_lens,
              "block_table": block_table, "k_scale": k_scale}
    if out is not None:
        check_output(fn, "out", out, shape=(B, int(topk)), dtype=torch.int32, device=dev, dims="[B, topk]",
                     inputs=inputs)
    if logits is not None:
        if not return_logits:
            raise ValueError(f"{fn}: logits buffer given but return_logits=False")
        check_output(fn, "logits", logits, shape=(B, N), dtype=torch.float32, device=dev,
                     dims="[B, max_pages * page_size]", inputs={**inputs, "out": out})
    check_launchable(fn, "q_idx", q_idx)
    return pages, P, N


def _device_programs(t: torch.Tensor) -> int:
    """Programs a launch spreads over: four per SM on a GPU (what fits at once: a program's
    tiles follow one another, its loads wait on a block-table load), one per AI core on Ascend,
    a few under the interpreter (``kernels.settings``' persistent_programs overrides)."""
    wanted = settings.current().persistent_programs
    if wanted is not None:
        return int(wanted) if wanted > 0 else INT32_MAX     # 0: one program per tile
    if on_ascend(t):
        return npu_cores(t, vector=False)
    if is_live(t) and t.device.type == "cuda":
        return 4 * _sm_count(t.device.index if t.device.index is not None else torch.cuda.current_device())
    return 4


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _native_fp8(t: torch.Tensor) -> bool:
    """The hardware fp8 conversion: the fast path on a CUDA device of sm_89+ (the interpreter
    decodes the NaN codes as +-480, sm_80 and Ascend have no fp8 type: they take the bit decode)."""
    return (use_fast_path(t) and is_live(t) and t.device.type == "cuda"
            and torch.cuda.get_device_capability(t.device) >= (8, 9))


def indexer_config(Hi: int, Di: int, *, interpret: bool, ascend: bool) -> dict:
    """BLOCK_N tokens a tile against all Hi heads (BLOCK_H >= 16 for tl.dot's M)."""
    block_h, block_d = max(16, next_pow2(Hi)), max(16, next_pow2(Di))
    block_n = 16 if ascend and not interpret else 64
    return dict(BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_D=block_d, CHUNK_H=16 if ascend else block_h,
                TOKEN_ROWS=not ascend, FP8_DOT=False, num_warps=4, num_stages=1 if interpret else 2)


def _per_row(B: int, work: int, t: torch.Tensor) -> int:
    """Programs per row: enough that B rows fill the device, no more than the row has tiles."""
    return max(1, min(work, cdiv(_device_programs(t), B)))


def indexer_plan(q_idx, keys, scales, weights, seq_lens, block_table, topk: int, logits, out, ws,
                 fill_tail: bool, q_bytes: Optional[torch.Tensor] = None, offsets: Optional[tuple] = None,
                 ) -> LaunchPlan:
    """The logits launch (with pass 0 of the selection), then the selection's passes and gather
    (kernels/_radix_select.py), for validated inputs (``keys`` uint8 rows, ``scales`` fp32)."""
    B, Hi, Di = q_idx.shape
    N = logits.shape[1]
    P = keys.shape[1]
    interpret, ascend = is_interpret(), on_ascend(q_idx)
    cfg = indexer_config(Hi, Di, interpret=interpret, ascend=ascend)
    sel = select_config(q_idx)
    tiles = max(1, cdiv(N, cfg["BLOCK_N"]))
    q_bytes = q_idx.view(torch.uint8) if q_bytes is None else q_bytes
    radix = dict(RADIX=RADIX, RADIX_BITS=RADIX_BITS, HBINS=sel["HBINS"], HISTOGRAM=sel["HISTOGRAM"])
    lookup = use_fast_path(q_idx)
    # The portable kernel takes host offsets: triton-ascend scalarizes (3.2.0) or rejects (rc2)
    # the per-token page lookup; the fast path reads the block table itself.
    if offsets is None:
        offsets = (block_table, block_table) if lookup else token_offsets(keys, scales, block_table, N)
    k_off, s_off = offsets
    args = (q_bytes, weights, keys, scales, block_table, k_off, s_off, seq_lens, logits, ws,
            q_bytes.stride(0), q_bytes.stride(1), weights.stride(0), weights.stride(1), keys.stride(0),
            keys.stride(1), scales.stride(0), scales.stride(1), block_table.stride(0), k_off.stride(0),
            logits.stride(0), ws.stride(0), Hi, Di, N, P, P.bit_length() - 1, tiles)
    logits_plan = LaunchPlan(kernel=_indexer_logits, grid=(B, _per_row(B, tiles, q_idx)), args=args,
                             meta=dict(DOT_PRECISION=DOT_INPUT_PRECISION, NATIVE_FP8=_native_fp8(q_idx),
                                       PAGE_LOOKUP=lookup, PAGE_POW2=lookup and P & (P - 1) == 0,
                                       TILE_IN_PAGE=lookup and P % cfg["BLOCK_N"] == 0 and max(
                                           (P - 1) * keys.stride(1) + Di, (P - 1) * scales.stride(1) + 1) <= INT32_MAX, FILL_TAIL=fill_tail, COUNT_KEYS=sel["HISTOGRAM"],
                                       **radix, **cfg))
    grid = (B, _per_row(B, max(1, cdiv(N, sel["BLOCK"])), q_idx))
    logits_plan.then, _ = select_plans(logits, seq_lens, topk, out, ws, grid, sel,
                                       first_pass=1 if sel["HISTOGRAM"] else 0)
    return logits_plan


def dsa_topk_indexer(q_idx: torch.Tensor, k_cache: torch.Tensor, weights: torch.Tensor, seq_lens: torch.Tensor,
                     block_table: torch.Tensor, topk: int, *, k_scale: Optional[torch.Tensor] = None,
                     out: Optional[torch.Tensor] = None, logits: Optional[torch.Tensor] = None,
                     return_logits: bool = False, check_indices: bool = True,
                     ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The top ``topk`` cached tokens of each sequence by the lightning indexer's logit.

    q_idx [B, Hi, Di] fp8 e4m3fn; k_cache either fp8 (or its uint8 bytes) [num_pages, page_size,
    Di] with ``k_scale`` fp32 [num_pages, page_size], or FlashInfer's packed uint8/int8 [num_pages,
    page_size, 1, 132] pages (per page: page_size rows of 128 fp8 values, then page_size fp32
    scales; Di = 128; ``k_scale`` None); weights [B, Hi] fp32; seq_lens [B]
    int32; block_table [B, max_pages] int32 (entries past a sequence's pages are ignored); topk
    >= 1. Returns (topk_indices [B, topk] int32: logical positions < seq_lens[b], order
    unspecified, -1 past min(topk, seq_len); logits [B, max_pages * page_size] fp32 (-inf from
    seq_len on) or None). ``check_indices=False`` skips the data-dependent checks."""
    fn = "dsa_topk_indexer"
    key = _CALLS.key((q_idx, k_cache, weights, seq_lens, block_table), (k_scale, out, logits),
                     (topk, return_logits, check_indices))
    slot = _CALLS.lookup(key)
    if slot is None:
        pages, P, N = validate(fn, q_idx, k_cache, weights, seq_lens, block_table, topk, k_scale, out, logits,
                               return_logits)
        check_flag(fn, "check_indices", check_indices)
        slot = _CALLS.validated(key)
    else:  # shapes seen valid before: only what depends on addresses is checked again
        pages, P = k_cache.shape[0], k_cache.shape[1]
        N = block_table.shape[1] * P
        if out is not None or logits is not None:
            inputs = {"q_idx": q_idx, "k_cache": k_cache, "weights": weights, "seq_lens": seq_lens,
                      "block_table": block_table, "k_scale": k_scale}
            if out is not None:
                check_no_alias(fn, "out", out, inputs)
            if logits is not None:
                check_no_alias(fn, "logits", logits, {**inputs, "out": out})
    if check_indices:
        check_values_in_range(fn, "seq_lens", seq_lens, 0, N, closed=True)
        used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] * P < seq_lens[:, None]
        check_values_in_range(fn, "block_table", block_table, 0, pages, where=used,
                              what="entries of a sequence's pages")
    B = q_idx.shape[0]
    if out is None:
        out = torch.empty((B, topk), dtype=torch.int32, device=q_idx.device)
    keys, scales = split_index_cache(k_cache, k_scale)
    q_bytes = q_idx.view(torch.uint8)
    # The plan's tensors, each once (the bound plan finds its arguments among them by identity);
    # the portable kernel's per-token offsets are made anew from this call's block table. The
    # histograms and a logits buffer the caller does not see are workspace: a repeat call takes
    # the bound plan's own.
    buf = logits
    if return_logits and buf is None:
        buf = torch.empty((B, N), dtype=torch.float32, device=q_idx.device)
    scratch = buf is None   # (a logits buffer comes with return_logits: validation says so)
    tensors = (q_bytes, weights, keys, scales, block_table, seq_lens, out) + (() if scratch else (buf,))
    offsets = None
    if not use_fast_path(q_idx):
        offsets = token_offsets(keys, scales, block_table, N)
        tensors += offsets
    bound = None if slot is None else slot.get(())
    if bound is not None:
        bound.launch(tensors, launch)
        return out, buf
    if scratch:
        buf = torch.empty((B, N), dtype=torch.float32, device=q_idx.device)
    ws = workspace(B, q_idx.device)
    plan = indexer_plan(q_idx, keys, scales, weights, seq_lens, block_table, int(topk), buf, out, ws,
                        fill_tail=not scratch, q_bytes=q_bytes, offsets=offsets)
    plan.workspace = ((ws, True),) + (((buf, False),) if scratch else ())
    _CALLS.run(slot, (), plan, tensors, is_live(q_idx), launch)
    return out, (buf if return_logits else None)


_CALLS = CallCache("dsa_topk_indexer")
