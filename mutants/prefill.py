"""Mutants of dense prefill (``kernels.prefill.prefill``): each has the kernel's signature and
exactly one realistic bug. Some wrap the project's kernel, the others are plain torch with the
bug written in (never the suite's references)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernels.prefill import prefill as _prefill

from ._common import (CLASS_BUGS, SOFTMAX_BUGS, default_scale, documented, finish, heads_for_queries,
                      ignoring_out, online_attention, packing_groups_as_pow2, reading_views_as_contiguous)

FAMILY = "prefill"

_LOG2E = 1.0 / math.log(2.0)


def _scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def _softmax_attention(q, k, v, visible, scale):
    """fp32 attention with the row max subtracted; ``visible`` [Sq, Skv] bool. Rows that see no
    key come out as o = 0, lse = -inf. GQA: query head h reads KV head h // G."""
    G = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(G, dim=1)
    v = v.float().repeat_interleave(G, dim=1)
    s = (q.float() @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~visible, float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p @ v) / torch.where(l > 0, l, torch.ones_like(l))
    return o, (m + torch.log(l))[..., 0]


_finish = finish


def _causal(S, device, *, offset=0, transposed=False):
    i = torch.arange(S, device=device)[:, None]
    j = torch.arange(S, device=device)[None, :]
    return (j >= i) if transposed else (j <= i + offset)


def prefill_causal_excludes_diagonal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                                     scale: Optional[float] = None, return_lse: bool = False,
                                     out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Causal mask off by one: key j visible iff j < i (not j <= i), so a row never sees itself."""
    S = q.shape[2]
    visible = _causal(S, q.device, offset=-1) if causal else torch.ones(S, S, dtype=torch.bool, device=q.device)
    o, l = _softmax_attention(q, k, v, visible, _scale(q, scale))
    return _finish(q, o, l, return_lse, out, lse)


def prefill_causal_mask_transposed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                                   scale: Optional[float] = None, return_lse: bool = False,
                                   out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Causal mask on the wrong axis: query i sees keys j >= i (the future) instead of j <= i."""
    S = q.shape[2]
    visible = (_causal(S, q.device, transposed=True) if causal
               else torch.ones(S, S, dtype=torch.bool, device=q.device))
    o, l = _softmax_attention(q, k, v, visible, _scale(q, scale))
    return _finish(q, o, l, return_lse, out, lse)


def prefill_gqa_head_modulo(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                            scale: Optional[float] = None, return_lse: bool = False,
                            out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Wrong GQA head mapping: query head h reads KV head h % Hkv instead of h // G."""
    G = q.shape[1] // k.shape[1]
    # Tiling the KV heads G times makes the kernel's h // 1 read tiled head h, i.e. KV head h % Hkv.
    return _prefill(q, k.repeat(1, G, 1, 1), v.repeat(1, G, 1, 1), causal=causal, scale=scale,
                    return_lse=return_lse, out=out, lse=lse)


def prefill_lse_base2(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                      scale: Optional[float] = None, return_lse: bool = False,
                      out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Returns the LSE in base 2 (the exp2 domain's m + log2(l)) instead of the natural log."""
    o, l = _prefill(q, k, v, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse)
    if l is not None:
        l.mul_(_LOG2E)
    return o, l


def prefill_softmax_no_max(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                           scale: Optional[float] = None, return_lse: bool = False,
                           out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Softmax without subtracting the row max: exp(scores) in the input dtype overflows on large logits."""
    S, G = q.shape[2], q.shape[1] // k.shape[1]
    kk = k.float().repeat_interleave(G, dim=1)
    vv = v.float().repeat_interleave(G, dim=1)
    s = (q.float() @ kk.transpose(-1, -2)) * _scale(q, scale)
    if causal:
        s = s.masked_fill(~_causal(S, q.device), float("-inf"))
    p = torch.exp(s.to(q.dtype)).float()  # fp16: inf once a score passes ~11.1
    l = p.sum(-1, keepdim=True)
    o = (p @ vv) / l
    return _finish(q, o, torch.log(l)[..., 0], return_lse, out, lse)


def prefill_tail_rows_unwritten(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                                scale: Optional[float] = None, return_lse: bool = False,
                                out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Grid of S // BLOCK_M query tiles (floor, not ceil): the ragged last rows are never written."""
    block_m = 16
    o_full, l_full = _prefill(q, k, v, causal=causal, scale=scale, return_lse=return_lse)
    rows = (q.shape[2] // block_m) * block_m
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    out[:, :, :rows].copy_(o_full[:, :, :rows])
    if not return_lse:
        return out, None
    if lse is None:
        lse = torch.empty(l_full.shape, dtype=torch.float32, device=q.device)
    lse[:, :, :rows].copy_(l_full[:, :, :rows])
    return out, lse


def prefill_scale_applied_twice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                                scale: Optional[float] = None, return_lse: bool = False,
                                out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Softmax scale applied twice (q pre-scaled and the kernel scales again): scores * scale^2."""
    sc = _scale(q, scale)
    return _prefill(q, k, v, causal=causal, scale=sc * sc, return_lse=return_lse, out=out, lse=lse)


def _online(q, k, v, *, causal, scale, return_lse, out, lse, **bug):
    """Tiled online-softmax prefill in torch (64-key tiles), with ``bug`` switched in."""
    S, Hq = q.shape[2], q.shape[1]
    visible = _causal(S, q.device) if causal else None
    o, l = online_attention(q, heads_for_queries(k, Hq), heads_for_queries(v, Hq), default_scale(q, scale),
                            visible, **bug)
    return _finish(q, o, l, return_lse, out, lse)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: Optional[float] = None,
               return_lse: bool = False, out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
        return _online(q, k, v, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse, **bug)

    mutant.__name__ = f"prefill_{name}"
    mutant.__doc__ = doc
    return mutant


prefill_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_prefill, "q", "k", "v"), "prefill_reads_views_as_contiguous",
    "Ignores the strides of q/k/v: a view (a window of a longer cache, a slice of a fused QKV tensor) is read "
    "as if it were contiguous.")
prefill_ignores_out = documented(
    ignoring_out(_prefill), "prefill_ignores_out", "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    _softmax_bug("fp16_accumulator"),
    _softmax_bug("stale_running_max"),
    _softmax_bug("exp_without_max_fp32"),
    prefill_reads_views_as_contiguous,
    prefill_ignores_out,
    prefill_causal_excludes_diagonal,
    prefill_causal_mask_transposed,
    prefill_gqa_head_modulo,
    prefill_lse_base2,
    prefill_softmax_no_max,
    prefill_tail_rows_unwritten,
    prefill_scale_applied_twice,
    *(_softmax_bug(b) for b in CLASS_BUGS),
    packing_groups_as_pow2(_prefill, "prefill_pow2_group_packing"))}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def prefill_sdpa_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                      scale: Optional[float] = None, return_lse: bool = False,
                      out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """torch's scaled_dot_product_attention in fp32 (the LSE from a logsumexp of the same scores).
    The causal mask goes in as a boolean mask: torch 2.13's CPU kernel with ``is_causal`` returns
    NaN for a scale <= 0."""
    Hq, sc = q.shape[1], default_scale(q, scale)
    qf, kf, vf = q.float(), heads_for_queries(k, Hq).float(), heads_for_queries(v, Hq).float()
    mask = _causal(q.shape[2], q.device) if causal else None
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=sc)
    s = (qf @ kf.transpose(-1, -2)) * sc
    if causal:
        s = s.masked_fill(~_causal(q.shape[2], q.device), float("-inf"))
    return _finish(q, o, torch.logsumexp(s, -1), return_lse, out, lse)


def prefill_fp64(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                 scale: Optional[float] = None, return_lse: bool = False,
                 out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """Dense attention in float64, the row max subtracted by hand."""
    S, Hq = q.shape[2], q.shape[1]
    s = (q.double() @ heads_for_queries(k, Hq).double().transpose(-1, -2)) * default_scale(q, scale)
    if causal:
        s = s.masked_fill(~_causal(S, q.device), float("-inf"))
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    o = (e / total) @ heads_for_queries(v, Hq).double()
    return _finish(q, o, (m + torch.log(total))[..., 0].float(), return_lse, out, lse)


def prefill_online_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                        scale: Optional[float] = None, return_lse: bool = False,
                        out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None):
    """The mutants' tiled online softmax with no bug switched in (fp32 accumulator, running max)."""
    return _online(q, k, v, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse)


CONTROLS = {f.__name__: f for f in (prefill_sdpa_fp32, prefill_fp64, prefill_online_fp32)}
