"""Planted-bug implementations for the suite's self-checks. Each wraps the project's real
kernel and introduces exactly one mistake of a kind that happens in practice."""
from __future__ import annotations

import dataclasses
import math
import os
import time

import torch

from kernels.decode import decode
from kernels.prefill import prefill


def prefill_wrong_scale(q, k, v, *, causal, scale=None, **kw):
    """Uses 1/D instead of 1/sqrt(D): invisible only when every row has a single key and no LSE."""
    return prefill(q, k, v, causal=causal, scale=1.0 / q.shape[-1], **kw)


def decode_wrong_kv_head(q, k, v, **kw):
    """Query head h reads KV head h % Hkv instead of h // G: invisible when G == 1 or Hkv == 1."""
    group = q.shape[1] // k.shape[1]
    return decode(q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1), **kw)


def decode_hangs(q, k, v, **kw):
    time.sleep(3600)


def decode_crashes(q, k, v, **kw):
    os._exit(3)  # what a segfaulting launch looks like to the harness


def decode_writes_past_end(q, k, v, *, out=None, **kw):
    o, lse = decode(q, k, v, out=out, **kw)
    flat = out.view(-1)
    # One element past the end of the output, inside the harness's guard region.
    flat.as_strided((1,), (1,), flat.storage_offset() + flat.numel()).fill_(0.0)
    return o, lse


def decode_modifies_k(q, k, v, **kw):
    k.mul_(1.0)
    k[..., 0, 0] = math.pi
    return decode(q, k, v, **kw)


def paged_decode_ignores_last_page_len(q, kv_cache, indptr, indices, last, **kw):
    """Treats every last page as full: reads the stale tail of the last page."""
    from kernels.paged_decode import paged_decode

    page_size = kv_cache.shape[3] if kw.get("layout", "HND") == "HND" else kv_cache.shape[2]
    full = torch.where(last > 0, torch.full_like(last, page_size), last)
    return paged_decode(q, kv_cache, indptr, indices, full, **kw)


def sparse_decode_drops_last_token(q, k, v, sparse_ind, sparse_nnz, **kw):
    """Off by one at the end of each index row."""
    from kernels.sparse_decode import sparse_decode

    return sparse_decode(q, k, v, sparse_ind, (sparse_nnz - 1).clamp(min=0), **kw)


def sparse_paged_decode_wrong_kv_head(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, **kw):
    """Query head h reads KV head h % Hkv (the cache's heads tiled) instead of h // G."""
    from kernels.sparse_paged_decode import sparse_paged_decode

    axis = 2 if kw.get("layout", "HND") == "HND" else 3
    reps = [1] * kv_cache.dim()
    reps[axis] = q.shape[1] // kv_cache.shape[axis]
    tiled = kv_cache.repeat(*reps)
    return sparse_paged_decode(q, tiled, indptr, indices, sparse_ind, sparse_nnz, **kw)


def magicpig_decode_swaps_k_and_l(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, K, L, **kw):
    """The LSH parameters passed in the wrong order."""
    from kernels.magicpig_decode import magicpig_decode

    return magicpig_decode(q, kv_cache, indptr, indices, sparse_ind, sparse_nnz, L, K, **kw)


def prefill_varlen_leaks_across_sequences(q, k, v, seq, **kw):
    """Ignores sequence boundaries: padded treats every sequence as full length, packed treats
    the whole batch as one sequence."""
    from cases.prefill_varlen import prefill_varlen

    if q.dim() == 4:
        return prefill_varlen(q, k, v, torch.full_like(seq, q.shape[2]), **kw)
    return prefill_varlen(q, k, v, torch.stack([seq[0], seq[-1]]), **kw)



def _listed_counts(sabi):
    from attnsuite.sparsity import PAD

    return (sabi != PAD).sum(-1, keepdim=True)


def block_sparse_drops_partial_last_block(q, k, v, sabi, *, block_shape, **kw):
    """Skips the partial last KV block (S not a multiple of BKV) in rows that list another block,
    as a kernel that loops over whole blocks only would."""
    from attnsuite.sparsity import PAD
    from kernels.block_sparse import block_sparse

    S, n_cols = q.shape[2], sabi.shape[-1]
    if S % block_shape[1]:
        drop = (sabi == n_cols - 1) & (_listed_counts(sabi) > 1)
        sabi = torch.where(drop, torch.full_like(sabi, PAD), sabi)
    return block_sparse(q, k, v, sabi, block_shape=block_shape, **kw)


def block_sparse_pad_as_block(q, k, v, sabi, *, block_shape, **kw):
    """Reads the padding value 65535 as a block, clamped to the last one: rows with padding also
    attend the last KV block."""
    from attnsuite.sparsity import PAD, mask_to_index
    from kernels.block_sparse import block_sparse

    n_cols = sabi.shape[-1]
    listed = torch.zeros((*sabi.shape[:-1], n_cols + 1), dtype=torch.bool, device=sabi.device)
    listed.scatter_(-1, sabi.long().clamp(max=n_cols), True)
    listed = listed[..., :n_cols]
    listed[..., -1] |= _listed_counts(sabi)[..., 0] < n_cols
    return block_sparse(q, k, v, mask_to_index(listed), block_shape=block_shape, **kw)


def _mustafar_with(transform):
    """The project's Mustafar ops, with ``transform`` applied to every compressed buffer set the
    compute kernels read (the compressor itself is untouched)."""
    from cases.mustafar import TRITON
    from kernels.mustafar_format import Compressed

    def wrap(fn):
        def run(*args, **kw):
            return fn(*(transform(a) if isinstance(a, Compressed) else a for a in args), **kw)
        return run

    return dataclasses.replace(TRITON, keys=wrap(TRITON.keys), values=wrap(TRITON.values),
                               decode=wrap(TRITON.decode))


def _reverse_bits(c):
    from kernels.mustafar_format import bitmaps_from_mask, mask_from_bitmaps

    return dataclasses.replace(c, bitmaps=bitmaps_from_mask(mask_from_bitmaps(c.bitmaps).flip(-1)))


def _negate_zero(c):
    return c if c.zero is None else dataclasses.replace(c, zero=-c.zero)


def _neighbour_scale(c):
    return c if c.scale is None else dataclasses.replace(c, scale=c.scale.roll(-1))


#: Reads the bitmap LSB first (element j <-> bit j): tiles decode mirrored.
mustafar_bit_order_reversed = _mustafar_with(_reverse_bits)
#: Dequantises as (code + zero) * scale.
mustafar_zero_point_sign = _mustafar_with(_negate_zero)
#: Tile i uses the scale of tile i + 1.
mustafar_neighbour_scale = _mustafar_with(_neighbour_scale)
