"""Planted-bug implementations of magicpig_decode (kernels.md section 7); the suite must fail each.

Each mutant has the signature of ``kernels.magicpig_decode.magicpig_decode`` and introduces one
bug. ``magicpig_decode_swaps_k_and_l`` wraps the project's kernel; the others are vectorized
torch re-implementations (float64) on the paged core of mutants/sparse_paged_decode.py with the
LSH correction written out below. Nothing here calls references/.

The contract (clamp form): c = clamp(q.k / (|q| |k| + 1e-8), -1 + 1e-7, 1 - 1e-7),
p = clamp(1 - acos(c) / pi, 0, 1), P = p ** K,
u = max(1 - (1 - P) ** L - L * P * (1 - P) ** (L - 1), 1e-10), score = q.k * scale - log(u).
"""
from __future__ import annotations

import math

import torch

from .sparse_paged_decode import _kw, _paged_decode


def _collision(qd, kd, dots, K, L, *, normalise_k=True, cos_scale=1.0, floor=True):
    """u [B, Hq, N] (float64) for K, L [B, Hq]."""
    qn = qd.norm(dim=-1)[..., None]                                      # [B, Hq, 1]
    kn = kd.norm(dim=-1) if normalise_k else torch.ones_like(dots)       # [B, Hq, N]
    c = (dots * cos_scale / (qn * kn + 1e-8)).clamp(-1 + 1e-7, 1 - 1e-7)
    p = (1 - torch.acos(c) / math.pi).clamp(0, 1)
    Kx, Lx = K.double()[..., None], L.double()[..., None]
    P = torch.pow(p, Kx)
    u = 1 - torch.pow(1 - P, Lx) - Lx * P * torch.pow(1 - P, Lx - 1)
    return u.clamp_min(1e-10) if floor else u


def _magicpig(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, K, L, *, layout, kv_last_page_len,
              scale, return_lse, out, lse, log_form="clamp", sign=-1.0, lsh_per_kv_head=False,
              **collision_kw):
    D = q.shape[-1]
    s = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if lsh_per_kv_head:
        Hq = q.shape[1]
        Hkv = kv_cache.shape[2] if layout == "HND" else kv_cache.shape[3]
        G = Hq // Hkv
        src = torch.arange(Hq, device=q.device) // G            # read at [b, h // G]
        K, L = K[:, src], L[:, src]
    if collision_kw.pop("scaled_cos", False):
        collision_kw["cos_scale"] = s

    def correction(qd, kd, dots, lsh):
        u = _collision(qd, kd, dots, *lsh, **collision_kw)
        logu = torch.log(u + 1e-4) if log_form == "plus_eps" else torch.log(u)
        return sign * logu

    return _paged_decode(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse),
                         correction=correction, lsh=(K, L))


# --- the mutants --------------------------------------------------------------------------------

def magicpig_decode_swaps_k_and_l(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                  layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                  out=None, lse=None, num_splits=None, check_indices=True):
    """The LSH parameters K and L passed in the wrong order."""
    from kernels.magicpig_decode import magicpig_decode

    return magicpig_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, L, K,
                           layout=layout, kv_last_page_len=kv_last_page_len, scale=scale,
                           return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                           check_indices=check_indices)


def magicpig_decode_log_u_plus_eps(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                   layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                   out=None, lse=None, num_splits=None, check_indices=True):
    """The paper code's correction log(u + 1e-4) instead of the clamp form log(max(u, 1e-10))."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), log_form="plus_eps")


def magicpig_decode_correction_sign(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                    layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                    out=None, lse=None, num_splits=None, check_indices=True):
    """Adds log(u) to the score instead of subtracting it."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), sign=+1.0)


def magicpig_decode_no_u_floor(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                               layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                               out=None, lse=None, num_splits=None, check_indices=True):
    """u not clamped to 1e-10: log of an underflowed / cancelled u (0 or < 0) gives inf or NaN."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), floor=False)


def magicpig_decode_unnormalised_key(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                     layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                     out=None, lse=None, num_splits=None, check_indices=True):
    """The cosine divides by |q| only (|k| forgotten): c = q.k / |q|, clamped."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), normalise_k=False)


def magicpig_decode_scaled_cos(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                               layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                               out=None, lse=None, num_splits=None, check_indices=True):
    """The cosine reuses the scaled score: c = (q.k * scale) / (|q| |k| + 1e-8)."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), scaled_cos=True)


def magicpig_decode_lsh_per_kv_head(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                    layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                    out=None, lse=None, num_splits=None, check_indices=True):
    """Reads K, L at [b, h // G] (the KV head) instead of [b, h] (the query head)."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), lsh_per_kv_head=True)


MUTANTS = {f.__name__: f for f in (
    magicpig_decode_swaps_k_and_l, magicpig_decode_log_u_plus_eps, magicpig_decode_correction_sign,
    magicpig_decode_no_u_floor, magicpig_decode_unnormalised_key, magicpig_decode_scaled_cos,
    magicpig_decode_lsh_per_kv_head)}
