"""``torch.nn.attention.flex_attention`` as prefill, decode, varlen (document mask), paged
(length mask over a gathered cache) and block-sparse (a ``BlockMask`` built from ``sabi``).

Scale: passed as flex's ``scale`` (``None`` is flex's own 1/sqrt(D), the suite's too). LSE:
flex returns the natural-log logsumexp (it converts its base-2 statistics itself,
``_finalize_outputs``; checked against our reference on CPU in the tests), fp32. GQA through
``enable_gqa``. On CUDA the call is ``torch.compile``d, as flex's documentation requires for
speed (eager flex materializes the scores); on CPU it runs eagerly.
"""
from __future__ import annotations

import functools

import torch

from ._adapter import note, staged
from .library import Library
from ._layout import gather_dense, write
from ..interfaces import Unsupported

#: gpu_tested: the full profile on a lent H100 (torch 2.11), docs/hardware-log.md.
LIBRARY = Library("torch flex_attention", "torch.nn.attention.flex_attention", "torch",
                  written_against="2.11 (CUDA), 2.13 (CPU)", gpu_tested=True)

#: sabi's padding value (docs/contract.md, block_sparse).
SABI_PAD = 65535


def _module():
    return LIBRARY.load()


@functools.lru_cache(maxsize=None)
def _compiled():
    fa = _module()
    import torch._dynamo

    # Every case is a new shape and new mask closures: without room for recompiles dynamo falls
    # back to eager flex, which materializes the whole score matrix.
    cfg = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), 512))
    return torch.compile(fa.flex_attention, dynamic=False)


def _flex(q, k, v, *, block_mask=None, scale=None, want_lse: bool):
    """A zero-argument call of flex_attention returning (o, lse or None)."""
    fa = _module()
    fn = fa.flex_attention
    if q.device.type == "cuda":
        fn = _compiled()
        note("flex_attention: torch.compile'd (dynamo recompile limit raised to 512 for the case shapes)")
    kwargs = dict(block_mask=block_mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1])
    if want_lse:
        if hasattr(fa, "AuxRequest"):
            kwargs["return_aux"] = fa.AuxRequest(lse=True)
        else:
            kwargs["return_lse"] = True

    def launch():
        res = fn(q, k, v, **kwargs)
        if not want_lse:
            return res, None
        o, aux = res
        return o, getattr(aux, "lse", aux)
    return launch


def _mask(mask_mod, B, H, S_q, S_kv, device, block_size=None):
    fa = _module()
    kw = {} if block_size is None else {"BLOCK_SIZE": block_size}
    return fa.create_block_mask(mask_mod, B, H, S_q, S_kv, device=device, **kw)


def _finish(launch, out, lse, return_lse, post=None):
    def run():
        o, l = launch()
        if post is not None:
            o, l = post(o, l)
        return write(out, o), (write(lse, l, "lse") if return_lse else None)
    return run


def _prefill(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    mask = None
    if causal and q.shape[2] > 1:
        mask = _mask(lambda b, h, qi, ki: ki <= qi, None, None, q.shape[2], k.shape[2], q.device)
        note("causal: a BlockMask from mask_mod kv <= q")
    return _finish(_flex(q, k, v, block_mask=mask, scale=scale, want_lse=return_lse), out, lse, return_lse)


def _decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    return _prefill(q, k, v, causal=False, scale=scale, return_lse=return_lse, out=out, lse=lse)


def _varlen(q, k, v, seq, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    if q.dim() == 3:  # packed [T, H, D]: one batch row, a document mask
        cu = seq.long()
        lengths = cu[1:] - cu[:-1]
        doc = torch.repeat_interleave(torch.arange(len(lengths), device=q.device), lengths)

        def mask_mod(b, h, qi, ki):
            same = doc[qi] == doc[ki]
            return same & (ki <= qi) if causal else same
        T = q.shape[0]
        bm = _mask(mask_mod, None, None, T, T, q.device)
        note("packed varlen: [T, H, D] viewed as [1, H, T, D] (no copy), a document mask from cu_seqlens")
        launch = _flex(*(x.transpose(0, 1).unsqueeze(0) for x in (q, k, v)), block_mask=bm, scale=scale,
                       want_lse=return_lse)
        post = lambda o, l: (o[0].transpose(0, 1), None if l is None else l[0].transpose(0, 1))
        return _finish(launch, out, lse, return_lse, post)
    lengths = seq.to(q.device).long()
    B, _, S, _ = q.shape

    def mask_mod(b, h, qi, ki):
        inside = ki < lengths[b]
        return inside & (ki <= qi) if causal else inside
    bm = _mask(mask_mod, B, None, S, S, q.device)
    note("padded varlen: a mask of keys past each length; rows past a length set to zero (LSE -inf) by the adapter")
    rows = torch.arange(S, device=q.device)[None, None, :] >= lengths[:, None, None]  # [B, 1, S]

    def post(o, l):
        o = o.masked_fill(rows[..., None], 0)
        return o, None if l is None else l.masked_fill(rows, float("-inf"))
    return _finish(_flex(q, k, v, block_mask=bm, scale=scale, want_lse=return_lse), out, lse, return_lse, post)


def _paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND", scale=None,
           return_lse=False, out=None, lse=None):
    k, v, lengths = gather_dense(kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout)
    L = torch.tensor(lengths, device=q.device)
    B = q.shape[0]
    bm = _mask(lambda b, h, qi, ki: ki < L[b], B, None, 1, k.shape[2], q.device)
    note("paged: a mask of keys past each sequence's length over the gathered cache")
    empty = (L == 0)[:, None]  # a sequence without pages: every key masked

    def post(o, l):
        o = o[:, :, 0].masked_fill(empty[..., None], 0)
        return o, None if l is None else l[:, :, 0].masked_fill(empty, float("-inf"))
    launch = _flex(q[:, :, None], k, v, block_mask=bm, scale=scale, want_lse=return_lse)
    return _finish(launch, out, lse, return_lse, post)


def block_mask_from_sabi(fa, sabi: torch.Tensor, block_shape, S: int):
    """The BlockMask of a ``sabi`` layout: its listed blocks as flex's partial blocks, and a
    mask_mod that reads the same layout (so eager flex, which applies only the mask_mod, and
    compiled flex, which skips unlisted blocks, compute the same thing)."""
    bq, bkv = block_shape
    listed = sabi != SABI_PAD
    kv_num_blocks = listed.sum(-1).to(torch.int32)
    kv_indices = torch.where(listed, sabi, 0).to(torch.int32)
    B, H, nq, nk = sabi.shape
    dense = torch.zeros(B, H, nq, nk + 1, dtype=torch.bool, device=sabi.device)
    dense.scatter_(-1, torch.where(listed, sabi, nk).long(), True)
    dense = dense[..., :nk]

    def mask_mod(b, h, qi, ki):
        return dense[b, h, qi // bq, ki // bkv]
    return fa.BlockMask.from_kv_blocks(kv_num_blocks, kv_indices, BLOCK_SIZE=(bq, bkv), mask_mod=mask_mod,
                                       seq_lengths=(S, S))


def _block_sparse(q, k, v, sabi, *, block_shape, scale=None, return_lse=False, out=None, lse=None):
    fa = _module()
    bm = block_mask_from_sabi(fa, sabi, tuple(block_shape), q.shape[2])
    note("sabi: a BlockMask (kv_num_blocks, kv_indices; BLOCK_SIZE = block_shape) and a mask_mod reading the same layout")
    run = _finish(_flex(q, k, v, block_mask=bm, scale=scale, want_lse=return_lse), out, lse, return_lse)

    def launch():
        o, l = run()
        return o, (l if return_lse else torch.empty(0, dtype=torch.float32, device=q.device))
    return launch


IMPLS = {
    "prefill": {"flex": staged(LIBRARY, _prefill)},
    "decode": {"flex": staged(LIBRARY, _decode)},
    "prefill_varlen": {"flex": staged(LIBRARY, _varlen)},
    "paged_decode": {"flex": staged(LIBRARY, _paged)},
    "block_sparse": {"flex": staged(LIBRARY, _block_sparse)},
}
