"""Planted-bug implementations of magicpig_decode (docs/contract.md section 7); the suite must fail each.

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

from ._common import (CLASS_BUGS, owning_pages_once, SOFTMAX_BUGS, documented, ignoring_out, reading_views_as_contiguous)
from .sparse_decode import _write
from .sparse_paged_decode import _kw, _paged_decode, counts_attention

FAMILY = "magicpig_decode"


def _collision(qd, kd, dots, K, L, *, normalise_k=True, cos_scale=1.0, floor=True, norm_eps=1e-8):
    """u [B, Hq, N] (float64) for K, L [B, Hq]."""
    qn = qd.norm(dim=-1)[..., None]                                      # [B, Hq, 1]
    kn = kd.norm(dim=-1) if normalise_k else torch.ones_like(dots)       # [B, Hq, N]
    c = (dots * cos_scale / (qn * kn + norm_eps)).clamp(-1 + 1e-7, 1 - 1e-7)
    p = (1 - torch.acos(c) / math.pi).clamp(0, 1)
    Kx, Lx = K.double()[..., None], L.double()[..., None]
    P = torch.pow(p, Kx)
    u = 1 - torch.pow(1 - P, Lx) - Lx * P * torch.pow(1 - P, Lx - 1)
    return u.clamp_min(1e-10) if floor else u


def _magicpig(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, K, L, *, layout, kv_last_page_len,
              scale, return_lse, out, lse, log_form="clamp", sign=-1.0, lsh_per_kv_head=False,
              past_nnz=False, online=None, paged=None, **collision_kw):
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
                         correction=correction, lsh=(K, L), past_nnz=past_nnz, online=online, **(paged or {}))


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


def magicpig_decode_cosine_without_epsilon(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K,
                                           L, *, layout="HND", kv_last_page_len=None, scale=None,
                                           return_lse=False, out=None, lse=None, num_splits=None,
                                           check_indices=True):
    """The cosine without the norm's epsilon: c = q.k / (|q| |k|), 0 / 0 = NaN for a zero key or query."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), norm_eps=0.0)


def magicpig_decode_pow2_page_arithmetic(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K,
                                         L, *, layout="HND", kv_last_page_len=None, scale=None,
                                         return_lse=False, out=None, lse=None, num_splits=None,
                                         check_indices=True):
    """Page and slot of a position by shift and mask: right only for power-of-two page sizes."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), paged=dict(pow2_pages=True))


def magicpig_decode_pow2_group_packing(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K,
                                       L, *, layout="HND", kv_last_page_len=None, scale=None,
                                       return_lse=False, out=None, lse=None, num_splits=None,
                                       check_indices=True):
    """Query head h reads KV head h >> log2(G): a group packing that assumes G is a power of two."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), paged=dict(pow2_groups=True))


def magicpig_decode_lsh_per_kv_head(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                    layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                    out=None, lse=None, num_splits=None, check_indices=True):
    """Reads K, L at [b, h // G] (the KV head) instead of [b, h] (the query head)."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), lsh_per_kv_head=True)


def magicpig_decode_reads_past_nnz(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                   layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                   out=None, lse=None, num_splits=None, check_indices=True):
    """Ignores nnz: every entry inside the sequence is attended, so stale positions past nnz count."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), past_nnz=True)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *, layout="HND",
               kv_last_page_len=None, scale=None, return_lse=False, out=None, lse=None, num_splits=None,
               check_indices=True):
        return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), online=bug)

    mutant.__name__ = f"magicpig_decode_{name}"
    mutant.__doc__ = doc
    return mutant


def _kernel(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *, layout="HND",
            kv_last_page_len=None, scale=None, return_lse=False, out=None, lse=None, num_splits=None,
            check_indices=True):
    from kernels.magicpig_decode import magicpig_decode

    return magicpig_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                           layout=layout, kv_last_page_len=kv_last_page_len, scale=scale, return_lse=return_lse,
                           out=out, lse=lse, num_splits=num_splits, check_indices=check_indices)


magicpig_decode_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_kernel, "q", "kv_cache", "sparse_ind", "sparse_nnz", "K", "L"),
    "magicpig_decode_reads_views_as_contiguous",
    "Ignores the strides of its tensors: a sliced page pool, q from a fused projection, index rows and K / L "
    "of wider buffers are read as if contiguous.")
magicpig_decode_ignores_out = documented(
    ignoring_out(_kernel), "magicpig_decode_ignores_out",
    "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    # The accumulator mutants are told apart by the long list with u == 1 (K1-L1e4, 3000 tokens whose
    # running sum climbs far from the output): elsewhere the LSH correction makes the reference's own
    # fp16 error (the tolerance's baseline) larger than what a low-precision accumulator adds.
    _softmax_bug("fp16_accumulator"), _softmax_bug("stale_running_max"), _softmax_bug("exp_without_max_fp32"),
    magicpig_decode_reads_past_nnz, magicpig_decode_reads_views_as_contiguous, magicpig_decode_ignores_out,
    magicpig_decode_swaps_k_and_l, magicpig_decode_log_u_plus_eps, magicpig_decode_correction_sign,
    magicpig_decode_no_u_floor, magicpig_decode_unnormalised_key, magicpig_decode_scaled_cos,
    magicpig_decode_lsh_per_kv_head, magicpig_decode_cosine_without_epsilon,
    magicpig_decode_pow2_page_arithmetic, magicpig_decode_pow2_group_packing,
    *(_softmax_bug(b) for b in CLASS_BUGS))}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def magicpig_decode_token_counts_fp64(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                      layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                      out=None, lse=None, num_splits=None, check_indices=True):
    """Dense attention over each sequence's logical tokens, each score corrected by -log(u) (in
    float64) and raised by the log of the token's multiplicity in the row."""
    B, Hq, D = q.shape

    def minus_log_u(qf, k):
        qd, kd = qf.double(), k.double()
        dots = (kd @ qd[..., None])[..., 0]
        return -torch.log(_collision(qd, kd, dots, K, L))

    o, l = counts_attention(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, layout, scale,
                            bias_fn=minus_log_u)
    return _write(o, l, out, lse, return_lse, (B, Hq, D), (B, Hq), q.dtype, q.device)


def magicpig_decode_gather_fp64(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                out=None, lse=None, num_splits=None, check_indices=True):
    """The listed rows gathered through the page table, corrected softmax over them in float64."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse))


def magicpig_decode_online_fp32(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L, *,
                                layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                out=None, lse=None, num_splits=None, check_indices=True):
    """The mutants' tiled online softmax over the listed slots (correction in float64), no bug."""
    return _magicpig(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, K, L,
                     **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), online={})


CONTROLS = {f.__name__: f for f in (magicpig_decode_token_counts_fp64, magicpig_decode_gather_fp64,
                                    magicpig_decode_online_fp32)}
MUTANTS["magicpig_decode_one_owner_per_page"] = owning_pages_once(magicpig_decode_gather_fp64,
                                                                  "magicpig_decode_one_owner_per_page")
