"""Mustafar references (kernels.md section 9), vectorized PyTorch.

Two kinds, kept apart:
* the exact references that conformance uses: pruning and 2-bit quantisation written on the
  dense tensor (``pruned``, ``quantised``: the compressor's round trip must reproduce them), and
  the key / value / decode math on the cache the compressed buffers describe
  (``kernels.mustafar_format.decompress``, itself held exact to ``quantised`` by those cases);
* the approximation ground truth: dense attention on the unpruned fp16 cache (``dense_*``),
  which ``approximation`` compares results with. Never pass/fail.
"""
from __future__ import annotations

import math

import torch

from kernels.mustafar_format import Compressed, decompress

TILE = 64


def keep_mask(x: torch.Tensor, sparsity: float) -> torch.Tensor:
    """True where x survives per-token pruning: its rank by |x| along D (ties: lower index first)
    is below D - floor(s * D). Written as a count of the entries that beat it."""
    D = x.shape[-1]
    a = x.abs().float()
    ai, aj = a[..., :, None], a[..., None, :]           # i: the entry ranked, j: its rivals
    earlier = torch.ones(D, D, dtype=torch.bool, device=x.device).tril(-1)  # [i, j]: j < i
    rank = ((aj > ai) | ((aj == ai) & earlier)).sum(-1)
    return rank < D - int(sparsity * D)


def pruned(x: torch.Tensor, sparsity: float) -> torch.Tensor:
    return torch.where(keep_mask(x, sparsity), x, torch.zeros_like(x))


def _tile_view(t: torch.Tensor, kind: str) -> torch.Tensor:
    """[B, H, S, D] -> a view whose last axis runs along one tile's 64 elements."""
    B, H, S, D = t.shape
    if kind == "key":
        return t.reshape(B, H, S // TILE, TILE, D).transpose(-1, -2)
    return t.reshape(B, H, S, D // TILE, TILE)


def quantised(x: torch.Tensor, sparsity: float, kind: str) -> torch.Tensor:
    """fp32 [B, H, S, D]: pruning, then per-tile 2-bit min-max quantise and dequantise."""
    keep = _tile_view(keep_mask(x, sparsity), kind)
    v = _tile_view(x.float(), kind)
    lo = torch.where(keep, v, math.inf).amin(-1, keepdim=True)
    hi = torch.where(keep, v, -math.inf).amax(-1, keepdim=True)
    none = ~keep.any(-1, keepdim=True)
    lo, hi = lo.masked_fill(none, 0.0), hi.masked_fill(none, 0.0)
    scale = (hi - lo) / 3
    scale = torch.where(scale == 0, 1.0, scale)
    zero = torch.floor(-lo / scale + 0.5)
    code = (torch.floor(v / scale + 0.5) + zero).clamp(0, 3)
    deq = torch.where(keep, (code - zero) * scale, 0.0)
    B, H, S, D = x.shape
    if kind == "key":
        return deq.transpose(-1, -2).reshape(B, H, S, D)
    return deq.reshape(B, H, S, D)


def compressed_reference(x: torch.Tensor, sparsity: float, kind: str, bits: int) -> torch.Tensor:
    """What ``decompress(compress(x))`` must give."""
    return pruned(x, sparsity) if bits == 16 else quantised(x, sparsity, kind)


def _per_query_head(kv: torch.Tensor, hq: int) -> torch.Tensor:
    return kv.repeat_interleave(hq // kv.shape[1], dim=1)


def scores_reference(q: torch.Tensor, k: torch.Tensor, compute_dtype) -> torch.Tensor:
    """Unscaled q . k: q [B, Hq, D], k [B, Hkv, S, D] -> [B, Hq, S] (query head h reads h // G)."""
    k = _per_query_head(k, q.shape[1]).to(compute_dtype)
    return (k @ q.to(compute_dtype)[..., None])[..., 0]


def values_reference(p: torch.Tensor, v: torch.Tensor, compute_dtype) -> torch.Tensor:
    """p [B, Hq, S] @ v [B, Hkv, S, D] -> [B, Hq, D]."""
    v = _per_query_head(v, p.shape[1]).to(compute_dtype)
    return (p.to(compute_dtype)[..., None, :] @ v)[..., 0, :]


def attention_reference(q, k, v, compute_dtype, scale=None) -> torch.Tensor:
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    p = torch.softmax(scores_reference(q, k, compute_dtype) * scale, dim=-1)
    return values_reference(p, v, compute_dtype)


def on_buffers(c: Compressed, compute_dtype) -> torch.Tensor:
    """The dense cache the compressed buffers describe, in the compute dtype."""
    return decompress(c).to(compute_dtype)


def approximation(approx: torch.Tensor, truth: torch.Tensor) -> dict:
    """Error figures of a lossy result against the lossless one (both reduced in float64)."""
    a, t = approx.double().flatten(), truth.double().flatten()
    err = (a - t).abs()
    return {"max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
            "rel_err": float((a - t).norm() / t.norm().clamp_min(1e-300)),
            "cosine": float(torch.nn.functional.cosine_similarity(a, t, dim=0))}
