"""Mutants of variable-length prefill (the family's ``cases.prefill_varlen.prefill_varlen``:
padded q [B, Hq, S, D] + lengths, or packed q [T, Hq, D] + cu_seqlens): each has that signature
and exactly one realistic bug. Some wrap the project's kernels, the others are plain torch with
the bug written in (never the suite's references)."""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Optional

import torch

from kernels.prefill_varlen import prefill_packed, prefill_padded

from ._common import (CLASS_BUGS, SOFTMAX_BUGS, documented, finish, ignoring_out, online_attention,
                      packing_groups_as_pow2, reading_views_as_contiguous)

FAMILY = "prefill_varlen"

_LOG2E = 1.0 / math.log(2.0)


def _kernel(q, k, v, seq, **kw):
    if q.dim() == 4:
        kw.pop("max_seqlen", None)
        return prefill_padded(q, k, v, seq, **kw)
    return prefill_packed(q, k, v, seq, **kw)


def _geometry(q, seq, max_seqlen):
    """Per query row / key, as [X, R] and [X, C] tensors (X = B padded, 1 packed): global index
    ``g``, sequence start ``start``, length ``len``, position in the sequence ``pos``; plus
    ``row_ok`` (rows that belong to a sequence) and the longest length ``max_len``."""
    dev = q.device
    if q.dim() == 4:
        B, S = q.shape[0], q.shape[2]
        lens = seq.to(dev, torch.int64)[:, None].expand(B, S)
        g = torch.arange(S, device=dev)[None].expand(B, S)
        start = torch.zeros_like(g)
        return SimpleNamespace(g=g, start=start, len=lens, pos=g, row_ok=g < lens, max_len=S)
    T = q.shape[0]
    cu = seq.to(dev, torch.int64)
    tok = torch.arange(T, device=dev)
    sid = torch.searchsorted(cu, tok, right=True) - 1
    start, lens = cu[sid], cu[sid + 1] - cu[sid]
    longest = int((cu[1:] - cu[:-1]).max()) if len(cu) > 1 else 0
    return SimpleNamespace(g=tok[None], start=start[None], len=lens[None], pos=(tok - start)[None],
                           row_ok=torch.ones(1, T, dtype=torch.bool, device=dev),
                           max_len=longest if max_seqlen is None else int(max_seqlen))


def _correct_visible(g, causal):
    """[X, R, C]: key in the query's sequence (and not after it when causal)."""
    vis = (g.start[:, None, :] == g.start[:, :, None]) & (g.pos[:, None, :] < g.len[:, None, :])
    if causal:
        vis &= g.pos[:, None, :] <= g.pos[:, :, None]
    return vis


def _torch_varlen(q, k, v, seq, *, causal, scale, return_lse, out, lse, max_seqlen, visible_fn,
                  zero_pad_rows=True):
    """Plain-torch varlen attention (fp32, row max subtracted) with ``visible_fn(geo, causal)`` ->
    [X, R, C] bool deciding which keys each query row sees; rows that see nothing give o = 0,
    lse = -inf. Writes into ``out``/``lse`` like the kernel."""
    packed = q.dim() == 3
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    qq, kk, vv = ((t.transpose(0, 1)[None] if packed else t).float() for t in (q, k, v))  # [X, H, R, D]
    G = qq.shape[1] // kk.shape[1]
    kk, vv = kk.repeat_interleave(G, dim=1), vv.repeat_interleave(G, dim=1)
    geo = _geometry(q, seq, max_seqlen)
    vis = visible_fn(geo, causal)
    if zero_pad_rows:
        vis = vis & geo.row_ok[:, :, None]
    s = (qq @ kk.transpose(-1, -2)) * scale
    s = s.masked_fill(~vis[:, None], float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p @ vv) / torch.where(l > 0, l, torch.ones_like(l))
    lse_v = (m + torch.log(l))[..., 0]
    if packed:
        o, lse_v = o[0].transpose(0, 1), lse_v[0].transpose(0, 1)
    return finish(q, o, lse_v, return_lse, out, lse)


def prefill_varlen_padded_rows_unwritten(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                                         causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                                         out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                         max_seqlen: Optional[int] = None):
    """Padded layout: query rows past a sequence's length are skipped (never zeroed, lse never -inf)."""
    o, l = _kernel(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, max_seqlen=max_seqlen)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if lse is None and return_lse:
        lse = torch.empty(l.shape, dtype=torch.float32, device=q.device)
    if q.dim() == 3:
        out.copy_(o)
        if return_lse:
            lse.copy_(l)
    else:
        for b, n in enumerate(seq.tolist()):  # only the rows a "row < length" early exit keeps
            out[b, :, :n].copy_(o[b, :, :n])
            if return_lse:
                lse[b, :, :n].copy_(l[b, :, :n])
    return out, (lse if return_lse else None)


def prefill_varlen_padded_rows_lse_zero(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                                        causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                                        out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                        max_seqlen: Optional[int] = None):
    """Padded layout: query rows past a sequence's length get o = 0 but lse = 0 (log 1) instead of -inf."""
    o, l = _kernel(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                   max_seqlen=max_seqlen)
    if return_lse and q.dim() == 4:
        for b, n in enumerate(seq.tolist()):  # per sequence: the rows past its length
            l[b, :, n:] = 0.0
    return o, l


def prefill_varlen_key_end_uses_max_len(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                                        causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                                        out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                        max_seqlen: Optional[int] = None):
    """Keys not masked by the sequence length: key end = start + max_seqlen instead of start + len."""
    def visible(g, causal):
        kg = g.g[:, None, :]
        vis = (kg >= g.start[:, :, None]) & (kg < (g.start[:, :, None] + g.max_len))
        if causal:
            vis &= kg <= g.g[:, :, None]
        return vis
    return _torch_varlen(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                         max_seqlen=max_seqlen, visible_fn=visible)


def prefill_varlen_gqa_head_modulo(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                                   causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                                   out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                   max_seqlen: Optional[int] = None):
    """Wrong GQA head mapping: query head h reads KV head h % Hkv instead of h // G."""
    G = q.shape[1] // k.shape[1]
    reps = [1] * k.dim()
    reps[1] = G  # the head axis in both layouts; tiled heads make h // 1 read KV head h % Hkv
    return _kernel(q, k.repeat(*reps), v.repeat(*reps), seq, causal=causal, scale=scale,
                   return_lse=return_lse, out=out, lse=lse, max_seqlen=max_seqlen)


def prefill_varlen_lse_base2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                             causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                             out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                             max_seqlen: Optional[int] = None):
    """Returns the LSE in base 2 (the exp2 domain's m + log2(l)) instead of the natural log."""
    o, l = _kernel(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                   max_seqlen=max_seqlen)
    if l is not None:
        l.mul_(_LOG2E)  # -inf rows stay -inf
    return o, l


def prefill_varlen_causal_sees_next_token(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                                          causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                                          out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                          max_seqlen: Optional[int] = None):
    """Causal mask off by one: key j visible iff j <= i + 1, so each row also sees the next token."""
    def visible(g, causal):
        vis = _correct_visible(g, False)
        if causal:
            vis &= g.pos[:, None, :] <= g.pos[:, :, None] + 1
        return vis
    return _torch_varlen(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                         max_seqlen=max_seqlen, visible_fn=visible)


def prefill_varlen_drops_last_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                                  causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                                  out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                  max_seqlen: Optional[int] = None):
    """KV loop bound off by one (range(len - 1)): the last key of every sequence is never attended."""
    def visible(g, causal):
        return _correct_visible(g, causal) & (g.pos[:, None, :] < g.len[:, None, :] - 1)
    return _torch_varlen(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                         max_seqlen=max_seqlen, visible_fn=visible)


def _as_batches(q, k, v):
    """[X, H, R, D] views of either layout (packed: X = 1, rows = tokens), KV heads matched."""
    packed = q.dim() == 3
    qq, kk, vv = ((t.transpose(0, 1)[None] if packed else t) for t in (q, k, v))
    G = qq.shape[1] // kk.shape[1]
    return qq, kk.repeat_interleave(G, dim=1), vv.repeat_interleave(G, dim=1)


def _online_varlen(q, k, v, seq, *, causal, scale, return_lse, out, lse, max_seqlen, **bug):
    """Tiled online-softmax varlen prefill in torch (64-key tiles over the padded rows or the packed
    tokens, the sequence mask applied per tile), with ``bug`` switched in."""
    qq, kk, vv = _as_batches(q, k, v)
    geo = _geometry(q, seq, max_seqlen)
    visible = _correct_visible(geo, causal) & geo.row_ok[:, :, None]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    o, l = online_attention(qq, kk, vv, scale, visible[:, None], **bug)
    if q.dim() == 3:
        o, l = o[0].transpose(0, 1), l[0].transpose(0, 1)
    return finish(q, o, l, return_lse, out, lse)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *, causal: bool,
               scale: Optional[float] = None, return_lse: bool = False, out: Optional[torch.Tensor] = None,
               lse: Optional[torch.Tensor] = None, max_seqlen: Optional[int] = None):
        return _online_varlen(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                              max_seqlen=max_seqlen, **bug)

    mutant.__name__ = f"prefill_varlen_{name}"
    mutant.__doc__ = doc
    return mutant


prefill_varlen_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_kernel, "q", "k", "v"), "prefill_varlen_reads_views_as_contiguous",
    "Ignores the strides of q/k/v: slices of one fused QKV tensor (or padded rows) are read as if contiguous.")
prefill_varlen_ignores_out = documented(
    ignoring_out(_kernel), "prefill_varlen_ignores_out",
    "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    _softmax_bug("fp16_accumulator"),
    _softmax_bug("stale_running_max"),
    _softmax_bug("exp_without_max_fp32"),
    prefill_varlen_reads_views_as_contiguous,
    prefill_varlen_ignores_out,
    prefill_varlen_padded_rows_unwritten,
    prefill_varlen_padded_rows_lse_zero,
    prefill_varlen_key_end_uses_max_len,
    prefill_varlen_gqa_head_modulo,
    prefill_varlen_lse_base2,
    prefill_varlen_causal_sees_next_token,
    prefill_varlen_drops_last_key,
    *(_softmax_bug(b) for b in CLASS_BUGS),
    packing_groups_as_pow2(_kernel, "prefill_varlen_pow2_group_packing"))}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def prefill_varlen_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *, causal: bool,
                        scale: Optional[float] = None, return_lse: bool = False,
                        out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                        max_seqlen: Optional[int] = None):
    """Dense attention in float64 under a same-sequence (and causal) mask; rows that belong to no
    sequence are zero with lse -inf."""
    qq, kk, vv = (t.double() for t in _as_batches(q, k, v))
    geo = _geometry(q, seq, max_seqlen)
    visible = (_correct_visible(geo, causal) & geo.row_ok[:, :, None])[:, None]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = ((qq @ kk.transpose(-1, -2)) * scale).masked_fill(~visible, float("-inf"))
    l = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(l), l, 0.0)[..., None])
    o = p @ vv
    if q.dim() == 3:
        o, l = o[0].transpose(0, 1), l[0].transpose(0, 1)
    return finish(q, o, l.float(), return_lse, out, lse)


def prefill_varlen_sdpa_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                             causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                             out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                             max_seqlen: Optional[int] = None):
    """torch's scaled_dot_product_attention in fp32 with a boolean mask; rows that see no key
    (padding) are set to zero / -inf afterwards."""
    qq, kk, vv = (t.float() for t in _as_batches(q, k, v))
    geo = _geometry(q, seq, max_seqlen)
    visible = (_correct_visible(geo, causal) & geo.row_ok[:, :, None])[:, None]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    sees = visible.any(-1, keepdim=True)
    o = torch.nn.functional.scaled_dot_product_attention(qq, kk, vv, attn_mask=visible | ~sees, scale=scale)
    o = torch.where(sees, o, 0.0)
    l = torch.logsumexp(((qq @ kk.transpose(-1, -2)) * scale).masked_fill(~visible, float("-inf")), -1)
    if q.dim() == 3:
        o, l = o[0].transpose(0, 1), l[0].transpose(0, 1)
    return finish(q, o, l, return_lse, out, lse)


def prefill_varlen_online_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: torch.Tensor, *,
                               causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                               out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                               max_seqlen: Optional[int] = None):
    """The mutants' tiled online softmax with no bug switched in."""
    return _online_varlen(q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                          max_seqlen=max_seqlen)


CONTROLS = {f.__name__: f for f in (prefill_varlen_fp64, prefill_varlen_sdpa_fp32, prefill_varlen_online_fp32)}
