"""Mutants of dense decode (``kernels.decode.decode``): each has the kernel's signature and exactly
one realistic bug. Some wrap the project's kernel, the others are plain torch with the bug
written in (never the suite's references)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernels.decode import decode as _decode

from ._common import (CLASS_BUGS, SOFTMAX_BUGS, default_scale, documented, finish, heads_for_queries,
                      store_rows_past_their_end,
                      ignoring_out, online_attention, packing_groups_as_pow2, reading_views_as_contiguous)

FAMILY = "decode"


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _scores(q, k, scale):
    """fp32 scores [B, Hq, 1, S]; query head h reads KV head h // G."""
    G = q.shape[1] // k.shape[1]
    return (q.float() @ k.float().repeat_interleave(G, dim=1).transpose(-1, -2)) * scale


def _values(q, v):
    return v.float().repeat_interleave(q.shape[1] // v.shape[1], dim=1)


_finish = finish


def decode_drops_last_key(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
                          return_lse: bool = False, out: Optional[torch.Tensor] = None,
                          lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None):
    """KV loop bound off by one (S - 1): the last key is never attended (S = 1 attends nothing)."""
    S = k.shape[2]
    if S > 1:
        return _decode(q, k[:, :, :S - 1], v[:, :, :S - 1], scale=scale, return_lse=return_lse, out=out,
                       lse=lse, num_splits=None if num_splits is None else min(num_splits, S - 1))
    # No key left: the empty-row result (o = 0, lse = -inf).
    B, Hq, _, D = q.shape
    return _finish(q, q.new_zeros((B, Hq, 1, D), dtype=torch.float32),
                   torch.full((B, Hq, 1), float("-inf"), device=q.device), return_lse, out, lse)


def decode_missing_scale(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
                         return_lse: bool = False, out: Optional[torch.Tensor] = None,
                         lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None):
    """Softmax scale never applied by default: scale=None means 1.0 instead of 1/sqrt(D)."""
    return _decode(q, k, v, scale=1.0 if scale is None else scale, return_lse=return_lse, out=out, lse=lse,
                   num_splits=num_splits)


def decode_lse_unscaled_max(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
                            return_lse: bool = False, out: Optional[torch.Tensor] = None,
                            lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None):
    """LSE off by the scale: m_raw + log(l) with the running max of the unscaled scores (not scale * m_raw)."""
    sc = _scale(q, scale)
    raw = _scores(q, k, 1.0)
    m_raw = raw.amax(-1, keepdim=True)
    p = torch.exp(sc * (raw - m_raw))
    l = p.sum(-1, keepdim=True)
    o = (p @ _values(q, v)) / l
    return _finish(q, o, (m_raw + torch.log(l))[..., 0], return_lse, out, lse)


def decode_split_merge_unweighted(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                                  scale: Optional[float] = None, return_lse: bool = False,
                                  out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                  num_splits: Optional[int] = None):
    """Split-KV merge averages the splits' outputs instead of weighting them by exp(lse_i - lse)."""
    split = 128
    s = _scores(q, k, _scale(q, scale))
    vv = _values(q, v)
    outs, lses = [], []
    for start in range(0, k.shape[2], split):  # each split: its own softmax and LSE
        si = s[..., start:start + split]
        outs.append(torch.softmax(si, dim=-1) @ vv[:, :, start:start + split])
        lses.append(torch.logsumexp(si, dim=-1))
    o = torch.stack(outs).mean(0)  # should be sum_i exp(lse_i - lse) * o_i
    return _finish(q, o, torch.logsumexp(torch.stack(lses), dim=0), return_lse, out, lse)


def decode_softmax_no_max(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
                          return_lse: bool = False, out: Optional[torch.Tensor] = None,
                          lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None):
    """Softmax without subtracting the row max: exp(scores) in the input dtype overflows on large logits."""
    s = _scores(q, k, _scale(q, scale))
    p = torch.exp(s.to(q.dtype)).float()  # fp16: inf once a score passes ~11.1
    l = p.sum(-1, keepdim=True)
    o = (p @ _values(q, v)) / l
    return _finish(q, o, torch.log(l)[..., 0], return_lse, out, lse)


def decode_output_through_bf16(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                               scale: Optional[float] = None, return_lse: bool = False,
                               out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                               num_splits: Optional[int] = None):
    """Output stored in the wrong dtype: the accumulator is cast to bf16 (hard-coded) before the fp16 store."""
    o, l = _decode(q, k, v, scale=scale, return_lse=return_lse, out=out, lse=lse, num_splits=num_splits)
    o.copy_(o.to(torch.bfloat16))
    return o, l


def _online(q, k, v, *, scale, return_lse, out, lse, **bug):
    """Tiled online-softmax decode in torch (64-key tiles), with ``bug`` switched in."""
    Hq = q.shape[1]
    o, l = online_attention(q, heads_for_queries(k, Hq), heads_for_queries(v, Hq), default_scale(q, scale), **bug)
    return _finish(q, o, l, return_lse, out, lse)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
               return_lse: bool = False, out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
               num_splits: Optional[int] = None):
        return _online(q, k, v, scale=scale, return_lse=return_lse, out=out, lse=lse, **bug)

    mutant.__name__ = f"decode_{name}"
    mutant.__doc__ = doc
    return mutant


def decode_merge_unweighted_past_threshold(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                                           scale: Optional[float] = None, return_lse: bool = False,
                                           out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                           num_splits: Optional[int] = None):
    """Splits the keys past 512 (split-KV) and merges the splits' outputs by a plain average
    instead of weighting them by exp(lse_i - lse): right until a sequence is long enough to split."""
    split = 512
    s = _scores(q, k, _scale(q, scale))
    vv = _values(q, v)
    outs, lses = [], []
    for start in range(0, k.shape[2], split):  # one iteration per split, each vectorized
        si = s[..., start:start + split]
        outs.append(torch.softmax(si, dim=-1) @ vv[:, :, start:start + split])
        lses.append(torch.logsumexp(si, dim=-1))
    return _finish(q, torch.stack(outs).mean(0), torch.logsumexp(torch.stack(lses), dim=0),
                   return_lse, out, lse)


decode_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_decode, "q", "k", "v"), "decode_reads_views_as_contiguous",
    "Ignores the strides of q/k/v: K/V windows of a longer cache or slices of a fused projection are read "
    "as if contiguous.")
decode_ignores_out = documented(ignoring_out(_decode), "decode_ignores_out",
                                "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


def decode_merge_max_clamped_at_zero(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                                     scale: Optional[float] = None, return_lse: bool = False,
                                     out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                     num_splits: Optional[int] = None):
    """Split-KV merge (splits of 512 keys) whose max over the partial LSEs starts at 0: weights
    e^(lse_i - max(0, max_j lse_j)) in fp32 flush to 0 once every partial LSE is below -103."""
    split = 512
    s = _scores(q, k, _scale(q, scale))
    vv = _values(q, v)
    outs, lses = [], []
    for start in range(0, k.shape[2], split):  # one iteration per split, each vectorized
        si = s[..., start:start + split]
        outs.append(torch.softmax(si, dim=-1) @ vv[:, :, start:start + split])
        lses.append(torch.logsumexp(si, dim=-1))
    lp = torch.stack(lses).float()
    m = lp.amax(0).clamp_min(0.0)
    w = torch.exp(lp - m)
    o = (w[..., None] * torch.stack(outs)).sum(0) / w.sum(0)[..., None]
    return _finish(q, o, m + torch.log(w.sum(0)), return_lse, out, lse)


def decode_stores_into_the_next_row(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                                    scale: Optional[float] = None, return_lse: bool = False,
                                    out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                    num_splits: Optional[int] = None):
    """Output stored by a Triton epilogue whose store mask bounds the buffer, not the row: each
    program writes zeros over the start of the next program's row (right in grid order only)."""
    o, l = online_attention(q, heads_for_queries(k, q.shape[1]), heads_for_queries(v, q.shape[1]),
                            default_scale(q, scale))
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    store_rows_past_their_end(o, out)
    return _finish(q, out, l, return_lse, out, lse)


MUTANTS = {f.__name__: f for f in (
    decode_stores_into_the_next_row,
    decode_merge_max_clamped_at_zero,
    _softmax_bug("fp16_accumulator"),
    _softmax_bug("stale_running_max"),
    _softmax_bug("exp_without_max_fp32"),
    decode_merge_unweighted_past_threshold,
    decode_reads_views_as_contiguous,
    decode_ignores_out,
    decode_drops_last_key,
    decode_missing_scale,
    decode_lse_unscaled_max,
    decode_split_merge_unweighted,
    decode_softmax_no_max,
    decode_output_through_bf16,
    *(_softmax_bug(b) for b in CLASS_BUGS),
    packing_groups_as_pow2(_decode, "decode_pow2_group_packing"))}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def decode_sdpa_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
                     return_lse: bool = False, out: Optional[torch.Tensor] = None,
                     lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None):
    """torch's scaled_dot_product_attention in fp32 (the LSE from a logsumexp of the same scores)."""
    Hq, sc = q.shape[1], default_scale(q, scale)
    qf, kf, vf = q.float(), heads_for_queries(k, Hq).float(), heads_for_queries(v, Hq).float()
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, scale=sc)
    return _finish(q, o, torch.logsumexp((qf @ kf.transpose(-1, -2)) * sc, -1), return_lse, out, lse)


def decode_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
                return_lse: bool = False, out: Optional[torch.Tensor] = None,
                lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None):
    """Attention in float64 with the row max subtracted by hand, GQA by grouping query heads."""
    B, Hq, _, D = q.shape
    Hkv = k.shape[1]
    qg = q.double().reshape(B, Hkv, Hq // Hkv, D)                        # the G heads of a KV head
    s = (qg @ k.double().transpose(-1, -2)) * default_scale(q, scale)    # [B, Hkv, G, S]
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    o = (e @ v.double()) / e.sum(-1, keepdim=True)
    l = (m + torch.log(e.sum(-1, keepdim=True)))[..., 0]
    return _finish(q, o.reshape(B, Hq, 1, D), l.reshape(B, Hq, 1).float(), return_lse, out, lse)


def decode_online_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: Optional[float] = None,
                       return_lse: bool = False, out: Optional[torch.Tensor] = None,
                       lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None):
    """The mutants' tiled online softmax with no bug switched in."""
    return _online(q, k, v, scale=scale, return_lse=return_lse, out=out, lse=lse)


CONTROLS = {f.__name__: f for f in (decode_sdpa_fp32, decode_fp64, decode_online_fp32)}
