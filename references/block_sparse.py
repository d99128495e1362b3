"""Block-sparse attention reference (docs/contract.md section 8), vectorized PyTorch.

The sparse block index is expanded to a token-level mask and dense attention runs under it.
Memory is bounded by working one (batch, head) slice and a band of query rows at a time (about
``SCORE_BYTES`` of scores): several workers share one device.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

PAD = 65535
#: Bytes of attention scores materialised at once.
SCORE_BYTES = 2**30


def token_mask(sabi: torch.Tensor, S: int, block_shape: Sequence[int]) -> torch.Tensor:
    """sabi [..., n_rows, n_cols] -> bool [..., S, S]: query i may see key j."""
    bq, bkv = (int(b) for b in block_shape)
    n_cols = sabi.shape[-1]
    valid = sabi != PAD
    idx = torch.where(valid, sabi.long(), torch.full_like(sabi, n_cols, dtype=torch.long))
    blocks = torch.zeros((*sabi.shape[:-1], n_cols + 1), dtype=torch.bool, device=sabi.device)
    blocks.scatter_(-1, idx, True)
    blocks = blocks[..., :n_cols]
    return blocks.repeat_interleave(bq, dim=-2)[..., :S, :].repeat_interleave(bkv, dim=-1)[..., :S]


def block_sparse_reference(q, k, v, sabi, *, block_shape: Sequence[int], scale: Optional[float] = None,
                           compute_dtype: torch.dtype = torch.float64):
    """Reference for kernels.block_sparse: (o [B, H, S, D], lse [B, H, S]) in compute_dtype."""
    B, H, S, D = q.shape
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    o = torch.empty((B, H, S, D), dtype=compute_dtype, device=q.device)
    lse = torch.empty((B, H, S), dtype=compute_dtype, device=q.device)
    rows = max(1, SCORE_BYTES // (S * torch.empty(0, dtype=compute_dtype).element_size()))
    for b in range(B):          # slices and row bands bound memory; each is fully vectorized
        for h in range(H):
            mask = token_mask(sabi[b, h], S, block_shape)
            qs, ks, vs = (t[b, h].to(compute_dtype) for t in (q, k, v))
            for r in range(0, S, rows):
                scores = (qs[r:r + rows] @ ks.transpose(-1, -2)) * scale
                scores.masked_fill_(~mask[r:r + rows], float("-inf"))
                lse[b, h, r:r + rows] = torch.logsumexp(scores, dim=-1)
                o[b, h, r:r + rows] = torch.softmax(scores, dim=-1) @ vs
            del mask
    return o, lse
