"""Paged-KV decode references (docs/contract.md sections 4 and 6), vectorized PyTorch.

Page table (FlashInfer CSR): sequence b owns the physical pages
``kv_page_indices[kv_page_indptr[b] : kv_page_indptr[b + 1]]``, in order; its logical token t
lives in page ``kv_page_indices[kv_page_indptr[b] + t // page_size]``, slot ``t % page_size``.
``kv_cache`` is ``[num_pages, 2, Hkv, page_size, D]`` (layout "HND") or
``[num_pages, 2, page_size, Hkv, D]`` ("NHD"); index 0 of dim 1 is K, 1 is V.

Both references turn (sequence, logical position, KV head) into row numbers of the cache seen as
a matrix of D-vectors (``token_rows``), gather only those rows (``attend_rows``; ``gather_tokens``
is the same gather as plain K/V tensors), mask the slots that hold no token with -inf, and share
the masked softmax of references/sparse.py: rows with nothing to attend give o = 0, lse = -inf.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from .sparse import attend_selected, selected_slots

LAYOUTS = ("HND", "NHD")


def check_paged_shapes(fn: str, q: torch.Tensor, kv_cache: torch.Tensor, layout: str) -> tuple[int, int]:
    """(Hq, Hkv) after checking the layout name, the ranks and Hq % Hkv == 0."""
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: layout must be one of {LAYOUTS}, got {layout!r}")
    if q.dim() != 3 or kv_cache.dim() != 5:
        raise ValueError(f"{fn}: q must have rank 3 and kv_cache rank 5, got {q.dim()} and {kv_cache.dim()}")
    Hq = q.shape[1]
    Hkv = kv_cache.shape[2] if layout == "HND" else kv_cache.shape[3]
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"{fn}: Hq={Hq} must be a multiple of Hkv={Hkv}")
    return Hq, Hkv


def page_size_of(kv_cache: torch.Tensor, layout: str = "HND") -> int:
    """Tokens per page of a paged cache in the given layout."""
    return kv_cache.shape[3] if layout == "HND" else kv_cache.shape[2]


def token_rows(kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
               positions: torch.Tensor, heads: torch.Tensor, valid: torch.Tensor, *,
               layout: str = "HND") -> tuple[torch.Tensor, torch.Tensor]:
    """Where the K and V rows of logical tokens live: row numbers into ``cache_rows(kv_cache)``.

    positions [B, ...] (int): logical token positions of sequence b (leading dim = batch);
    heads (int, broadcastable against positions): the KV head to read at each position;
    valid (bool, shaped like positions): slots that hold a token. Invalid slots are never looked
    up in the page table: they point at token 0 of the first listed page (a real token).
    Returns (k_row, v_row), int64, shaped broadcast(positions, heads). Needs >= 1 listed page.
    """
    B = positions.shape[0]
    _, _, d1, d2, _ = kv_cache.shape
    page_size, Hkv = (d2, d1) if layout == "HND" else (d1, d2)
    batch = torch.arange(B, device=positions.device).view(B, *([1] * (positions.dim() - 1)))
    positions = torch.where(valid, positions.to(torch.int64), 0)
    entry = torch.where(valid, kv_page_indptr.to(torch.int64)[batch] + positions // page_size, 0)
    page = kv_page_indices.to(torch.int64)[entry]
    slot = positions % page_size
    heads = heads.to(torch.int64)
    # Row of kv_cache viewed as [num_pages * 2 * Hkv * page_size, D]; kv = 0 for K, 1 for V.
    if layout == "HND":
        k_row = ((page * 2 + 0) * Hkv + heads) * page_size + slot
        v_row = ((page * 2 + 1) * Hkv + heads) * page_size + slot
    else:
        k_row = ((page * 2 + 0) * page_size + slot) * Hkv + heads
        v_row = ((page * 2 + 1) * page_size + slot) * Hkv + heads
    return k_row, v_row


def cache_rows(kv_cache: torch.Tensor) -> torch.Tensor:
    """kv_cache as a [num_pages * 2 * Hkv * page_size, D] matrix of rows (a view when contiguous)."""
    return kv_cache.reshape(-1, kv_cache.shape[-1])


def gather_tokens(kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                  positions: torch.Tensor, heads: torch.Tensor, valid: torch.Tensor, *,
                  layout: str = "HND") -> tuple[torch.Tensor, torch.Tensor]:
    """K and V rows (kv_cache dtype) of logical tokens, [*broadcast(positions, heads).shape, D]
    each; arguments as in ``token_rows``. Rows of invalid slots come back as zeros."""
    shape = torch.broadcast_shapes(positions.shape, heads.shape)
    D = kv_cache.shape[-1]
    if kv_page_indices.numel() == 0:  # no pages at all: nothing can be valid
        return kv_cache.new_zeros((*shape, D)), kv_cache.new_zeros((*shape, D))
    rows = cache_rows(kv_cache)
    k_row, v_row = token_rows(kv_cache, kv_page_indptr, kv_page_indices, positions, heads, valid,
                              layout=layout)
    drop = ~valid.unsqueeze(-1)
    k = rows.index_select(0, k_row.reshape(-1)).view(*shape, D).masked_fill_(drop, 0)
    v = rows.index_select(0, v_row.reshape(-1)).view(*shape, D).masked_fill_(drop, 0)
    return k, v


def attend_rows(q: torch.Tensor, rows: torch.Tensor, k_row: torch.Tensor, v_row: torch.Tensor,
                valid: torch.Tensor, *, scale: float, compute_dtype: torch.dtype,
                score_correction: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
                k_scale: float = 1.0, v_scale: float = 1.0,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of query rows over gathered cache rows.

    q [..., M, D]; rows [R, D]; k_row / v_row [..., N] row numbers (the same N slots for the M
    query rows); valid bool broadcastable to [..., N]. Scores are ``q @ K^T * scale`` in
    compute_dtype, minus ``score_correction(q, K)`` ([..., M, N], called with q and the K rows in
    the input dtype) if given; then the masked softmax of ``attend_selected``.
    Returns (o [..., M, D], lse [..., M]).

    ``k_scale`` / ``v_scale``: per-tensor dequantisation scales of an fp8 cache (kernels.md
    section 11): the K and V rows used are ``rows.to(compute_dtype) * scale``, exactly in
    float64 (an fp8 value has 4 significant bits, an fp32 scale 24).

    Only the selected rows are gathered, and the V rows reuse the K rows' buffers: on CPU, first
    touching a fresh multi-GB float64 tensor costs more than the arithmetic.
    """
    D = rows.shape[-1]
    shape = (*k_row.shape, D)
    gathered = rows.index_select(0, k_row.reshape(-1)).view(shape)     # K, input dtype (fresh)
    kv = gathered.to(compute_dtype)                                   # may be `gathered` itself
    if k_scale != 1.0:
        kv = kv * k_scale                                             # dequantised K (fresh)
    scores = (q.to(compute_dtype) @ kv.transpose(-1, -2)) * scale     # [..., M, N]
    if score_correction is not None:
        scores = scores - score_correction(q, gathered).to(compute_dtype)
    torch.index_select(rows, 0, v_row.reshape(-1), out=gathered.view(-1, D))  # now V
    # Masked after the conversion: fp8 has no masked_fill, and the NaN encodings of unused slots
    # convert to NaN, which the fill replaces.
    kv.copy_(gathered)
    kv.masked_fill_(~valid.unsqueeze(-1), 0)
    if v_scale != 1.0:
        kv.mul_(v_scale)
    return attend_selected(scores, valid.unsqueeze(-2), kv)


def sequence_lengths(kv_page_indptr: torch.Tensor, kv_last_page_len: Optional[torch.Tensor],
                     page_size: int) -> torch.Tensor:
    """L_b = page_size * (pages_b - 1) + last_b, 0 for a zero-page sequence; without
    kv_last_page_len, every page counts as full (page_size * pages_b). int64 [B]."""
    pages = (kv_page_indptr[1:] - kv_page_indptr[:-1]).to(torch.int64)
    if kv_last_page_len is None:
        return pages * page_size
    full = page_size * (pages - 1) + kv_last_page_len.to(torch.int64)
    return torch.where(pages > 0, full, 0)


def _empty_result(q: torch.Tensor, compute_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """No page listed at all: every row has nothing to attend."""
    o = torch.zeros(q.shape, dtype=compute_dtype, device=q.device)
    return o, torch.full(q.shape[:-1], float("-inf"), dtype=compute_dtype, device=q.device)


def paged_decode_reference(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                           kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                           layout: str = "HND", scale: Optional[float] = None,
                           compute_dtype: torch.dtype = torch.float64,
                           k_scale: float = 1.0, v_scale: float = 1.0,
                           ) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Hq, D] over every token of each paged sequence -> (o [B, Hq, D], lse [B, Hq]).

    Sequences are gathered padded to the longest one (B * Hkv * max_len * D values, one buffer
    for K then V); the G query heads of KV head hk (h = hk * G + g) share its rows. A zero-page
    sequence gives o = 0, lse = -inf. A ``torch.float8_e4m3fn`` cache holds K / ``k_scale`` and
    V / ``v_scale`` (kernels.md section 11): the rows are dequantised (``attend_rows``).
    """
    Hq, Hkv = check_paged_shapes("paged_decode_reference", q, kv_cache, layout)
    B, _, D = q.shape
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if kv_page_indices.numel() == 0:
        return _empty_result(q, compute_dtype)
    lengths = sequence_lengths(kv_page_indptr, kv_last_page_len, page_size_of(kv_cache, layout))
    max_len = int(lengths.max())

    positions = torch.arange(max_len, device=q.device).expand(B, 1, max_len)   # [B, 1, N]
    valid = positions < lengths.view(B, 1, 1)
    heads = torch.arange(Hkv, device=q.device).view(1, Hkv, 1)
    k_row, v_row = token_rows(kv_cache, kv_page_indptr, kv_page_indices, positions, heads, valid,
                              layout=layout)                                    # [B, Hkv, N]
    o, lse = attend_rows(q.reshape(B, Hkv, G, D), cache_rows(kv_cache), k_row, v_row, valid,
                         scale=scale, compute_dtype=compute_dtype, k_scale=float(k_scale),
                         v_scale=float(v_scale))                               # [B, Hkv, G, D]
    return o.reshape(B, Hq, D), lse.reshape(B, Hq)


def sparse_paged_decode_reference(q: torch.Tensor, kv_cache: torch.Tensor, indptr: torch.Tensor,
                                  indices: torch.Tensor, sparse_ind: torch.Tensor,
                                  sparse_nnz: torch.Tensor, *, layout: str = "HND",
                                  scale: Optional[float] = None,
                                  compute_dtype: torch.dtype = torch.float64,
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Hq, D]; sparse_ind [B, Hq, L_max] logical token positions of sequence b (the first
    sparse_nnz[b, h] count, as a multiset; the rest is ignored) -> (o [B, Hq, D], lse [B, Hq]).

    Only the selected rows are gathered (B * Hq * L_max * D values, one buffer for K then V).
    """
    return _sparse_paged("sparse_paged_decode_reference", q, kv_cache, indptr, indices, sparse_ind,
                         sparse_nnz, layout=layout, scale=scale, compute_dtype=compute_dtype)


def _sparse_paged(fn: str, q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, *, layout, scale,
                  compute_dtype, score_correction=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Shared by sparse_paged_decode_reference and magicpig_decode_reference."""
    Hq, Hkv = check_paged_shapes(fn, q, kv_cache, layout)
    B, _, D = q.shape
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if indices.numel() == 0:
        return _empty_result(q, compute_dtype)
    positions, valid = selected_slots(sparse_ind, sparse_nnz)                   # [B, Hq, L]
    heads = (torch.arange(Hq, device=q.device) // G).view(1, Hq, 1)
    k_row, v_row = token_rows(kv_cache, indptr, indices, positions, heads, valid, layout=layout)
    o, lse = attend_rows(q.unsqueeze(2), cache_rows(kv_cache), k_row, v_row, valid, scale=scale,
                         compute_dtype=compute_dtype, score_correction=score_correction)
    return o.squeeze(2), lse.squeeze(2)                                         # [B, Hq, D], [B, Hq]
