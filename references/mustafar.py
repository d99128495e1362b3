"""Mustafar references (docs/contract.md section 9), vectorized PyTorch.

Two kinds, kept apart:
* the exact references that conformance uses: pruning and 2-bit quantisation written on the
  dense tensor (``pruned``, ``quantised``: the compressor's round trip must reproduce them), and
  the key / value / decode math on the cache the compressed buffers describe (``on_buffers``,
  a decoder written here from docs/contract.md section 9, sharing no code with the kernels' format
  module, so a bug in that module cannot hide from conformance);
* the approximation ground truth: dense attention on the unpruned fp16 cache (``dense_*``),
  which ``approximation`` compares results with. Never pass/fail.
"""
from __future__ import annotations

import math

import torch

TILE = 64
CODES_PER_WORD = 16


def keep_mask(x: torch.Tensor, sparsity: float, chosen: torch.Tensor | None = None) -> torch.Tensor:
    """True where x survives per-token pruning: its rank by |x| along D (ties: lower index first)
    is below D - floor(s * D).

    Ties in |x| at the keep threshold may be broken either way (docs/contract.md, "Pruning ties"):
    given ``chosen``, an implementation's keep mask, each token whose ``chosen`` row is a legal
    pruning (``legal_pruning``) keeps that row instead; any other token keeps the default."""
    D = x.shape[-1]
    # A stable sort keeps equal |x| in index order, so an entry's place in the descending order
    # is exactly the count of entries that beat it (larger, or equal and earlier).
    order = torch.sort(x.abs().float(), dim=-1, descending=True, stable=True).indices
    rank = order.argsort(dim=-1)
    default = rank < D - int(sparsity * D)
    if chosen is None:
        return default
    chosen = chosen.to(device=x.device, dtype=torch.bool)
    return torch.where(legal_pruning(x, chosen, sparsity).unsqueeze(-1), chosen, default)


def legal_pruning(x: torch.Tensor, keep: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Per token: ``keep`` holds exactly D - floor(s * D) entries and no dropped entry is larger
    in magnitude than a kept one (so it differs from any other legal choice only among ties)."""
    D = x.shape[-1]
    a = x.abs().float()
    inf = torch.tensor(float("inf"), device=x.device)
    smallest_kept = torch.where(keep, a, inf).amin(-1)
    largest_dropped = torch.where(keep, -inf, a).amax(-1)
    return (keep.sum(-1) == D - int(sparsity * D)) & (largest_dropped <= smallest_kept)


def kept_from_bitmaps(kind: str, shape, bitmaps: torch.Tensor) -> torch.Tensor:
    """bool [B, H, S_c, D]: the elements a buffer set's bitmaps mark as kept (bit 63 - j of its
    tile's int64 for element j; tiles as in ``decode_buffers``)."""
    bit = 63 - torch.arange(TILE, device=bitmaps.device)
    kept = ((bitmaps.to(torch.int64)[:, None] >> bit) & 1).bool()
    tile, j = _tile_and_slot(kind, shape, bitmaps.device)
    return kept[tile, j]


def pruned(x: torch.Tensor, sparsity: float, chosen: torch.Tensor | None = None) -> torch.Tensor:
    return torch.where(keep_mask(x, sparsity, chosen), x, torch.zeros_like(x))


def _tile_view(t: torch.Tensor, kind: str) -> torch.Tensor:
    """[B, H, S, D] -> a view whose last axis runs along one tile's 64 elements."""
    B, H, S, D = t.shape
    if kind == "key":
        return t.reshape(B, H, S // TILE, TILE, D).transpose(-1, -2)
    return t.reshape(B, H, S, D // TILE, TILE)


def quantised(x: torch.Tensor, sparsity: float, kind: str, chosen: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [B, H, S, D]: pruning, then per-tile 2-bit min-max quantise and dequantise."""
    keep = _tile_view(keep_mask(x, sparsity, chosen), kind)
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


def compressed_reference(x: torch.Tensor, sparsity: float, kind: str, bits: int,
                         chosen: torch.Tensor | None = None) -> torch.Tensor:
    """What ``decompress(compress(x))`` must give (ties resolved as in ``keep_mask``)."""
    return pruned(x, sparsity, chosen) if bits == 16 else quantised(x, sparsity, kind, chosen)


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


def _tile_and_slot(kind: str, shape, device) -> tuple[torch.Tensor, torch.Tensor]:
    """For every element (b, h, s, d) of a [B, H, S_c, D] cache: its global tile and its place j
    in the tile. Keys: tile (t, c) holds tokens t*64 .. t*64+63 of channel c, local index
    t * D + c. Values: tile (s, cb) holds channels cb*64 .. cb*64+63 of token s, local index
    s * (D / 64) + cb. Slices (b, h) follow each other."""
    B, H, S, D = shape
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    h = torch.arange(H, device=device).view(1, H, 1, 1)
    s = torch.arange(S, device=device).view(1, 1, S, 1)
    d = torch.arange(D, device=device).view(1, 1, 1, D)
    slice_ = b * H + h
    if kind == "key":
        return (slice_ * (S // TILE) + s // TILE) * D + d, (s % TILE).expand(B, H, S, D)
    return (slice_ * S + s) * (D // TILE) + d // TILE, (d % TILE).expand(B, H, S, D)


def decode_buffers(kind: str, bits: int, shape, bitmaps, offsets, packed, scale=None, zero=None) -> torch.Tensor:
    """fp32 [B, H, S_c, D]: the cache the Mustafar buffers describe (docs/contract.md section 9), zero
    where an element is not kept. Element j of a tile is kept iff bit 63 - j of its int64 bitmap
    is set; the p-th kept element (p = kept elements before it) is ``packed[offsets[tile] + p]``
    (fp16), or 2-bit code ``(word >> 2 * (p % 16)) & 3`` of word ``packed[offsets[tile] + p // 16]``
    dequantised as ``(code - zero[tile]) * scale[tile]``."""
    device = bitmaps.device
    bit = 63 - torch.arange(TILE, device=device)
    kept = (bitmaps.to(torch.int64)[:, None] >> bit) & 1                  # [tiles, 64] of 0/1
    before = kept.cumsum(-1) - kept                                          # kept elements before j
    tile, j = _tile_and_slot(kind, shape, device)
    is_kept = kept[tile, j].bool()
    p = before[tile, j]
    start = offsets.to(torch.int64)[tile]
    flat = torch.cat([packed.flatten(), packed.new_zeros(1)])               # a safe slot for unkept ones
    if bits == 16:
        where = torch.where(is_kept, start + p, flat.numel() - 1)
        values = flat[where].float()
    else:
        where = torch.where(is_kept, start + p // CODES_PER_WORD, flat.numel() - 1)
        word = flat[where].to(torch.int64) & 0xFFFFFFFF                     # the word's 32 bits, unsigned
        code = (word >> (2 * (p % CODES_PER_WORD))) & 3
        values = (code - zero.to(torch.int64)[tile]).float() * scale.float()[tile]
    return torch.where(is_kept, values, torch.zeros_like(values))


def encode_buffers(x: torch.Tensor, sparsity: float, kind: str, bits: int) -> dict:
    """The reference compressor: the buffers of docs/contract.md section 9 for ``x`` [B, H, S_c, D]
    (fp16), pruned by ``keep_mask`` (ties: the lower channel): ``bitmaps`` int64 [n_tiles] (bit
    63 - j for element j), ``offsets`` int32 [n_tiles + 1], ``packed`` (fp16 values, or int32
    words of sixteen 2-bit codes, LSB first, each tile starting on a word) and, for 2 bits,
    ``scale`` fp32 and ``zero`` int32 [n_tiles]. Written from the spec, sharing no code with
    kernels/: the compute kernels of an implementation are run on these buffers."""
    keep = _tile_view(keep_mask(x, sparsity), kind).reshape(-1, TILE)   # [n_tiles, 64], tile order
    vals = _tile_view(x, kind).reshape(-1, TILE)
    bit = 63 - torch.arange(TILE, device=x.device)
    bitmaps = (keep.to(torch.int64) << bit).sum(-1)                      # distinct bits: the sum is their OR
    count = keep.sum(-1)
    if bits == 16:
        offsets = torch.cat([count.new_zeros(1), count.cumsum(0)]).to(torch.int32)
        return {"bitmaps": bitmaps, "offsets": offsets, "packed": vals[keep]}
    v = vals.float()
    lo = torch.where(keep, v, math.inf).amin(-1)
    hi = torch.where(keep, v, -math.inf).amax(-1)
    lo, hi = torch.where(count > 0, lo, 0.0), torch.where(count > 0, hi, 0.0)
    scale = (hi - lo) / 3
    scale = torch.where(scale == 0, 1.0, scale)
    zero = torch.floor(-lo / scale + 0.5)
    code = (torch.floor(v / scale[:, None] + 0.5) + zero[:, None]).clamp(0, 3).to(torch.int64)
    words = (count + CODES_PER_WORD - 1) // CODES_PER_WORD
    offsets = torch.cat([words.new_zeros(1), words.cumsum(0)])
    p = keep.to(torch.int64).cumsum(-1) - 1                              # rank among the tile's kept
    word = (offsets[:-1, None] + p // CODES_PER_WORD)[keep]
    packed = torch.zeros(int(offsets[-1]), dtype=torch.int64, device=x.device)
    packed.index_add_(0, word, (code << (2 * (p % CODES_PER_WORD)))[keep])   # integer sums: order-free
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    return {"bitmaps": bitmaps, "offsets": offsets.to(torch.int32), "packed": packed,
            "scale": scale.to(torch.float32), "zero": zero.to(torch.int32)}


def on_buffers(buffers: dict, kind: str, bits: int, shape, compute_dtype) -> torch.Tensor:
    """The dense cache a case's compressed buffers describe (``buffers``: bitmaps, offsets,
    packed, and for 2 bits scale and zero), in the compute dtype."""
    return decode_buffers(kind, bits, shape, **buffers).to(compute_dtype)


def approximation(approx: torch.Tensor, truth: torch.Tensor) -> dict:
    """Error figures of a lossy result against the lossless one (both reduced in float64)."""
    a, t = approx.double().flatten(), truth.double().flatten()
    err = (a - t).abs()
    return {"max_abs_err": float(err.max()), "mean_abs_err": float(err.mean()),
            "rel_err": float((a - t).norm() / t.norm().clamp_min(1e-300)),
            "cosine": float(torch.nn.functional.cosine_similarity(a, t, dim=0))}
