"""Multi-head latent attention over a paged latent cache (spec/kernels.md sections 10 and 11),
vectorized PyTorch.

Every query head reads the same latent row of each token: ``ckv`` (Dc wide, also the value) and
``kpe`` (Dr wide, rope part of the key). The score of head h against token j is
``scale * (q_nope[h] . ckv_j + q_pe[h] . kpe_j)``, the output ``softmax(score) @ ckv``.

Page table as in section 4 (FlashInfer CSR): sequence b owns pages
``kv_page_indices[kv_page_indptr[b]:kv_page_indptr[b + 1]]`` and ``L_b = P * (pages_b - 1) +
last_b`` tokens. Each sequence is gathered into a dense ``[B, N, D]`` view (N the longest
sequence) with index arithmetic; slots past L_b are masked (and zeroed, so the NaN a cache may
hold there never reaches a product).

FP8 caches (section 11): the value used is ``cache.to(float32) * scale``, per tensor, with
``k_scale`` on the key side (ckv and kpe inside the score) and ``v_scale`` on the value side (ckv
in the output). The same convention applies whatever the cache dtype (a 16-bit cache with scales
other than 1.0 is scaled the same way).

Prefill is chunked prefill over a prefix cache: sequence b has ``n_b`` queries (rows
``qo_indptr[b]:qo_indptr[b + 1]`` of q) and ``m_b = L_b`` cached tokens, the queries being the
last n_b of them. Causal, aligned bottom-right: query i sees positions ``<= m_b - n_b + i``.

A row with nothing to attend (a sequence with no page) gives o = 0, lse = -inf. LSE is natural-log.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

#: Elements of gathered cache a decode reference pass holds at once (float64: 512 MB).
GATHER_ELEMENTS = 1 << 26
FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn",) if hasattr(torch, n))


def dequantised(cache: torch.Tensor, scale: float, compute_dtype: torch.dtype) -> torch.Tensor:
    """``cache * scale`` in compute_dtype: for fp8 the same as ``fp8.to(float32) * scale`` (every e4m3
    value is exact in fp16, bf16, fp32 and fp64)."""
    return cache.to(compute_dtype) * float(scale)


def sequence_lengths(kv_page_indptr: torch.Tensor, kv_last_page_len: torch.Tensor, page_size: int) -> torch.Tensor:
    """int64 [B]: L_b = page_size * (pages_b - 1) + last_b, 0 for a sequence without pages."""
    pages = (kv_page_indptr[1:] - kv_page_indptr[:-1]).to(torch.int64)
    return torch.where(pages > 0, page_size * (pages - 1) + kv_last_page_len.to(torch.int64), 0)


def gather_latent(cache: torch.Tensor, kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                  lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows [B, N, D] in cache's dtype, valid [B, N]): token t of sequence b is slot t % P of page
    ``kv_page_indices[kv_page_indptr[b] + t // P]``. Invalid slots are read from slot 0 of page 0
    of the pool (never from the page table past a sequence's own pages) and must be masked."""
    page_size = cache.shape[1]
    B = lengths.shape[0]
    N = max(int(lengths.max()) if B else 0, 1)
    t = torch.arange(N, device=cache.device)
    valid = t[None, :] < lengths[:, None].to(cache.device)
    entry = kv_page_indptr[:-1].to(torch.int64)[:, None] + t[None, :] // page_size
    if kv_page_indices.numel():
        page = kv_page_indices.to(torch.int64)[torch.where(valid, entry, 0)]
    else:
        page = torch.zeros_like(entry)
    page = torch.where(valid, page, 0)
    slot = torch.where(valid, t[None, :] % page_size, 0)
    return cache[page, slot], valid


def _mla_attend(qn: torch.Tensor, qp: torch.Tensor, ckv: torch.Tensor, kpe: torch.Tensor, visible: torch.Tensor,
                scale: float, k_scale: float, v_scale: float, compute_dtype: torch.dtype):
    """qn [B, M, Dc], qp [B, M, Dr] query rows of each sequence; ckv [B, N, Dc], kpe [B, N, Dr]
    (cache dtype); visible bool [B, M, N]. Returns (o [B, M, Dc], lse [B, M]) in compute_dtype."""
    zero = ~visible.any(-2)[..., None]  # [B, N, 1]: slots no row sees (may hold NaN, or lie past the sequence)
    key_c = dequantised(ckv, k_scale, compute_dtype).masked_fill(zero, 0)
    key_r = dequantised(kpe, k_scale, compute_dtype).masked_fill(zero, 0)
    value = dequantised(ckv, v_scale, compute_dtype).masked_fill(zero, 0)
    scores = (qn.to(compute_dtype) @ key_c.transpose(-1, -2) + qp.to(compute_dtype) @ key_r.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)                                   # -inf for an empty row
    p = torch.exp(scores - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    return p @ value, lse


def default_scale(Dc: int, Dr: int, scale: Optional[float]) -> float:
    return 1.0 / math.sqrt(Dc + Dr) if scale is None else float(scale)


def mla_paged_decode_reference(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                               kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                               kv_last_page_len: torch.Tensor, *, scale: Optional[float] = None,
                               k_scale: float = 1.0, v_scale: float = 1.0,
                               compute_dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """q_nope [B, H, Dc], q_pe [B, H, Dr]; ckv_cache [pages, P, Dc], kpe_cache [pages, P, Dr]
    -> (o [B, H, Dc], lse [B, H]) in compute_dtype; ``scale=None``: 1/sqrt(Dc + Dr)."""
    B, H, Dc = q_nope.shape
    Dr = q_pe.shape[-1]
    scale = default_scale(Dc, Dr, scale)
    lengths = sequence_lengths(kv_page_indptr, kv_last_page_len, ckv_cache.shape[1])
    # Blocks of sequences bound the gathered cache's float64 copies (128 sequences of 8192 tokens
    # would take 13 GB at once); each block is one vectorized pass.
    longest = max(int(lengths.max()) if B else 0, 1)
    step = max(1, GATHER_ELEMENTS // (longest * (Dc + Dr)))
    o_parts, lse_parts = [], []
    for b0 in range(0, max(B, 1), step):
        rows = slice(b0, b0 + step)
        indptr = kv_page_indptr[b0:b0 + step + 1]
        ckv, valid = gather_latent(ckv_cache, indptr, kv_page_indices, lengths[rows])
        kpe, _ = gather_latent(kpe_cache, indptr, kv_page_indices, lengths[rows])
        visible = valid[:, None, :].expand(valid.shape[0], H, valid.shape[1])
        o, lse = _mla_attend(q_nope[rows], q_pe[rows], ckv, kpe, visible, scale, k_scale, v_scale, compute_dtype)
        o_parts.append(o)
        lse_parts.append(lse)
    return torch.cat(o_parts), torch.cat(lse_parts)


def mla_paged_prefill_reference(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor,
                                ckv_cache: torch.Tensor, kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                causal: bool = True, scale: Optional[float] = None, k_scale: float = 1.0,
                                v_scale: float = 1.0, compute_dtype: torch.dtype = torch.float64,
                                ) -> tuple[torch.Tensor, torch.Tensor]:
    """q_nope [T, H, Dc], q_pe [T, H, Dr] packed by qo_indptr [B + 1] (T = qo_indptr[B]) over the
    paged cache -> (o [T, H, Dc], lse [T, H]). Causal: query i of sequence b (n_b queries, m_b
    cached tokens) sees positions <= m_b - n_b + i; otherwise all m_b."""
    T, H, Dc = q_nope.shape
    Dr = q_pe.shape[-1]
    scale = default_scale(Dc, Dr, scale)
    lengths = sequence_lengths(kv_page_indptr, kv_last_page_len, ckv_cache.shape[1])
    ckv, valid = gather_latent(ckv_cache, kv_page_indptr, kv_page_indices, lengths)
    kpe, _ = gather_latent(kpe_cache, kv_page_indptr, kv_page_indices, lengths)
    B, N = valid.shape
    starts = qo_indptr[:-1].to(torch.int64)
    counts = qo_indptr[1:].to(torch.int64) - starts
    n_max = max(int(counts.max()) if B else 0, 1)
    # Queries padded per sequence: row (b, i) is query starts[b] + i when i < counts[b].
    i = torch.arange(n_max, device=q_nope.device)
    has_q = i[None, :] < counts[:, None]                                    # [B, n_max]
    rows = torch.where(has_q, starts[:, None] + i[None, :], 0).clamp(max=max(T - 1, 0))
    qn = q_nope[rows] if T else q_nope.new_zeros((B, n_max, H, Dc))
    qp = q_pe[rows] if T else q_pe.new_zeros((B, n_max, H, Dr))
    pos = torch.arange(N, device=q_nope.device)
    o_parts, lse_parts = [], []
    # Query blocks bound the [B, block * H, N] scores (a 4096-query chunk over 32k cached tokens
    # would take 17 GB of float64 at once); each block is one vectorized pass.
    block = max(1, (1 << 27) // max(1, B * H * N))
    for i0 in range(0, n_max, block):
        ib = i[i0:i0 + block]
        visible = valid[:, None, :] & has_q[:, i0:i0 + block, None]                 # [B, nb, N]
        if causal:
            last_seen = lengths[:, None] - counts[:, None] + ib[None, :]           # [B, nb]
            visible = visible & (pos[None, None, :] <= last_seen[:, :, None])
        nb = ib.shape[0]
        visible = visible[:, :, None, :].expand(B, nb, H, N).reshape(B, nb * H, N)
        o, lse = _mla_attend(qn[:, i0:i0 + block].reshape(B, nb * H, Dc), qp[:, i0:i0 + block].reshape(B, nb * H, Dr),
                             ckv, kpe, visible, scale, k_scale, v_scale, compute_dtype)
        o_parts.append(o.view(B, nb, H, Dc))
        lse_parts.append(lse.view(B, nb, H))
    o, lse = torch.cat(o_parts, 1), torch.cat(lse_parts, 1)
    out = torch.zeros((T, H, Dc), dtype=compute_dtype, device=q_nope.device)
    out_lse = torch.full((T, H), float("-inf"), dtype=compute_dtype, device=q_nope.device)
    out[rows[has_q]] = o[has_q]
    out_lse[rows[has_q]] = lse[has_q]
    return out, out_lse
