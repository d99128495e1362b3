"""DeepSeek's lightning indexer (kernels.md section 12): a logit per cached token, then its top-k.

``logit[b, t] = sum_h weights[b, h] * relu(q_idx[b, h] . k_idx[t] * k_scale[t])`` over the paged
index-key cache, for logical positions t < seq_lens[b]. fp8 e4m3 values are read as bytes and
decoded in the kernel by bit arithmetic (sign, 4 exponent bits, 3 mantissa bits): the same code
on every backend, Ascend 910B included, which has no fp8 type, and under the interpreter. Every
e4m3 value is exact in fp16, so the decoded tiles feed an fp16 ``tl.dot`` with an fp32
accumulator: the products are exact and only the fp32 sums round (docs/dsa.md derives the
tolerance from that).

The page lookup is done on the host, once per call (``token_offsets``: vectorized torch), into
element offsets of each token's key row and scale; the kernel then gathers whole rows
(``off[:, None] + arange(Di)[None, :]``), with no division by the page size. The plain layout
(fp8 [pages, P, Di] + fp32 scales [pages, P]) and FlashInfer's packed pages (uint8 [pages, P, 1,
132]: per page, its P rows of 128 fp8 values, then its P fp32 scales; DeepGEMM's layout) are two
sets of strides over the same kernel.

The top-k of the logits is ``torch.topk`` in the wrapper; positions past min(topk, seq_len)
are -1.
"""
from __future__ import annotations

import numbers
from typing import Optional

import torch
import triton
import triton.language as tl

from ._checks import (DOT_INPUT_PRECISION, INT32_MAX, LaunchPlan, cdiv, check_flag, check_index_tensor,
                      check_launchable, check_nonempty, check_output, check_tensor, check_values_in_range,
                      is_interpret, launch, next_pow2, on_ascend)
from ._grid import plan_grid

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
def _indexer_tile(Q, W, K, KS, KOFF, SOFF, SEQ, LOGITS,
                  stride_qb, stride_qh, stride_wb, stride_wh, stride_ob, stride_lb,
                  HI, DI, N, b, n,
                  BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                  CHUNK_H: tl.constexpr, DOT_PRECISION: tl.constexpr):
    b = b.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < DI
    seq_len = tl.load(SEQ + b)
    j = n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = j < seq_len
    k_off = tl.load(KOFF + b * stride_ob + j, mask=ok, other=0)
    s_off = tl.load(SOFF + b * stride_ob + j, mask=ok, other=0)
    k = _e4m3(tl.load(K + k_off[:, None] + offs_d[None, :], mask=ok[:, None] & d_ok[None, :], other=0))
    ks = tl.load(KS + s_off, mask=ok, other=0.0)
    logit = tl.zeros([BLOCK_N], dtype=tl.float32)
    # Heads in chunks of CHUNK_H (all of them at once on a GPU; 16 on Ascend, where 64 decoded
    # query rows and their scores at once took 99.5% of the unified buffer).
    for h0 in tl.static_range(0, BLOCK_H, CHUNK_H):
        heads = h0 + tl.arange(0, CHUNK_H)
        h_ok = heads < HI
        q = _e4m3(tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + offs_d[None, :],
                          mask=h_ok[:, None] & d_ok[None, :], other=0))
        w = tl.load(W + b * stride_wb + heads * stride_wh, mask=h_ok, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)      # [CHUNK_H, BLOCK_N], fp32 sums
        logit += tl.sum(tl.maximum(s * ks[None, :], 0.0) * w[:, None], 0)
    logit = tl.where(ok, logit, float("-inf"))
    tl.store(LOGITS + b * stride_lb + j, logit, mask=j < N)


@triton.jit(do_not_specialize=["HI", "N", "n_tiles", "n_work", "n_programs"])
def _indexer_fwd(Q, W, K, KS, KOFF, SOFF, SEQ, LOGITS,
                 stride_qb, stride_qh, stride_wb, stride_wh, stride_ob, stride_lb,
                 HI, DI, N, n_tiles, n_work, n_programs,
                 BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                 CHUNK_H: tl.constexpr, DOT_PRECISION: tl.constexpr, PERSISTENT: tl.constexpr):
    if PERSISTENT:  # kernels/_grid.py
        for work in range(tl.program_id(0), n_work, n_programs):
            _indexer_tile(Q, W, K, KS, KOFF, SOFF, SEQ, LOGITS, stride_qb, stride_qh, stride_wb, stride_wh,
                          stride_ob, stride_lb, HI, DI, N, work // n_tiles, work % n_tiles,
                          BLOCK_H, BLOCK_N, BLOCK_D, CHUNK_H, DOT_PRECISION)
    else:
        _indexer_tile(Q, W, K, KS, KOFF, SOFF, SEQ, LOGITS, stride_qb, stride_qh, stride_wb, stride_wh,
                      stride_ob, stride_lb, HI, DI, N, tl.program_id(0), tl.program_id(1),
                      BLOCK_H, BLOCK_N, BLOCK_D, CHUNK_H, DOT_PRECISION)


PACKED_DTYPES = (torch.uint8, torch.int8)


def split_index_cache(k_cache: torch.Tensor, k_scale: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(key bytes uint8 [pages, P, Di], scales fp32 [pages, P]) as views of either layout. A
    packed page is page_size rows of 128 fp8 bytes, then page_size fp32 scales (DeepGEMM's
    layout, seen as [pages, P, 1, 132]); both views keep the pool's page stride."""
    if k_cache.dtype in PACKED_DTYPES:
        pages, P = k_cache.shape[0], k_cache.shape[1]
        raw = k_cache.view(torch.uint8)
        page = raw.stride(0)
        keys = raw.as_strided((pages, P, PACKED_DIM), (page, PACKED_DIM, 1))
        words = raw.view(torch.float32)  # [pages, P, 1, 33]: same storage, 4-byte units
        scales = words.as_strided((pages, P), (page // 4, 1), words.storage_offset() + P * PACKED_DIM // 4)
        return keys, scales
    return k_cache.view(torch.uint8), k_scale


def token_offsets(keys: torch.Tensor, scales: torch.Tensor, block_table: torch.Tensor, N: int):
    """Element offsets [B, N] (int64) of each logical position's key row and scale; positions
    whose page the table does not list read offset 0 (the kernel masks them by seq_len)."""
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


def indexer_config(Hi: int, Di: int, *, interpret: bool, ascend: bool) -> dict:
    """BLOCK_N tokens a tile against all Hi heads (BLOCK_H >= 16 for tl.dot's M)."""
    block_h, block_d = max(16, next_pow2(Hi)), max(16, next_pow2(Di))
    if interpret:
        block_n = 64
    elif ascend:
        block_n = 16
    else:
        block_n = 64
    return dict(BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_D=block_d, CHUNK_H=16 if ascend else block_h,
                num_warps=4, num_stages=1 if interpret else 2)


def indexer_logits_plan(q_idx, keys, scales, k_off, s_off, weights, seq_lens, logits) -> LaunchPlan:
    """The logits launch for validated inputs (``keys`` uint8 rows, ``scales`` fp32)."""
    B, Hi, Di = q_idx.shape
    N = logits.shape[1]
    cfg = indexer_config(Hi, Di, interpret=is_interpret(), ascend=on_ascend(q_idx))
    tiles = max(1, cdiv(N, cfg["BLOCK_N"]))
    g = plan_grid((B, tiles), q_idx, vector=False)
    q_bytes = q_idx.view(torch.uint8)
    args = (q_bytes, weights, keys, scales, k_off, s_off, seq_lens, logits,
            q_bytes.stride(0), q_bytes.stride(1), weights.stride(0), weights.stride(1), k_off.stride(0),
            logits.stride(0), Hi, Di, N, tiles, g.n_work, g.n_programs)
    return LaunchPlan(kernel=_indexer_fwd, grid=g.grid, args=args,
                      meta=dict(DOT_PRECISION=DOT_INPUT_PRECISION, PERSISTENT=g.persistent, **cfg))


def select_topk(logits: torch.Tensor, seq_lens: torch.Tensor, topk: int, out: torch.Tensor) -> torch.Tensor:
    """The top ``topk`` positions of each row into ``out``, -1 past min(topk, seq_len)."""
    B, N = logits.shape
    k = min(topk, N)
    out.fill_(-1)
    if k == 0 or B == 0:
        return out
    idx = torch.topk(logits, k, dim=1).indices
    slot = torch.arange(k, device=logits.device)
    keep = slot[None, :] < torch.clamp(seq_lens.to(torch.int64), max=topk)[:, None]
    out[:, :k] = torch.where(keep, idx, -1).to(torch.int32)
    return out


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
    pages, P, N = validate(fn, q_idx, k_cache, weights, seq_lens, block_table, topk, k_scale, out, logits,
                           return_logits)
    check_flag(fn, "check_indices", check_indices)
    if check_indices:
        check_values_in_range(fn, "seq_lens", seq_lens, 0, N, closed=True)
        used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] * P < seq_lens[:, None]
        check_values_in_range(fn, "block_table", block_table, 0, pages, where=used,
                              what="entries of a sequence's pages")
    B = q_idx.shape[0]
    if out is None:
        out = torch.empty((B, topk), dtype=torch.int32, device=q_idx.device)
    buf = logits if logits is not None else torch.empty((B, N), dtype=torch.float32, device=q_idx.device)
    keys, scales = split_index_cache(k_cache, k_scale)
    k_off, s_off = token_offsets(keys, scales, block_table, N)
    launch(indexer_logits_plan(q_idx, keys, scales, k_off, s_off, weights, seq_lens, buf))
    select_topk(buf, seq_lens, int(topk), out)
    return out, (buf if return_logits else None)
