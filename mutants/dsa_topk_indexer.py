"""Planted-bug implementations of dsa_topk_indexer (kernels.md section 12); the suite must fail
each. Vectorized torch written from the spec (nothing here calls references/ or the project's
kernel). ``_indexer`` computes the logits in float64 (fp8 decoded by torch, the packed rows
unpacked by byte slicing) and takes their top-k; its switches are the bugs.

Among the controls, ``dsa_topk_indexer_breaks_ties_other_way`` is wrong only where the suite must
not blame it: it perturbs every logit by a few fp32 ulps of its size before the top-k, so exact
and near ties at the k-th logit go the other way. It must PASS (the set rule's tolerance).
"""
from __future__ import annotations

import torch

from ._common import documented

FAMILY = "dsa_topk_indexer"
FP8 = torch.float8_e4m3fn


def _cache(k_cache, k_scale, *, per_row=False):
    """(values float64 [pages, P, Di], scales float64 [pages, P]) of either layout. A packed page
    is P rows of 128 fp8 bytes, then P fp32 scales; ``per_row`` reads it as P rows of 132 bytes
    (128 values, then that row's scale) instead."""
    if k_cache.dtype in (torch.uint8, torch.int8):
        pages, P = k_cache.shape[:2]
        flat = k_cache.reshape(pages, P * 132).view(torch.uint8)
        if per_row:
            rows = flat.view(pages, P, 132)
            return (rows[..., :128].contiguous().view(FP8).double(),
                    rows[..., 128:].contiguous().view(torch.float32)[..., 0].double())
        values = flat[:, :P * 128].reshape(pages, P, 128).view(FP8).double()
        return values, flat[:, P * 128:].contiguous().view(torch.float32).double()
    return k_cache.view(FP8).double(), k_scale.double()


def _indexer(q_idx, k_cache, weights, seq_lens, block_table, topk, *, k_scale=None, out=None, logits=None,
             return_logits=False, check_indices=True, no_relu=False, swap_heads=False, no_kscale=False,
             len_shift=0, pad_repeat=False, lose_winner=False, tie_noise=0.0, ignore_table=False,
             per_row=False):
    values, scales = _cache(k_cache, k_scale, per_row=per_row)
    B = q_idx.shape[0]
    P = values.shape[1]
    N = block_table.shape[1] * P
    lens = (seq_lens.long() + len_shift).clamp(min=0, max=N)
    pos = torch.arange(N)
    valid = pos[None, :] < lens[:, None]
    page = block_table.long()[:, pos // P] if not ignore_table else (pos // P).expand(B, N)
    page = torch.where(valid, page, 0).clamp(0, values.shape[0] - 1)
    slot = (pos % P).expand(B, N)
    k = torch.where(valid[..., None], values[page, slot], 0.0)                   # [B, N, Di]
    ks = torch.where(valid, scales[page, slot], 0.0)
    if no_kscale:
        ks = torch.where(valid, 1.0, 0.0)
    w = weights.double().flip(1) if swap_heads else weights.double()
    dots = (q_idx.double() @ k.transpose(1, 2)) * ks[:, None, :]                # [B, Hi, N]
    act = dots if no_relu else torch.relu(dots)
    lg = (w[..., None] * act).sum(1).masked_fill(~valid, float("-inf"))
    pick = lg
    if tie_noise:
        # A few fp32 ulps of each logit's size, of a random sign: only near ties change order.
        noise = (torch.rand(lg.shape, generator=torch.Generator().manual_seed(7)) - 0.5) * tie_noise
        pick = torch.where(valid, lg + noise * lg.abs(), lg)
    k_eff = min(topk, N)
    idx = torch.topk(pick, min(k_eff + 1, N), dim=1).indices if N else torch.zeros((B, 0), dtype=torch.long)
    if lose_winner:
        idx = idx[:, 1:]  # drops the top one and takes the (k+1)-th
    idx = idx[:, :k_eff]
    count = lens.clamp(max=topk)
    slots = torch.arange(idx.shape[1])
    keep = slots[None, :] < count[:, None]
    if pad_repeat and idx.shape[1]:
        idx = torch.where(keep, idx, idx[:, :1])
    else:
        idx = torch.where(keep, idx, -1)
    if out is None:
        out = torch.empty((B, topk), dtype=torch.int32)
    out.fill_(-1)
    out[:, :idx.shape[1]] = idx.to(torch.int32)
    if not return_logits:
        return out, None
    if logits is None:
        logits = torch.empty((B, N), dtype=torch.float32)
    logits.copy_(lg)
    return out, logits


def _mutant(name: str, doc: str, **bug):
    def run(q_idx, k_cache, weights, seq_lens, block_table, topk, *, k_scale=None, out=None, logits=None,
            return_logits=False):
        return _indexer(q_idx, k_cache, weights, seq_lens, block_table, topk, k_scale=k_scale, out=out,
                        logits=logits, return_logits=return_logits, **bug)

    return documented(run, f"dsa_topk_indexer_{name}", doc)


MUTANTS = {f.__name__: f for f in (
    _mutant("loses_clear_winner", "Drops the highest-scoring token and takes the (k+1)-th instead.",
            lose_winner=True),
    _mutant("no_relu", "Sums w_h * (q_h . k * scale) without the ReLU.", no_relu=True),
    _mutant("weights_swapped", "Head h weighted by weights[b, Hi - 1 - h] (the heads' weights reversed).",
            swap_heads=True),
    _mutant("ignores_k_scale", "Ignores the per-token key scale (dequantises keys with 1.0).", no_kscale=True),
    _mutant("seq_len_minus_one", "Off by one: scans positions < seq_len - 1.", len_shift=-1),
    _mutant("seq_len_plus_one", "Off by one: scans positions <= seq_len (one stale slot past the sequence).",
            len_shift=1),
    _mutant("pads_with_duplicates", "Pads a short row with its first position instead of -1 (duplicates).",
            pad_repeat=True),
    _mutant("ignores_block_table", "Logical page j read from physical page j.", ignore_table=True),
    _mutant("packed_per_row", "Reads the packed cache as rows of 132 bytes (128 values, then the row's scale) "
            "instead of each page's rows followed by the page's scales.", per_row=True),
)}


def dsa_topk_indexer_fp64(q_idx, k_cache, weights, seq_lens, block_table, topk, *, k_scale=None, out=None,
                          logits=None, return_logits=False):
    """Logits in float64 from the spec, torch.topk."""
    return _indexer(q_idx, k_cache, weights, seq_lens, block_table, topk, k_scale=k_scale, out=out, logits=logits,
                    return_logits=return_logits)


def dsa_topk_indexer_breaks_ties_other_way(q_idx, k_cache, weights, seq_lens, block_table, topk, *, k_scale=None,
                                           out=None, logits=None, return_logits=False):
    """Right up to ties: each logit moved by up to 4 fp32 ulps of its size before the top-k, so
    tied and near-tied tokens at the k-th place go either way (must pass: the set rule)."""
    return _indexer(q_idx, k_cache, weights, seq_lens, block_table, topk, k_scale=k_scale, out=out, logits=logits,
                    return_logits=return_logits, tie_noise=8 * 2.0**-24)


def dsa_topk_indexer_sorted_order(q_idx, k_cache, weights, seq_lens, block_table, topk, *, k_scale=None, out=None,
                                  logits=None, return_logits=False):
    """The right set, listed by ascending position instead of by logit (the order is unspecified)."""
    idx, lg = _indexer(q_idx, k_cache, weights, seq_lens, block_table, topk, k_scale=k_scale, out=None,
                       logits=logits, return_logits=return_logits)
    big = torch.iinfo(torch.int32).max
    srt = torch.sort(torch.where(idx >= 0, idx, big), dim=1).values
    srt = torch.where(srt == big, -1, srt)
    if out is None:
        return srt, lg
    out.copy_(srt)
    return out, lg


CONTROLS = {f.__name__: f for f in (dsa_topk_indexer_fp64, dsa_topk_indexer_breaks_ties_other_way,
                                    dsa_topk_indexer_sorted_order)}
