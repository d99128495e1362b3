"""Planted-bug implementations of sparse_decode (kernels.md section 5); the suite must fail each.

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

def _sparse_decode(q, k, v, sparse_ind, sparse_nnz, *, scale, return_lse, out, lse,
                   dedup=False, read_padding=False, empty_nan=False, lse_base2=False,
                   head_modulo=False, no_scale=False):
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
    else:
        positions = torch.where(valid, positions, 0)
    if dedup:
        valid = _dedup(positions, valid)
    heads = torch.arange(Hq, device=q.device)
    kv_head = (heads % Hkv) if head_modulo else (heads // G)
    b = torch.arange(B, device=q.device).view(B, 1, 1)
    k_sel = k[b, kv_head.view(1, Hq, 1), positions]                      # [B, Hq, L, D]
    v_sel = v[b, kv_head.view(1, Hq, 1), positions]
    o, lse_val = _attend(q[:, :, 0], k_sel, v_sel, valid, scale, empty_nan=empty_nan)
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


MUTANTS = {f.__name__: f for f in (
    sparse_decode_drops_last_token, sparse_decode_dedups_indices, sparse_decode_reads_padding,
    sparse_decode_empty_row_nan, sparse_decode_lse_base2, sparse_decode_wrong_kv_head,
    sparse_decode_missing_scale)}
