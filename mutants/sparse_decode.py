"""Planted-bug implementations of sparse_decode (docs/contract.md section 5); the suite must fail each.

Each mutant has the signature of ``kernels.sparse_decode.sparse_decode`` and introduces one bug.
Most are vectorized torch re-implementations (float64 math, the result rounded into the
harness's ``out``/``lse`` buffers); ``sparse_decode_drops_last_token`` wraps the project's kernel.
The helpers ``_attend``, ``_dedup``, ``_write`` are shared with the other sparse families'
mutants (mutants/sparse_paged_decode.py, mutants/magicpig_decode.py). Nothing here calls
references/: the math is written out.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ._common import (CLASS_BUGS, SOFTMAX_BUGS, documented, ignoring_out, online_attention,
                      packing_groups_as_pow2, reading_views_as_contiguous)

FAMILY = "sparse_decode"
LOG2E = 1.4426950408889634


# --- shared helpers (also used by the paged and MagicPIG mutants) -----------------------------

def _valid_slots(sparse_ind: torch.Tensor, sparse_nnz: torch.Tensor) -> torch.Tensor:
    """bool [B, Hq, L_max]: slot i < nnz of its row."""
    slot = torch.arange(sparse_ind.shape[-1], device=sparse_ind.device)
    return slot < sparse_nnz.to(torch.int64)[..., None]


def _dedup(positions: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``valid`` with every repeat of a position within a row switched off (set semantics)."""
    big = torch.iinfo(torch.int64).max
    keyed = torch.where(valid, positions.to(torch.int64), big)
    srt, order = keyed.sort(dim=-1)
    first = torch.ones_like(srt, dtype=torch.bool)
    first[..., 1:] = srt[..., 1:] != srt[..., :-1]
    keep_sorted = first & (srt != big)
    keep = torch.zeros_like(valid)
    keep.scatter_(-1, order, keep_sorted)
    return keep


def _attend(q: torch.Tensor, k_sel: torch.Tensor, v_sel: torch.Tensor, valid: torch.Tensor,
            scale: float, *, correction=None, empty_nan: bool = False):
    """Softmax over the valid gathered slots, in float64.

    q [B, Hq, D]; k_sel / v_sel [B, Hq, N, D] (any values in invalid slots); valid [B, Hq, N].
    ``correction(qd, kd, dots)`` (float64) is added to the scaled scores when given.
    Returns (o [B, Hq, D], lse [B, Hq]) float64; empty rows give o = 0, lse = -inf unless
    ``empty_nan`` (then 0/0: NaN, as an unguarded normalisation gives).
    """
    keep = valid[..., None]
    kd = torch.where(keep, k_sel.double(), 0.0)
    vd = torch.where(keep, v_sel.double(), 0.0)
    qd = q.double()
    dots = (kd @ qd[..., None])[..., 0]
    s = dots * scale
    if correction is not None:
        s = s + correction(qd, kd, dots)
    s = s.masked_fill(~valid, float("-inf"))
    m = s.amax(-1, keepdim=True)
    if not empty_nan:
        m = torch.where(torch.isneginf(m), 0.0, m)
    e = torch.exp(s - m)
    l = e.sum(-1, keepdim=True)
    if empty_nan:
        p = e / l
    else:
        p = e / torch.where(l > 0, l, 1.0)
    o = (p[..., None, :] @ vd)[..., 0, :]
    lse = (m + torch.log(l))[..., 0]
    return o, lse


def _write(o: torch.Tensor, lse_val: torch.Tensor, out: Optional[torch.Tensor], lse: Optional[torch.Tensor],
           return_lse: bool, o_shape, lse_shape, dtype, device):
    """Round the float64 result into the given (or new) buffers; the kernels' return value."""
    if out is None:
        out = torch.empty(o_shape, dtype=dtype, device=device)
    out.copy_(o.reshape(out.shape).to(out.dtype))
    if not return_lse:
        return out, None
    if lse is None:
        lse = torch.empty(lse_shape, dtype=torch.float32, device=device)
    lse.copy_(lse_val.reshape(lse.shape).to(torch.float32))
    return out, lse


# --- torch re-implementation with switchable bugs ---------------------------------------------

def attend_slots(q, k_sel, v_sel, valid, scale, *, online=None, correction=None, empty_nan=False):
    """(o [B, Hq, D], lse [B, Hq]) over gathered slots: ``_attend`` (float64, dense), or with
    ``online`` (online_attention's keywords) a tiled online softmax over the slots in order."""
    if online is None:
        return _attend(q, k_sel, v_sel, valid, scale, correction=correction, empty_nan=empty_nan)
    keep = valid[..., None]
    k_sel = torch.where(keep, k_sel, torch.zeros((), dtype=k_sel.dtype))
    v_sel = torch.where(keep, v_sel, torch.zeros((), dtype=v_sel.dtype))
    bias = None
    if correction is not None:
        qd, kd = q.double(), k_sel.double()
        bias = correction(qd, kd, (kd @ qd[..., None])[..., 0])[..., None, :]
    o, l = online_attention(q[..., None, :], k_sel, v_sel, scale, valid[..., None, :], bias=bias, **online)
    return o[..., 0, :], l[..., 0]


def in_range_slots(positions, length):
    """The slots a reader that ignores nnz takes as listed: every entry inside [0, length)."""
    return (positions >= 0) & (positions < length)


def _sparse_decode(q, k, v, sparse_ind, sparse_nnz, *, scale, return_lse, out, lse,
                   dedup=False, read_padding=False, empty_nan=False, lse_base2=False,
                   head_modulo=False, no_scale=False, past_nnz=False, online=None):
    B, Hq, _, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = Hq // Hkv
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    if no_scale:
        scale = 1.0
    valid = _valid_slots(sparse_ind, sparse_nnz)
    positions = sparse_ind.to(torch.int64)
    if read_padding:
        # Loops over every slot of the row, whatever nnz says; clamps the index into the cache.
        valid = torch.ones_like(valid)
        positions = positions.clamp(0, S - 1)
    elif past_nnz:
        valid = in_range_slots(positions, S)
        positions = torch.where(valid, positions, 0)
    else:
        positions = torch.where(valid, positions, 0)
    if dedup:
        valid = _dedup(positions, valid)
    heads = torch.arange(Hq, device=q.device)
    kv_head = (heads % Hkv) if head_modulo else (heads // G)
    b = torch.arange(B, device=q.device).view(B, 1, 1)
    k_sel = k[b, kv_head.view(1, Hq, 1), positions]                      # [B, Hq, L, D]
    v_sel = v[b, kv_head.view(1, Hq, 1), positions]
    o, lse_val = attend_slots(q[:, :, 0], k_sel, v_sel, valid, scale, online=online, empty_nan=empty_nan)
    if lse_base2:
        lse_val = lse_val * LOG2E
    return _write(o, lse_val, out, lse, return_lse, (B, Hq, 1, D), (B, Hq, 1), q.dtype, q.device)


# --- the mutants --------------------------------------------------------------------------------

def sparse_decode_drops_last_token(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                   out=None, lse=None, num_splits=None, check_indices=True):
    """Off by one at the end of each index row: attends sparse_ind[:nnz - 1]."""
    from kernels.sparse_decode import sparse_decode

    return sparse_decode(q, k, v, sparse_ind, (sparse_nnz - 1).clamp(min=0), scale=scale,
                         return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices)


def sparse_decode_dedups_indices(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                 out=None, lse=None, num_splits=None, check_indices=True):
    """Set semantics: a token listed twice in a row is attended once (multiset weights lost)."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                          out=out, lse=lse, dedup=True)


def sparse_decode_reads_padding(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                out=None, lse=None, num_splits=None, check_indices=True):
    """Ignores nnz and reads all L_max slots, index clamped into [0, S): -1 padding is token 0."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                          out=out, lse=lse, read_padding=True)


def sparse_decode_empty_row_nan(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                out=None, lse=None, num_splits=None, check_indices=True):
    """nnz == 0 rows: unguarded 0/0 normalisation and -inf - -inf max give NaN instead of o = 0."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                          out=out, lse=lse, empty_nan=True)


def sparse_decode_lse_base2(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                            out=None, lse=None, num_splits=None, check_indices=True):
    """Returns the LSE in base 2 (the kernel's exp2 domain), not natural log."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                          out=out, lse=lse, lse_base2=True)


def sparse_decode_wrong_kv_head(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                out=None, lse=None, num_splits=None, check_indices=True):
    """Query head h reads KV head h % Hkv instead of h // G."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                          out=out, lse=lse, head_modulo=True)


def sparse_decode_missing_scale(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                out=None, lse=None, num_splits=None, check_indices=True):
    """Scores are q.k without the 1/sqrt(D) scale."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                          out=out, lse=lse, no_scale=True)


def sparse_decode_reads_past_nnz(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                 out=None, lse=None, num_splits=None, check_indices=True):
    """Ignores nnz: every in-range entry of the row is attended (stops only at -1 or out-of-range
    padding), so stale positions past nnz count."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                          out=out, lse=lse, past_nnz=True)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False, out=None, lse=None,
               num_splits=None, check_indices=True):
        return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse,
                              out=out, lse=lse, online=bug)

    mutant.__name__ = f"sparse_decode_{name}"
    mutant.__doc__ = doc
    return mutant


def _kernel(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False, out=None, lse=None,
            num_splits=None, check_indices=True):
    from kernels.sparse_decode import sparse_decode

    return sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse, out=out, lse=lse,
                         num_splits=num_splits, check_indices=check_indices)


sparse_decode_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_kernel, "q", "k", "v", "sparse_ind", "sparse_nnz"),
    "sparse_decode_reads_views_as_contiguous",
    "Ignores the strides of its tensors: K/V windows, fused-projection slices and index rows of a wider "
    "buffer are read as if contiguous.")
sparse_decode_ignores_out = documented(ignoring_out(_kernel), "sparse_decode_ignores_out",
                                       "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    _softmax_bug("fp16_accumulator"), _softmax_bug("stale_running_max"), _softmax_bug("exp_without_max_fp32"),
    sparse_decode_reads_past_nnz, sparse_decode_reads_views_as_contiguous, sparse_decode_ignores_out,
    sparse_decode_drops_last_token, sparse_decode_dedups_indices, sparse_decode_reads_padding,
    sparse_decode_empty_row_nan, sparse_decode_lse_base2, sparse_decode_wrong_kv_head,
    sparse_decode_missing_scale,
    *(_softmax_bug(b) for b in CLASS_BUGS),
    packing_groups_as_pow2(_kernel, "sparse_decode_pow2_group_packing"))}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def token_weights(positions, valid, n_tokens):
    """[..., n_tokens] float: how many valid slots of each row list each token (multiset)."""
    counts = torch.zeros((*positions.shape[:-1], n_tokens), dtype=torch.float32, device=positions.device)
    return counts.scatter_add_(-1, torch.where(valid, positions, 0).long(), valid.float())


def softmax_with_counts(scores, counts, v):
    """Softmax over tokens weighted by their multiplicities (log-count added to each score), fp32;
    a row listing nothing gives o = 0, lse = -inf. scores/counts [..., N], v [..., N, D]."""
    listed = counts > 0                               # unlisted tokens drop out (even NaN slots)
    s = torch.where(listed, scores.float() + torch.log(counts), float("-inf"))
    l = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(l), l, 0.0)[..., None])
    v = torch.where(listed[..., None], v.float(), 0.0)
    return (p[..., None, :] @ v)[..., 0, :], l


def sparse_decode_token_counts_fp32(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                                    out=None, lse=None, num_splits=None, check_indices=True):
    """Dense attention over all S tokens with each token's score raised by the log of how many times
    its row lists it (fp32): the multiset softmax without gathering."""
    B, Hq, _, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    slot = torch.arange(sparse_ind.shape[-1], device=q.device)
    counts = token_weights(sparse_ind.long(), slot < sparse_nnz[..., None].long(), S)   # [B, Hq, S]
    kq = k.float().repeat_interleave(Hq // Hkv, dim=1)
    vq = v.float().repeat_interleave(Hq // Hkv, dim=1)
    scores = (kq @ q.float().transpose(-1, -2))[..., 0] * scale                       # [B, Hq, S]
    o, l = softmax_with_counts(scores, counts, vq)
    return _write(o, l, out, lse, return_lse, (B, Hq, 1, D), (B, Hq, 1), q.dtype, q.device)


def sparse_decode_gather_fp64(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                              out=None, lse=None, num_splits=None, check_indices=True):
    """The listed rows gathered, softmax over them in float64."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse, out=out, lse=lse)


def sparse_decode_online_fp32(q, k, v, sparse_ind, sparse_nnz, *, scale=None, return_lse=False,
                              out=None, lse=None, num_splits=None, check_indices=True):
    """The mutants' tiled online softmax over the listed slots, no bug switched in."""
    return _sparse_decode(q, k, v, sparse_ind, sparse_nnz, scale=scale, return_lse=return_lse, out=out, lse=lse,
                          online={})


CONTROLS = {f.__name__: f for f in (sparse_decode_token_counts_fp32, sparse_decode_gather_fp64,
                                    sparse_decode_online_fp32)}
