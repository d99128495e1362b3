"""DeepSeek sparse attention references (kernels.md section 12), vectorized PyTorch.

``dsa_sparse_attention_reference``: every query token t attends the multiset of latent cache
slots listed in ``sparse_indices[t]`` (flat ids ``page * page_size + slot``, -1 = none, anywhere
in the row). The listed rows of the latent cache (``ckv``, the values too) and of the rope cache
(``kpe``) are gathered by flat id; the H heads of a token share them. A row listing nothing
gives o = 0, lse = -inf (``attend_selected``).

``dsa_indexer_logits_reference``: the lightning indexer's logit of every logical position of
each sequence, ``sum_h weights[b, h] * relu(q_idx[b, h] . k_idx[t] * k_scale[t])``, through the
block table; positions at or past ``seq_lens[b]`` are -inf. fp8 values are dequantised exactly
(``fp8.to(float64)``); the packed 132-byte layout is unpacked first (``unpack_index_cache``).
``dsa_topk_reference`` is one right answer of the top-k (ties broken by torch.topk): the suite
judges an implementation's top-k as a set against the logits (cases/dsa_topk_indexer.py), not
against this choice.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from .sparse import attend_selected

#: FlashInfer's (DeepGEMM's) packed index-key cache, uint8 [num_pages, page_size, 1, 132]: each
#: page holds its page_size rows of 128 fp8 values, then their page_size fp32 scales (4 bytes
#: each); the [.., 132] view is a size, not a row layout.
PACKED_DIM = 128
PACKED_ROW = PACKED_DIM + 4


def latent_rows(cache: torch.Tensor) -> torch.Tensor:
    """A [num_pages, page_size, D] cache (any strides) as [num_pages * page_size, D] rows by flat id."""
    return cache.reshape(-1, cache.shape[-1])


def dsa_sparse_attention_reference(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                   kpe_cache: torch.Tensor, sparse_indices: torch.Tensor, *,
                                   scale: Optional[float] = None, k_scale: float = 1.0,
                                   v_scale: float = 1.0, compute_dtype: torch.dtype = torch.float64,
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """q_nope [T, H, Dc], q_pe [T, H, Dr], ckv_cache [pages, P, Dc], kpe_cache [pages, P, Dr],
    sparse_indices [T, topk] -> (o [T, H, Dc], lse [T, H]) in compute_dtype.

    score = scale * (q_nope . ckv + q_pe . kpe) (both scaled by k_scale), o = softmax @ (ckv *
    v_scale); scale None: 1/sqrt(Dc + Dr)."""
    T, H, Dc = q_nope.shape
    Dr = q_pe.shape[-1]
    scale = 1.0 / math.sqrt(Dc + Dr) if scale is None else float(scale)
    ids = sparse_indices.to(torch.int64)
    K = ids.shape[1]
    valid = ids >= 0                                                          # [T, K]
    rows = torch.where(valid, ids, 0).reshape(-1)
    keep = valid.unsqueeze(-1)
    ckv = latent_rows(ckv_cache).index_select(0, rows).view(T, K, Dc).to(compute_dtype)
    kpe = latent_rows(kpe_cache).index_select(0, rows).view(T, K, Dr).to(compute_dtype)
    # Slots listing none are zeroed (an fp8 NaN or a stale row there must not leak in).
    ckv = ckv.masked_fill(~keep, 0)
    kpe = kpe.masked_fill(~keep, 0)
    scores = (q_nope.to(compute_dtype) @ ckv.transpose(-1, -2)
              + q_pe.to(compute_dtype) @ kpe.transpose(-1, -2)) * (scale * float(k_scale))  # [T, H, K]
    o, lse = attend_selected(scores, valid.unsqueeze(1), ckv * float(v_scale))
    return o, lse


def unpack_index_cache(k_cache: torch.Tensor, k_scale: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(values fp8 [pages, P, Di], scales fp32 [pages, P]) of either layout: the plain one
    (returned as given) or FlashInfer's packed uint8/int8 [pages, P, 1, 132] pages."""
    if k_cache.dtype in (torch.uint8, torch.int8):
        pages, P = k_cache.shape[0], k_cache.shape[1]
        flat = k_cache.reshape(pages, P * PACKED_ROW).view(torch.uint8)
        values = flat[:, :P * PACKED_DIM].reshape(pages, P, PACKED_DIM).view(torch.float8_e4m3fn)
        scales = flat[:, P * PACKED_DIM:].contiguous().view(torch.float32)
        return values, scales
    return k_cache, k_scale


def dsa_indexer_logits_reference(q_idx: torch.Tensor, k_cache: torch.Tensor, k_scale: Optional[torch.Tensor],
                                 weights: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor, *,
                                 compute_dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """q_idx [B, Hi, Di] fp8, k_cache (plain or packed), weights [B, Hi], seq_lens [B],
    block_table [B, max_pages] -> logits [B, max_pages * P] in compute_dtype (-inf from seq_lens[b] on)."""
    values, scales = unpack_index_cache(k_cache, k_scale)
    B = q_idx.shape[0]
    P = values.shape[1]
    N = block_table.shape[1] * P
    pos = torch.arange(N, device=q_idx.device)
    valid = pos[None, :] < seq_lens.to(torch.int64)[:, None]                        # [B, N]
    page = block_table.to(torch.int64)[:, pos // P]                                  # [B, N]
    row = torch.where(valid, page * P + pos % P, 0)
    k = latent_rows(values).index_select(0, row.reshape(-1)).view(B, N, values.shape[-1]).to(compute_dtype)
    ks = scales.reshape(-1).index_select(0, row.reshape(-1)).view(B, N).to(compute_dtype)
    k = k.masked_fill(~valid.unsqueeze(-1), 0)                 # slots past the sequence may hold NaN
    ks = ks.masked_fill(~valid, 0)
    dots = q_idx.to(compute_dtype) @ k.transpose(-1, -2)                             # [B, Hi, N]
    logits = (weights.to(compute_dtype).unsqueeze(-1) * torch.relu(dots * ks.unsqueeze(1))).sum(1)
    return logits.masked_fill(~valid, float("-inf"))


def indexer_error_bound(q_idx: torch.Tensor, k_cache: torch.Tensor, k_scale: Optional[torch.Tensor],
                        weights: torch.Tensor, seq_lens: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """sum_h |w_h| * |k_scale_t| * sum_d |q_hd| |k_td| per position [B, N] (float64): the size of
    the sums whose fp32 rounding bounds any implementation's logit error (docs/dsa.md)."""
    values, scales = unpack_index_cache(k_cache, k_scale)
    return dsa_indexer_logits_reference(q_idx.to(torch.float64).abs(), values.to(torch.float64).abs(),
                                        scales.abs(), weights.abs(), seq_lens, block_table)


def dsa_topk_reference(logits: torch.Tensor, seq_lens: torch.Tensor, topk: int) -> torch.Tensor:
    """One top-k of each row of ``logits`` [B, N] (-inf past the sequence): int32 [B, topk],
    logical positions first, -1 past min(topk, seq_len)."""
    B, N = logits.shape
    k = min(topk, N)
    idx = torch.topk(logits, k, dim=1).indices if k else logits.new_zeros((B, 0), dtype=torch.int64)
    count = torch.clamp(seq_lens.to(torch.int64), max=topk)
    slot = torch.arange(k, device=logits.device)
    idx = torch.where(slot[None, :] < count[:, None], idx, -1)
    out = torch.full((B, topk), -1, dtype=torch.int32, device=logits.device)
    out[:, :k] = idx.to(torch.int32)
    return out
