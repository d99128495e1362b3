"""Dense attention references (prefill and decode), vectorized PyTorch.

The math is the contract in docs/contract.md sections 1 and 3: GQA by repeating each KV head
G = Hq / Hkv times (query head h reads KV head h // G), scores scaled by ``scale`` (default
1/sqrt(D)), causal masks key j > query i, softmax with the row max subtracted, natural-log LSE.
Everything runs in ``compute_dtype`` (float64 by default; float16/bfloat16 give the error plain
PyTorch makes in the input dtype).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

#: Bytes of attention scores materialised at once (per chunk of query heads).
SCORE_BYTES = 2**30


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
              scale: Optional[float] = None, compute_dtype: torch.dtype = torch.float64,
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Hq, Sq, D], k/v [B, Hkv, Skv, D] -> (o [B, Hq, Sq, D], lse [B, Hq, Sq]) in compute_dtype."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"attention: q, k, v must have rank 4, got {q.dim()}, {k.dim()}, {v.dim()}")
    Hq, Sq, D = q.shape[1], q.shape[2], q.shape[3]
    Hkv, Skv = k.shape[1], k.shape[2]
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"attention: Hq={Hq} must be a multiple of Hkv={Hkv}")
    if causal and Sq != Skv:
        raise ValueError(f"attention: causal needs Sq == Skv, got {Sq} and {Skv}")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    G = Hq // Hkv

    q = q.to(compute_dtype)
    k = k.to(compute_dtype).repeat_interleave(G, dim=1)
    v = v.to(compute_dtype).repeat_interleave(G, dim=1)
    future = torch.ones(Sq, Skv, dtype=torch.bool, device=q.device).triu(1) if causal else None
    # Long sequences: a few heads at a time, so the [B, heads, Sq, Skv] scores stay near 1 GiB.
    per_head = q.shape[0] * Sq * Skv * q.element_size()
    step = max(1, min(Hq, SCORE_BYTES // max(1, per_head)))
    outs = [_softmax_attention(q[:, h:h + step], k[:, h:h + step], v[:, h:h + step], scale, future)
            for h in range(0, Hq, step)]
    return torch.cat([o for o, _ in outs], dim=1), torch.cat([lse for _, lse in outs], dim=1)


def _softmax_attention(q, k, v, scale, future):
    scores = (q @ k.transpose(-1, -2)) * scale
    if future is not None:
        scores = scores.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    p = torch.softmax(scores, dim=-1)
    return p @ v, lse


def prefill_reference(q, k, v, *, causal: bool, scale: Optional[float] = None,
                      compute_dtype: torch.dtype = torch.float64):
    """Reference for kernels.prefill: (o [B, Hq, S, D], lse [B, Hq, S])."""
    return attention(q, k, v, causal=causal, scale=scale, compute_dtype=compute_dtype)


def decode_reference(q, k, v, *, scale: Optional[float] = None,
                     compute_dtype: torch.dtype = torch.float64):
    """Reference for kernels.decode: (o [B, Hq, 1, D], lse [B, Hq, 1])."""
    return attention(q, k, v, causal=False, scale=scale, compute_dtype=compute_dtype)
