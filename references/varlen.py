"""Variable-length prefill references (docs/contract.md section 2), vectorized PyTorch.

Same math as references.attention (GQA by repeating KV heads, default scale 1/sqrt(D), natural-log
LSE, everything in ``compute_dtype``), with the varlen masks built as tensors, no per-sequence loop:

* padded: key j of sequence b is visible iff j < lengths[b] (and j <= i when causal); query rows
  i >= lengths[b] are zeros in ``o`` and -inf in ``lse``.
* packed: attention over all T tokens with a same-sequence mask (sequence id per token from
  cu_seqlens) and, when causal, j <= i; ``lse`` is [T, Hq].
"""
from __future__ import annotations

import math
from typing import Optional

import torch


#: Bytes of attention scores materialised at once (a few query heads at a time): several workers
#: share one device, and the full [B, Hq, S, S] in float64 of a bench case is gigabytes.
SCORE_BYTES = 2**30


def _masked_attention(q, k, v, visible, scale, compute_dtype):
    """q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D], visible [B, 1, Sq, Skv] bool (every row must see
    at least one key) -> (o, lse) in compute_dtype."""
    G = q.shape[1] // k.shape[1]
    q = q.to(compute_dtype)
    k = k.to(compute_dtype).repeat_interleave(G, dim=1)
    v = v.to(compute_dtype).repeat_interleave(G, dim=1)
    B, Hq, Sq, _ = q.shape
    step = max(1, SCORE_BYTES // max(1, B * Sq * k.shape[2] * q.element_size()))
    outs, lses = [], []
    for h in range(0, Hq, step):
        scores = (q[:, h:h + step] @ k[:, h:h + step].transpose(-1, -2)) * scale
        scores = scores.masked_fill(~visible, float("-inf"))
        lses.append(torch.logsumexp(scores, dim=-1))
        outs.append(torch.softmax(scores, dim=-1) @ v[:, h:h + step])
    return torch.cat(outs, dim=1), torch.cat(lses, dim=1)


def prefill_padded_reference(q, k, v, lengths, *, causal: bool, scale: Optional[float] = None,
                             compute_dtype: torch.dtype = torch.float64):
    """Reference for kernels.prefill_varlen.prefill_padded: (o [B, Hq, S, D], lse [B, Hq, S])."""
    B, Hq, S, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    pos = torch.arange(S, device=q.device)
    lens = lengths.to(q.device, torch.int64)[:, None, None, None]
    row_ok = pos[None, None, :, None] < lens                      # [B, 1, S, 1]
    visible = pos[None, None, None, :] < lens                     # [B, 1, 1, S]
    if causal:
        visible = visible & (pos[None, :] <= pos[:, None])[None, None]
    # Padded rows see key 0 so the softmax stays finite; they are overwritten below.
    visible = visible | (~row_ok & (pos == 0)[None, None, None, :])
    o, lse = _masked_attention(q, k, v, visible, scale, compute_dtype)
    o = o.masked_fill(~row_ok, 0.0)
    lse = lse.masked_fill(~row_ok[..., 0], float("-inf"))
    return o, lse


def seq_ids(cu_seqlens: torch.Tensor, T: int) -> torch.Tensor:
    """Sequence index of each of the T tokens (zero-length sequences own no token)."""
    return torch.searchsorted(cu_seqlens.to(torch.int64), torch.arange(T, device=cu_seqlens.device),
                              right=True) - 1


def prefill_packed_reference(q, k, v, cu_seqlens, *, causal: bool, scale: Optional[float] = None,
                             compute_dtype: torch.dtype = torch.float64):
    """Reference for kernels.prefill_varlen.prefill_packed: (o [T, Hq, D], lse [T, Hq])."""
    T, Hq, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    sid = seq_ids(cu_seqlens.to(q.device), T)
    visible = sid[:, None] == sid[None, :]
    if causal:
        pos = torch.arange(T, device=q.device)
        visible = visible & (pos[None, :] <= pos[:, None])
    # [T, H, D] -> [1, H, T, D]
    o, lse = _masked_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                               visible[None, None], scale, compute_dtype)
    return o[0].transpose(0, 1), lse[0].transpose(0, 1)


def padded_to_packed(x: torch.Tensor, lengths) -> torch.Tensor:
    """[B, H, S, D] padded -> [T, H, D] packed (rows < lengths[b] of each sequence, in order)."""
    S = x.shape[2]
    keep = torch.arange(S)[None, :] < torch.as_tensor(lengths, dtype=torch.int64)[:, None]  # [B, S]
    return x.transpose(1, 2)[keep.to(x.device)]


def packed_to_padded(x: torch.Tensor, lengths, S: int, fill: float = 0.0) -> torch.Tensor:
    """[T, H, ...] packed -> [B, H, S, ...] padded, positions >= lengths[b] set to ``fill``."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64)
    keep = (torch.arange(S)[None, :] < lengths[:, None]).to(x.device)
    out = x.new_full((len(lengths), S) + tuple(x.shape[1:]), fill)
    out[keep] = x
    return out.transpose(1, 2)
