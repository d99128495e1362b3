"""Planted-bug implementations of block_sparse (docs/contract.md section 8); the suite must fail each.

Each mutant has the signature of ``kernels.block_sparse.block_sparse`` and introduces one bug.
Those expressible as a change of the inputs or outputs wrap the project's kernel; the others
are a vectorized torch re-implementation (``_block_sparse``, float64, a dense [S, S] mask built
from ``sabi``). Nothing here calls references/.
"""
from __future__ import annotations

import math

import torch

from attnsuite.sparsity import PAD, mask_to_index

from ._common import (CLASS_BUGS, SOFTMAX_BUGS, documented, ignoring_out, online_attention,
                      reading_views_as_contiguous)

FAMILY = "block_sparse"
LOG2E = 1.4426950408889634


def _listed(sabi: torch.Tensor) -> torch.Tensor:
    """bool [B, H, n_rows, n_cols]: the blocks each row lists (PAD entries dropped)."""
    n_cols = sabi.shape[-1]
    listed = torch.zeros((*sabi.shape[:-1], n_cols + 1), dtype=torch.bool, device=sabi.device)
    listed.scatter_(-1, sabi.long().clamp(max=n_cols), True)
    return listed[..., :n_cols]


def _kernel(q, k, v, sabi, block_shape, scale, return_lse, out, lse):
    from kernels.block_sparse import block_sparse

    return block_sparse(q, k, v, sabi, block_shape=block_shape, scale=scale, return_lse=return_lse,
                        out=out, lse=lse)


def _block_sparse(q, k, v, sabi, *, block_shape, scale, return_lse, out, lse, row_block_size=None):
    """Torch re-implementation; ``row_block_size`` is the divisor that maps a query token to its
    block-row (BQ when correct), the result clamped to the last row."""
    B, H, S, D = q.shape
    bq, bkv = block_shape
    n_rows = sabi.shape[2]
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    tok = torch.arange(S, device=q.device)
    brow = (tok // (row_block_size or bq)).clamp(max=n_rows - 1)
    bcol = tok // bkv
    mask = _listed(sabi)[:, :, brow][:, :, :, bcol]                       # [B, H, S, S]
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    lse_val = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isneginf(lse_val), 0.0, lse_val)[..., None])
    o = p @ v.double()
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    out.copy_(o.to(out.dtype))
    if not return_lse:
        return out, torch.empty(0, dtype=torch.float32, device=q.device)
    if lse is None:
        lse = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    lse.copy_(lse_val.to(torch.float32))
    return out, lse


# --- the mutants --------------------------------------------------------------------------------

def block_sparse_drops_partial_last_block(q, k, v, sabi, *, block_shape, scale=None, return_lse=False,
                                          out=None, lse=None):
    """Skips the partial last KV block (S % BKV != 0) in rows that list another block (whole-block loop)."""
    S, n_cols = q.shape[2], sabi.shape[-1]
    if S % block_shape[1]:
        counts = (sabi != PAD).sum(-1, keepdim=True)
        drop = (sabi == n_cols - 1) & (counts > 1)
        sabi = torch.where(drop, torch.full_like(sabi, PAD), sabi)
    return _kernel(q, k, v, sabi, block_shape, scale, return_lse, out, lse)


def block_sparse_pad_as_block(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """Reads the padding 65535 as a block clamped to the last one: padded rows also attend the last KV block."""
    n_cols = sabi.shape[-1]
    listed = _listed(sabi)
    listed[..., -1] |= (sabi != PAD).sum(-1) < n_cols
    return _kernel(q, k, v, mask_to_index(listed), block_shape, scale, return_lse, out, lse)


def block_sparse_row_from_bkv(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """Block-row of a query token computed as token // BKV instead of token // BQ."""
    return _block_sparse(q, k, v, sabi, block_shape=block_shape, scale=scale, return_lse=return_lse,
                         out=out, lse=lse, row_block_size=block_shape[1])


def block_sparse_lse_base2(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """Returns the LSE in base 2 (the kernel's exp2 domain), not natural log."""
    o, l = _kernel(q, k, v, sabi, block_shape, scale, return_lse, out, lse)
    if return_lse:
        l.mul_(LOG2E)
    return o, l


def block_sparse_batch0_index(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """Ignores the batch stride of sabi: every batch uses batch 0's block index."""
    shared = sabi[:1].expand_as(sabi).contiguous()
    return _kernel(q, k, v, shared, block_shape, scale, return_lse, out, lse)


def block_sparse_plus_diagonal(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """Always attends the diagonal block (the column holding the row's first query) besides the listed ones."""
    bq, bkv = block_shape
    n_rows, n_cols = sabi.shape[2], sabi.shape[3]
    listed = _listed(sabi)
    diag = ((torch.arange(n_rows, device=sabi.device) * bq) // bkv).clamp(max=n_cols - 1)
    listed[..., torch.arange(n_rows, device=sabi.device), diag] = True
    return _kernel(q, k, v, mask_to_index(listed), block_shape, scale, return_lse, out, lse)


def block_sparse_grid_floor(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """Launch grid S // BQ (floor) instead of cdiv: the partial last query block-row is never written."""
    B, H, S, D = q.shape
    o_full, l_full = _kernel(q, k, v, sabi, block_shape, scale, return_lse, None, None)
    written = (S // block_shape[0]) * block_shape[0]
    if out is None:
        out = torch.full_like(o_full, float("nan"))
    out[:, :, :written] = o_full[:, :, :written]
    if not return_lse:
        return out, l_full
    if lse is None:
        lse = torch.full_like(l_full, float("nan"))
    lse[:, :, :written] = l_full[:, :, :written]
    return out, lse


def token_mask(sabi, S, block_shape):
    """bool [B, H, S, S]: query i sees key j iff j's KV block is listed in i's block-row."""
    bq, bkv = block_shape
    tok = torch.arange(S, device=sabi.device)
    return _listed(sabi)[:, :, tok // bq][:, :, :, tok // bkv]


def _write_outputs(q, o, l, return_lse, out, lse):
    """The kernel's hand-over: out (and lse), or an empty fp32 tensor when no LSE is asked."""
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    out.copy_(o.to(out.dtype))
    if not return_lse:
        return out, torch.empty(0, dtype=torch.float32, device=q.device)
    if lse is None:
        lse = torch.empty(l.shape, dtype=torch.float32, device=q.device)
    lse.copy_(l)
    return out, lse


def _online(q, k, v, sabi, *, block_shape, scale, return_lse, out, lse, **bug):
    """Tiled online softmax in torch over 64-key tiles under the block mask, ``bug`` switched in."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    o, l = online_attention(q, k, v, scale, token_mask(sabi, q.shape[2], block_shape), **bug)
    return _write_outputs(q, o, l, return_lse, out, lse)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
        return _online(q, k, v, sabi, block_shape=block_shape, scale=scale, return_lse=return_lse, out=out,
                       lse=lse, **bug)

    mutant.__name__ = f"block_sparse_{name}"
    mutant.__doc__ = doc
    return mutant


def block_sparse_rows_use_row0_count(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None,
                                     lse=None):
    """Reads how many blocks a row lists once, from row 0, and uses it for every row: a row listing
    more blocks than row 0 loses its last ones (fine while every row keeps the same count)."""
    count0 = (sabi[:, :, :1] != PAD).sum(-1, keepdim=True)
    slot = torch.arange(sabi.shape[-1], device=sabi.device)
    truncated = torch.where(slot < count0, sabi, torch.full_like(sabi, PAD))
    return _kernel(q, k, v, truncated, block_shape, scale, return_lse, out, lse)


def _kernel_kw(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    return _kernel(q, k, v, sabi, block_shape, scale, return_lse, out, lse)


block_sparse_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_kernel_kw, "q", "k", "v", "sabi"), "block_sparse_reads_views_as_contiguous",
    "Ignores the strides of q/k/v and sabi: windows of a longer cache, fused-projection slices and index "
    "rows of a wider buffer are read as if contiguous.")
block_sparse_ignores_out = documented(
    ignoring_out(_kernel_kw), "block_sparse_ignores_out",
    "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    _softmax_bug("fp16_accumulator"), _softmax_bug("stale_running_max"), _softmax_bug("exp_without_max_fp32"),
    block_sparse_rows_use_row0_count, block_sparse_reads_views_as_contiguous, block_sparse_ignores_out,
    block_sparse_drops_partial_last_block, block_sparse_pad_as_block, block_sparse_row_from_bkv,
    block_sparse_lse_base2, block_sparse_batch0_index, block_sparse_plus_diagonal,
    block_sparse_grid_floor,
    *(_softmax_bug(b) for b in CLASS_BUGS))}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def block_sparse_sdpa_fp32(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """torch's scaled_dot_product_attention in fp32 under the token mask the block index lists (the LSE
    from a masked logsumexp)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    mask = token_mask(sabi, q.shape[2], block_shape)
    qf, kf, vf = q.float(), k.float(), v.float()
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, attn_mask=mask, scale=scale)
    l = torch.logsumexp(((qf @ kf.transpose(-1, -2)) * scale).masked_fill(~mask, float("-inf")), -1)
    return _write_outputs(q, o, l, return_lse, out, lse)


def block_sparse_fp64(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """Dense attention in float64 under the block mask, the row max subtracted by hand."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    mask = token_mask(sabi, q.shape[2], block_shape)
    s = ((q.double() @ k.double().transpose(-1, -2)) * scale).masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    return _write_outputs(q, (e / total) @ v.double(), (m + torch.log(total))[..., 0].float(), return_lse,
                          out, lse)


def block_sparse_online_fp32(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    """The mutants' tiled online softmax under the block mask, no bug switched in."""
    return _online(q, k, v, sabi, block_shape=block_shape, scale=scale, return_lse=return_lse, out=out, lse=lse)


CONTROLS = {f.__name__: f for f in (block_sparse_sdpa_fp32, block_sparse_fp64, block_sparse_online_fp32)}
