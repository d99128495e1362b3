"""Planted-bug implementations of sparse_paged_decode (docs/contract.md section 6); the suite must fail
each.

Each mutant has the signature of ``kernels.sparse_paged_decode.sparse_paged_decode`` and
introduces one bug. ``sparse_paged_decode_wrong_kv_head`` wraps the project's kernel; the others
are vectorized torch re-implementations (float64 math) built on ``_paged_decode`` below, which
mutants/magicpig_decode.py shares. Nothing here calls references/: the math is written out.
"""
from __future__ import annotations

import math

import torch

from ._common import (CLASS_BUGS, owning_pages_once, SOFTMAX_BUGS, documented, ignoring_out, kv_heads_pow2, page_and_slot_pow2,
                      reading_views_as_contiguous)
from .sparse_decode import (LOG2E, _dedup, _valid_slots, _write, attend_slots, in_range_slots,
                            softmax_with_counts, token_weights)

FAMILY = "sparse_paged_decode"


def _rows(kv_cache, layout, indptr, indices, positions, valid, heads, *, hnd_formula=False,
          ignore_indptr=False, swap_kv=False, pow2_pages=False):
    """(k_row, v_row) int64 [B, Hq, N]: rows of ``kv_cache.reshape(-1, D)`` holding the K and V
    of logical token ``positions`` (sequence b = leading index) of KV head ``heads``."""
    _, _, d1, d2, _ = kv_cache.shape
    # The buggy form takes page size and head count from the HND positions whatever the layout.
    P, Hkv = (d2, d1) if (layout == "HND" or hnd_formula) else (d1, d2)
    B = positions.shape[0]
    b = torch.arange(B, device=positions.device).view(B, 1, 1)
    pos = torch.where(valid, positions, 0)
    page_in_seq, slot = page_and_slot_pow2(pos, P) if pow2_pages else (pos // P, pos % P)
    entry = page_in_seq if ignore_indptr else indptr.to(torch.int64)[b] + page_in_seq
    entry = torch.where(valid, entry, 0).clamp(max=max(indices.numel() - 1, 0))
    page = indices.to(torch.int64)[entry] if indices.numel() else torch.zeros_like(entry)
    kk, vv = (1, 0) if swap_kv else (0, 1)
    if layout == "HND" or hnd_formula:
        k_row = ((page * 2 + kk) * Hkv + heads) * P + slot
        v_row = ((page * 2 + vv) * Hkv + heads) * P + slot
    else:
        k_row = ((page * 2 + kk) * P + slot) * Hkv + heads
        v_row = ((page * 2 + vv) * P + slot) * Hkv + heads
    return k_row, v_row


def _lengths(indptr, kv_last_page_len, P):
    pages = (indptr[1:] - indptr[:-1]).to(torch.int64)
    if kv_last_page_len is None:
        return pages * P
    return torch.where(pages > 0, P * (pages - 1) + kv_last_page_len.to(torch.int64), 0)


def _paged_decode(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, *, layout, kv_last_page_len,
                  scale, return_lse, out, lse, correction=None, lsh=None, dedup=False,
                  read_padding=False, lse_base2=False, head_modulo=False, hnd_formula=False,
                  ignore_indptr=False, swap_kv=False, past_nnz=False, online=None, pow2_pages=False,
                  pow2_groups=False):
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
    elif past_nnz:
        valid = in_range_slots(positions, _lengths(indptr, kv_last_page_len, P).view(B, 1, 1))
    if dedup:
        valid = _dedup(positions, valid)
    h = torch.arange(Hq, device=q.device)
    heads = kv_heads_pow2(Hq, Hkv, q.device) if pow2_groups else (h % Hkv) if head_modulo else (h // G)
    k_row, v_row = _rows(kv_cache, layout, indptr, indices, positions, valid, heads.view(1, Hq, 1),
                         hnd_formula=hnd_formula, ignore_indptr=ignore_indptr, swap_kv=swap_kv,
                         pow2_pages=pow2_pages)
    rows = kv_cache.reshape(-1, D)
    k_sel, v_sel = rows[k_row], rows[v_row]                                  # [B, Hq, N, D]
    corr = None if correction is None else (lambda qd, kd, dots: correction(qd, kd, dots, lsh))
    o, lse_val = attend_slots(q, k_sel, v_sel, valid, scale, online=online, correction=corr)
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


def sparse_paged_decode_reads_past_nnz(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                       layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                       out=None, lse=None, num_splits=None, check_indices=True):
    """Ignores nnz: every entry inside the sequence is attended (stops only at -1 or out-of-range
    padding), so stale positions past nnz count."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), past_nnz=True)


def sparse_paged_decode_pow2_page_arithmetic(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                                             *, layout="HND", kv_last_page_len=None, scale=None,
                                             return_lse=False, out=None, lse=None, num_splits=None,
                                             check_indices=True):
    """Page and slot of a position by shift and mask (t >> log2 P, t & (P - 1)): right only for
    power-of-two page sizes."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), pow2_pages=True)


def sparse_paged_decode_pow2_group_packing(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                                           *, layout="HND", kv_last_page_len=None, scale=None,
                                           return_lse=False, out=None, lse=None, num_splits=None,
                                           check_indices=True):
    """Query head h reads KV head h >> log2(G): a group packing that assumes G is a power of two."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), pow2_groups=True)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *, layout="HND",
               kv_last_page_len=None, scale=None, return_lse=False, out=None, lse=None, num_splits=None,
               check_indices=True):
        return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                             **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), online=bug)

    mutant.__name__ = f"sparse_paged_decode_{name}"
    mutant.__doc__ = doc
    return mutant


def _kernel(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *, layout="HND",
            kv_last_page_len=None, scale=None, return_lse=False, out=None, lse=None, num_splits=None,
            check_indices=True):
    from kernels.sparse_paged_decode import sparse_paged_decode

    return sparse_paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                               layout=layout, kv_last_page_len=kv_last_page_len, scale=scale,
                               return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                               check_indices=check_indices)


sparse_paged_decode_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_kernel, "q", "kv_cache", "sparse_ind", "sparse_nnz"),
    "sparse_paged_decode_reads_views_as_contiguous",
    "Ignores the strides of its tensors: a page pool sliced from a larger one, q from a fused projection "
    "and index rows of a wider buffer are read as if contiguous.")
sparse_paged_decode_ignores_out = documented(
    ignoring_out(_kernel), "sparse_paged_decode_ignores_out",
    "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    _softmax_bug("fp16_accumulator"), _softmax_bug("stale_running_max"), _softmax_bug("exp_without_max_fp32"),
    sparse_paged_decode_reads_past_nnz, sparse_paged_decode_reads_views_as_contiguous,
    sparse_paged_decode_ignores_out,
    sparse_paged_decode_wrong_kv_head, sparse_paged_decode_ignores_layout,
    sparse_paged_decode_ignores_indptr, sparse_paged_decode_dedups_indices,
    sparse_paged_decode_reads_padding, sparse_paged_decode_swaps_k_v, sparse_paged_decode_lse_base2,
    *(_softmax_bug(b) for b in CLASS_BUGS),
    sparse_paged_decode_pow2_page_arithmetic, sparse_paged_decode_pow2_group_packing)}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def logical_kv(q, kv_cache, indptr, indices, layout, n_tokens):
    """(k, v [B, Hq, n_tokens, D] fp32): logical token t of sequence b read from page
    indices[indptr[b] + t // P], slot t % P (positions past a sequence's pages read as zeros)."""
    B, Hq, D = q.shape
    hnd = kv_cache if layout == "HND" else kv_cache.transpose(2, 3)      # [pages, 2, Hkv, P, D]
    Hkv, P = hnd.shape[2], hnd.shape[3]
    t = torch.arange(n_tokens, device=q.device)
    pages = (indptr[1:] - indptr[:-1]).long()
    inside = t[None, :] < (pages * P)[:, None]                              # [B, N]
    entry = torch.where(inside, indptr[:-1].long()[:, None] + t // P, 0).clamp(max=max(indices.numel() - 1, 0))
    page = indices.long()[entry] if indices.numel() else torch.zeros_like(entry)
    kv = hnd[page, :, :, t % P].float()                                     # [B, N, 2, Hkv, D]
    kv = torch.where(inside[:, :, None, None, None], kv, 0.0)
    return tuple(kv[:, :, i].permute(0, 2, 1, 3).repeat_interleave(Hq // Hkv, dim=1) for i in (0, 1))


def counts_attention(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, layout, scale, bias_fn=None):
    """Dense attention over every logical position of each sequence, each score raised by the log
    of how many times the row lists that position (fp32). ``bias_fn(q, k)`` [B, Hq, N] adds to the
    scores (MagicPIG's correction). Returns (o [B, Hq, D], lse [B, Hq])."""
    B, Hq, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    slot = torch.arange(sparse_ind.shape[-1], device=q.device)
    valid = slot < sparse_nnz[..., None].long()
    n_tokens = int(torch.where(valid, sparse_ind.long() + 1, 0).max()) if sparse_ind.numel() else 0
    n_tokens = max(n_tokens, 1)
    k, v = logical_kv(q, kv_cache, indptr, indices, layout, n_tokens)
    scores = (k @ q.float()[..., None])[..., 0] * scale                    # [B, Hq, N]
    if bias_fn is not None:
        scores = scores + bias_fn(q.float(), k)
    counts = token_weights(sparse_ind.long(), valid, n_tokens)
    return softmax_with_counts(scores, counts, v)


def sparse_paged_decode_token_counts_fp32(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                          layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                          out=None, lse=None, num_splits=None, check_indices=True):
    """Dense attention over each sequence's logical tokens, each score raised by the log of the
    token's multiplicity in the row (fp32)."""
    B, Hq, D = q.shape
    o, l = counts_attention(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, layout, scale)
    return _write(o, l, out, lse, return_lse, (B, Hq, D), (B, Hq), q.dtype, q.device)


def sparse_paged_decode_gather_fp64(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                    layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                    out=None, lse=None, num_splits=None, check_indices=True):
    """The listed rows gathered through the page table, softmax over them in float64."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse))


def sparse_paged_decode_online_fp32(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz, *,
                                    layout="HND", kv_last_page_len=None, scale=None, return_lse=False,
                                    out=None, lse=None, num_splits=None, check_indices=True):
    """The mutants' tiled online softmax over the listed slots, no bug switched in."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                         **_kw(layout, kv_last_page_len, scale, return_lse, out, lse), online={})


CONTROLS = {f.__name__: f for f in (sparse_paged_decode_token_counts_fp32, sparse_paged_decode_gather_fp64,
                                    sparse_paged_decode_online_fp32)}
MUTANTS["sparse_paged_decode_one_owner_per_page"] = owning_pages_once(sparse_paged_decode_gather_fp64,
                                                                      "sparse_paged_decode_one_owner_per_page")
