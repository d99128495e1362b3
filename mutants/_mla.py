"""What the MLA mutants and controls share: the latent cache gathered through the page table in
plain torch (written from kernels.md sections 10 and 11, not from references/), and MLA as a
tiled online softmax with the switchable bugs of mutants/_common.py.

MLA seen as attention: key ``cat(ckv, kpe) * k_scale`` (Dc + Dr wide), value ``ckv * v_scale``,
query ``cat(q_nope, q_pe)``; default scale 1/sqrt(Dc + Dr)."""
from __future__ import annotations

import math

import torch

from ._common import finish, online_attention, page_and_slot_pow2


def latent_rows(ckv_cache, kpe_cache, indptr, indices, last, *, k_scale=1.0, v_scale=1.0, pow2_pages=False,
                last_offset=0):
    """(k [B, N, Dc + Dr], v [B, N, Dc] fp32, valid [B, N], lengths [B]) of every sequence in
    logical order, read page by page through the table; N the longest sequence (>= 1)."""
    P = ckv_cache.shape[1]
    pages = (indptr[1:] - indptr[:-1]).long()
    lengths = torch.where(pages > 0, P * (pages - 1) + last.long() + last_offset, 0).clamp(min=0)
    N = max(int(lengths.max()) if lengths.numel() else 0, 1)
    t = torch.arange(N, device=ckv_cache.device)
    valid = t[None, :] < lengths[:, None]
    page_in_seq, slot = page_and_slot_pow2(t, P) if pow2_pages else (t // P, t % P)
    entry = torch.where(valid, indptr[:-1].long()[:, None] + page_in_seq, 0).clamp(max=max(indices.numel() - 1, 0))
    page = indices.long()[entry] if indices.numel() else torch.zeros_like(entry)
    page = torch.where(valid, page, 0)
    slot = torch.where(valid, slot[None, :].expand_as(page), 0)
    ckv = torch.where(valid[..., None], ckv_cache[page, slot].float(), 0.0)
    kpe = torch.where(valid[..., None], kpe_cache[page, slot].float(), 0.0)
    return torch.cat([ckv * k_scale, kpe * k_scale], -1), ckv * v_scale, valid, lengths


def mla_scale(q_nope, q_pe, scale):
    return 1.0 / math.sqrt(q_nope.shape[-1] + q_pe.shape[-1]) if scale is None else float(scale)


def _padded(v, width):
    """v [..., N, Dc] zero-padded to ``width`` columns: online_attention's accumulator is as wide as q."""
    return torch.nn.functional.pad(v, (0, width - v.shape[-1]))


def online_decode(q_nope, q_pe, ckv_cache, kpe_cache, indptr, indices, last, *, scale, return_lse, out, lse,
                  k_scale=1.0, v_scale=1.0, pow2_pages=False, **bug):
    """Tiled online-softmax MLA decode in torch (64-token tiles)."""
    k, v, valid, _ = latent_rows(ckv_cache, kpe_cache, indptr, indices, last, k_scale=k_scale, v_scale=v_scale,
                                 pow2_pages=pow2_pages)
    q = torch.cat([q_nope, q_pe], -1)
    o, l = online_attention(q, k, _padded(v, q.shape[-1]), mla_scale(q_nope, q_pe, scale), valid[:, None, :], **bug)
    return finish(q_nope, o[..., :q_nope.shape[-1]], l, return_lse, out, lse)


def prefill_visible(qo_indptr, lengths, N, *, causal=True, offset=0, top_left=False):
    """(seq [T], visible [T, N]): each query's sequence and the cache positions it sees; causal
    bottom-right: query i of n over m sees positions <= m - n + i (+ ``offset``); ``top_left``:
    <= i."""
    T = int(qo_indptr[-1])
    t = torch.arange(T, device=qo_indptr.device)
    seq = torch.searchsorted(qo_indptr.long(), t, right=True) - 1
    i = t - qo_indptr.long()[seq]
    n = (qo_indptr[1:] - qo_indptr[:-1]).long()[seq]
    m = lengths[seq]
    pos = torch.arange(N, device=qo_indptr.device)
    visible = pos[None, :] < m[:, None]
    if causal:
        last_seen = i if top_left else m - n + i + offset
        visible = visible & (pos[None, :] <= last_seen[:, None])
    return seq, visible


def online_prefill(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, indptr, indices, last, *, causal, scale,
                   return_lse, out, lse, k_scale=1.0, v_scale=1.0, causal_offset=0, top_left=False, **bug):
    """Tiled online-softmax MLA prefill in torch: each query token against its sequence's rows."""
    k, v, valid, lengths = latent_rows(ckv_cache, kpe_cache, indptr, indices, last, k_scale=k_scale,
                                       v_scale=v_scale)
    seq, visible = prefill_visible(qo_indptr, lengths, k.shape[1], causal=causal, offset=causal_offset,
                                   top_left=top_left)
    q = torch.cat([q_nope, q_pe], -1)                               # [T, H, D]
    o, l = online_attention(q, k[seq], _padded(v[seq], q.shape[-1]), mla_scale(q_nope, q_pe, scale),
                            visible[:, None, :], **bug)
    return finish(q_nope, o[..., :q_nope.shape[-1]], l, return_lse, out, lse)


def exact_attention(q, k, v, visible, scale):
    """Masked softmax in float64: q [L, H, D], k [L, N, D], v [L, N, Dc], visible [L, N] ->
    (o [L, H, Dc], lse [L, H]); a row that sees nothing gives 0 and -inf."""
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~visible[:, None, :], float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, 0.0)[..., None])
    return p @ v.double(), lse
