"""Planted-bug implementations of dsa_sparse_attention (kernels.md section 12); the suite must
fail each. Vectorized torch written from the spec (nothing here calls references/ or the
project's kernel, but the two wrappers that take the kernel's own result and break it).

``_sparse_mla`` gathers the listed slots by (page, slot) of the 3-D caches, so it honours any
strides; its switches are the bugs. Every implementation here takes the fp8 scales (``k_scale``
on the score side, ``v_scale`` on the value side), so fp8 cases judge the bug, not a keyword.
"""
from __future__ import annotations

import math

import torch

from ._common import SOFTMAX_BUGS, documented, finish, ignoring_out, log2_floor, online_attention

FAMILY = "dsa_sparse_attention"
LOG2E = 1.4426950408889634


def _gather(cache, ids, *, pow2_pages=False, flat_rows=False):
    """Rows [T, K, D] of ``cache`` [pages, P, D] at flat ids (0 where an id is < 0)."""
    P = cache.shape[1]
    ids = ids.clamp(min=0).long()
    if flat_rows:
        # Reads the storage as if pages were page_size slot strides long.
        span = cache.stride(1)
        rows = torch.as_strided(cache, (cache.shape[0] * P, cache.shape[2]), (span, 1))
        return rows[ids.clamp(max=rows.shape[0] - 1)]
    if pow2_pages:
        shift = log2_floor(P)
        page, slot = ids >> shift, ids & ((1 << shift) - 1)
        page = page.clamp(max=cache.shape[0] - 1)
    else:
        page, slot = ids // P, ids % P
    return cache[page, slot]


def _sparse_mla(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, *, scale=None, return_lse=False, out=None,
                lse=None, minus_one_is_slot0=False, dedup=False, empty_nan=False, no_kpe=False, pow2_pages=False,
                flat_rows=False, lse_base2=False, online=None, merge_clamped=False, k_scale=1.0, v_scale=1.0):
    T, H, Dc = q_nope.shape
    Dr = q_pe.shape[-1]
    scale = 1.0 / math.sqrt(Dc + Dr) if scale is None else float(scale)
    ids = sparse_indices.long()
    valid = torch.ones_like(ids, dtype=torch.bool) if minus_one_is_slot0 else ids >= 0
    if dedup:
        srt, order = torch.sort(torch.where(valid, ids, -1 - torch.arange(ids.shape[1])), dim=1)
        first = torch.ones_like(srt, dtype=torch.bool)
        first[:, 1:] = srt[:, 1:] != srt[:, :-1]
        valid = valid & torch.zeros_like(first).scatter(1, order, first)
    ckv = _gather(ckv_cache, ids, pow2_pages=pow2_pages, flat_rows=flat_rows).double()
    kpe = _gather(kpe_cache, ids, pow2_pages=pow2_pages, flat_rows=flat_rows).double()
    ckv = torch.where(valid[..., None], ckv, 0.0)
    kpe = torch.where(valid[..., None], kpe, 0.0) * float(k_scale)
    val = ckv * float(v_scale)
    ckv = ckv * float(k_scale)
    if online is not None:
        q = torch.cat([q_nope, q_pe], -1)
        k = torch.cat([ckv, kpe], -1).to(q.dtype)
        # The values are the latent rows; padded to the score dim, as online_attention takes one D.
        v = torch.cat([val, torch.zeros_like(kpe)], -1).to(q.dtype)
        o, l = online_attention(q, k, v, scale, valid[:, None, :], **online)
        return finish(q_nope, o[..., :Dc], l, return_lse, out, lse)
    s = q_nope.double() @ ckv.transpose(1, 2)
    if not no_kpe:
        s = s + q_pe.double() @ kpe.transpose(1, 2)
    s = (s * scale).masked_fill(~valid[:, None, :], float("-inf"))
    if merge_clamped:
        return finish(q_nope, *_merge_clamped_at_zero(s, val), return_lse, out, lse)
    m = s.amax(-1, keepdim=True)
    if not empty_nan:
        m = torch.where(torch.isfinite(m), m, 0.0)
    p = torch.exp(s - m)
    l = p.sum(-1)
    o = (p @ val) / (l[..., None] if empty_nan else torch.where(l > 0, l, 1.0)[..., None])
    lse_v = torch.log(l) + m[..., 0]
    if lse_base2:
        lse_v = lse_v * LOG2E
    return finish(q_nope, o, lse_v, return_lse, out, lse)


#: Slots a split of the list holds (the interpreter's split of a list past 128 slots).
SPLIT_SLOTS = 128


def _merge_clamped_at_zero(s, ckv):
    """(o, lse) of scores s [T, H, K] over latent rows ckv [T, K, Dc], the list split every
    SPLIT_SLOTS slots and the splits merged in fp32 with weights e^(lse_i - max(0, max_j lse_j))."""
    outs, lses = [], []
    for start in range(0, s.shape[-1], SPLIT_SLOTS):  # one iteration per split, each vectorized
        si = s[..., start:start + SPLIT_SLOTS]
        li = torch.logsumexp(si, -1)  # -inf for a split listing nothing
        pi = torch.exp(si - torch.where(torch.isfinite(li), li, 0.0)[..., None])
        outs.append(pi @ ckv[:, start:start + SPLIT_SLOTS])
        lses.append(li)
    lp = torch.stack(lses).float()
    m = lp.amax(0).clamp_min(0.0)
    w = torch.exp(lp - m)
    total = w.sum(0)
    o = (w.double()[..., None] * torch.stack(outs)).sum(0) / torch.where(total > 0, total, 1.0).double()[..., None]
    return o, m + torch.log(total)


def _mutant(name: str, doc: str, **bug):
    def run(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, *, scale=None, return_lse=False, out=None,
            lse=None, k_scale=1.0, v_scale=1.0):
        return _sparse_mla(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, scale=scale,
                           return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale, **bug)

    return documented(run, f"dsa_sparse_attention_{name}", doc)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]
    return _mutant(name, doc, online=bug)


def _kernel(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, *, scale=None, return_lse=False, out=None,
            lse=None, k_scale=1.0, v_scale=1.0):
    from kernels.dsa_sparse_attention import dsa_sparse_attention

    return dsa_sparse_attention(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, scale=scale,
                                return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale)


MUTANTS = {f.__name__: f for f in (
    _mutant("minus_one_is_slot0", "An id of -1 read as slot 0 of page 0 (clamped instead of masked).",
            minus_one_is_slot0=True),
    _mutant("dedups_ids", "Set semantics: an id listed twice in a row counts once.", dedup=True),
    _mutant("empty_row_nan", "A row listing none divides 0 by 0: o and lse NaN instead of 0 and -inf.",
            empty_nan=True),
    _mutant("ignores_kpe", "Scores from the latent part only: q_pe . kpe left out.", no_kpe=True),
    _mutant("pow2_page_arithmetic", "Page and slot of a flat id by shift and mask (id >> log2 P, id & (P - 1)): "
            "right only for power-of-two page sizes.", pow2_pages=True),
    _mutant("flat_id_as_row", "Reads flat id i at i * slot_stride: wrong when a page spans more than "
            "page_size slot strides (a padded pool).", flat_rows=True),
    _mutant("lse_base2", "Returns the LSE in base 2, not natural log.", lse_base2=True),
    _mutant("merge_max_clamped_at_zero", "Lists split every 128 slots, merged in fp32 by weights "
            "e^(lse_i - max(0, max_j lse_j)): 0 once every partial LSE is below -103.", merge_clamped=True),
    _softmax_bug("exp_without_max_fp32"), _softmax_bug("max_clamped_at_zero"), _softmax_bug("ignores_scale"),
    _softmax_bug("fp16_accumulator"),
    documented(ignoring_out(_kernel), "dsa_sparse_attention_ignores_out",
               "Ignores the caller's out= / lse= buffers and returns tensors of its own."),
)}


# --- controls --------------------------------------------------------------------------------

def dsa_sparse_attention_gather_fp64(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, *, scale=None,
                                     return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
    """The listed slots gathered by (page, slot), softmax over them in float64."""
    return _sparse_mla(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, scale=scale, return_lse=return_lse,
                       out=out, lse=lse, k_scale=k_scale, v_scale=v_scale)


def dsa_sparse_attention_counts_fp32(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, *, scale=None,
                                     return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
    """Dense attention over every slot of the pool (fp32), each score raised by the log of how many
    times the row lists that slot (0 times: -inf)."""
    T, H, Dc = q_nope.shape
    Dr = q_pe.shape[-1]
    scale = 1.0 / math.sqrt(Dc + Dr) if scale is None else float(scale)
    pages, P = ckv_cache.shape[:2]
    ids = sparse_indices.long()
    counts = torch.zeros((T, pages * P + 1), dtype=torch.float32)
    counts.scatter_add_(1, torch.where(ids >= 0, ids, pages * P), torch.ones_like(ids, dtype=torch.float32))
    counts = counts[:, :-1]
    listed = counts > 0
    ckv = torch.where(listed.any(0)[:, None], ckv_cache.float().reshape(-1, Dc), 0)
    kpe = torch.where(listed.any(0)[:, None], kpe_cache.float().reshape(-1, Dr), 0)
    s = (q_nope.float() @ ckv.T + q_pe.float() @ kpe.T) * (scale * float(k_scale)) + torch.log(counts)[:, None, :]
    s = s.masked_fill(~listed[:, None, :], float("-inf"))
    l_v = torch.logsumexp(s, -1)
    p = torch.where(torch.isfinite(l_v)[..., None], torch.exp(s - torch.where(torch.isfinite(l_v), l_v, 0.0)[..., None]),
                    0.0)
    return finish(q_nope, p @ ckv * float(v_scale), l_v, return_lse, out, lse)


def dsa_sparse_attention_online_fp32(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, *, scale=None,
                                     return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
    """The mutants' tiled online softmax over the listed slots, no bug switched in."""
    return _sparse_mla(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, scale=scale, return_lse=return_lse,
                       out=out, lse=lse, online={}, k_scale=k_scale, v_scale=v_scale)


CONTROLS = {f.__name__: f for f in (dsa_sparse_attention_gather_fp64, dsa_sparse_attention_counts_fp32,
                                    dsa_sparse_attention_online_fp32)}
