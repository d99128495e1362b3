"""Planted-bug implementations of sparse_paged_decode (kernels.md section 6); the suite must fail
each.

Each mutant has the signature of ``kernels.sparse_paged_decode.sparse_paged_decode`` and
introduces one bug. ``sparse_paged_decode_wrong_kv_head`` wraps the project's kernel; the others
are vectorized torch re-implementations (float64 math) built on ``_paged_decode`` below, which
mutants/magicpig_decode.py shares. Nothing here calls references/: the math is written out.
"""
from __future__ import annotations

import math

import torch

from .sparse_decode import LOG2E, _attend, _dedup, _valid_slots, _write


def _rows(kv_cache, layout, indptr, indices, positions, valid, heads, *, hnd_formula=False,
          ignore_indptr=False, swap_kv=False):
    """(k_row, v_row) int64 [B, Hq, N]: rows of ``kv_cache.reshape(-1, D)`` holding the K and V
    of logical token ``positions`` (sequence b = leading index) of KV head ``heads``."""
    _, _, d1, d2, _ = kv_cache.shape
    # The buggy form takes page size and head count from the HND positions whatever the layout.
    P, Hkv = (d2, d1) if (layout == "HND" or hnd_formula) else (d1, d2)
    B = positions.shape[0]
    b = torch.arange(B, device=positions.device).view(B, 1, 1)
    pos = torch.where(valid, positions, 0)
    entry = pos // P if ignore_indptr else indptr.to(torch.int64)[b] + pos // P
    entry = torch.where(valid, entry, 0).clamp(max=max(indices.numel() - 1, 0))
    page = indices.to(torch.int64)[entry] if indices.numel() else torch.zeros_like(entry)
    slot = pos % P
    kk, vv = (1, 0) if swap_kv else (0, 1)
    if layout == "HND" or hnd_formula:
        k_row = ((page * 2 + kk) * Hkv + heads) * P + slot
        v_row = ((page * 2 + vv) * Hkv + heads) * P + slot
    else:
        k_row = ((page * 2 + kk) * P + slot) * Hkv + heads
        v_row = ((page * 2 + vv) * P + slot) * Hkv + heads
    return k_row, v_row


def _paged_decode(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, *, layout, kv_last_page_len,
                  scale, return_lse, out, lse, correction=None, lsh=None, dedup=False,
                  read_padding=False, lse_base2=False, head_modulo=False, hnd_formula=False,
                  ignore_indptr=False, swap_kv=False):
    """Sparse paged decode in float64 with switchable bugs. ``correction(qd, kd, dots, lsh)``
    (float64, [B, Hq, N]) is added to the scaled scores (MagicPIG); ``lsh`` is passed through."""
    B, Hq, D = q.shape
    Hkv = kv_cache.shape[2] if layout == "HND" else kv_cache.shape[3]
    P = kv_cache.shape[3] if layout == "HND" else kv_cache.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    valid = _valid_slots(sparse_ind, sparse_nnz)
    positions = sparse_ind.to(torch.int64)
    if read_padding:
        # Reads every slot of the row, whatever nnz says, index clamped into the sequence.
        pages = (indptr[1:] - indptr[:-1]).to(torch.int64)
        if kv_last_page_len is not None:
            length = torch.where(pages > 0, P * (pages - 1) + kv_last_page_len.to(torch.int64), 0)
        else:
            length = pages * P
        valid = (length > 0).view(B, 1, 1).expand_as(valid)
        positions = torch.minimum(positions.clamp(min=0), (length - 1).clamp(min=0).view(B, 1, 1))
    if dedup:
        valid = _dedup(positions, valid)
    h = torch.arange(Hq, device=q.device)
    heads = ((h % Hkv) if head_modulo else (h // G)).view(1, Hq, 1)
    k_row, v_row = _rows(kv_cache, layout, indptr, indices, positions, valid, heads,
                         hnd_formula=hnd_formula, ignore_indptr=ignore_indptr, swap_kv=swap_kv)
    rows = kv_cache.reshape(-1, D)
    k_sel, v_sel = rows[k_row], rows[v_row]                                  # [B, Hq, N, D]
    corr = None if correction is None else (lambda qd, kd, dots: correction(qd, kd, dots, lsh))
    o, lse_val = _attend(q, k_sel, v_sel, valid, scale, correction=corr)
    if lse_base2:
        lse_val = lse_val * LOG2E
    return _write(o, lse_val, out, lse, return_lse, (B, Hq, D), (B, Hq), q.dtype, q.device)


def _kw(layout, kv_last_page_len, scale, return_lse, out, lse):
    return dict(layout=layout, kv_last_page_len=kv_last_page_len, scale=scale, return_lse=return_lse,
                out=out, lse=lse)


# --- the mutants --------------------------------------------------------------------------------

def sparse_paged_decode_wrong_kv_head(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                      layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                      out=None, lse=None, num_splits=None, check_indices=True):
    """Query head h reads KV head h % Hkv (the cache's heads tiled) instead of h // G."""
    from kernels.sparse_paged_decode import sparse_paged_decode

    axis = 2 if layout == "HND" else 3
    reps = [1] * kv_cache.dim()
    reps[axis] = q.shape[1] // kv_cache.shape[axis]
    tiled = kv_cache.repeat(*reps)
    return sparse_paged_decode(q, tiled, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                               layout=layout, kv_last_page_len=kv_last_page_len, scale=scale,
                               return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                               check_indices=check_indices)


def sparse_paged_decode_ignores_layout(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                       layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                       out=None, lse=None, num_splits=None, check_indices=True):
    """Addresses an NHD cache with the HND row formula (page size and heads from HND positions)."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), hnd_formula=True)


def sparse_paged_decode_ignores_indptr(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                       layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                       out=None, lse=None, num_splits=None, check_indices=True):
    """Page lookup indices[t // P] without the sequence's start indptr[b]: batch b > 0 reads seq 0's pages."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), ignore_indptr=True)


def sparse_paged_decode_dedups_indices(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                       layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                       out=None, lse=None, num_splits=None, check_indices=True):
    """Set semantics: a token listed twice in a row is attended once (multiset weights lost)."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), dedup=True)


def sparse_paged_decode_reads_padding(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                      layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                      out=None, lse=None, num_splits=None, check_indices=True):
    """Ignores nnz and reads all L_max slots, clamped into the sequence: -1 is token 0, garbage the last."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), read_padding=True)


def sparse_paged_decode_swaps_k_v(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                  layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                  out=None, lse=None, num_splits=None, check_indices=True):
    """Reads K from index 1 and V from index 0 of the cache's dim 1 (K/V halves swapped)."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), swap_kv=True)


def sparse_paged_decode_lse_base2(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                  layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                  out=None, lse=None, num_splits=None, check_indices=True):
    """Returns the LSE in base 2 (the kernel's exp2 domain), not natural log."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), lse_base2=True)


MUTANTS = {f.__name__: f for f in (
    sparse_paged_decode_wrong_kv_head, sparse_paged_decode_ignores_layout,
    sparse_paged_decode_ignores_indptr, sparse_paged_decode_dedups_indices,
    sparse_paged_decode_reads_padding, sparse_paged_decode_swaps_k_v, sparse_paged_decode_lse_base2)}
