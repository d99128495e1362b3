"""FlashInfer's single and batch decode/prefill APIs as decode, prefill, varlen and paged decode.

Written against FlashInfer 0.6 (docs and ``flashinfer/decode.py``, ``prefill.py`` at commit
fb28d72, version 0.6.18; the wheel was never installed here). **Not yet run on a GPU**: the
mapping is tested on CPU against stand-ins that follow the documented semantics.

- The suite's paged cache *is* FlashInfer's: ``[pages, 2, Hkv, P, D]`` (``kv_layout="HND"``) or
  ``[pages, 2, P, Hkv, D]`` (``"NHD"``), the same CSR page table (indptr, indices,
  last_page_len): passed as they are to ``BatchDecodeWithPagedKVCacheWrapper`` (``plan`` in
  ``prepare``, ``run`` timed), with ``out=`` the caller's buffer.
- FlashInfer's LSE is base 2 (docs/contract.md): the adapter multiplies by ln 2 into the caller's fp32
  buffer (noted), never passes base-2 values on.
- decode: ``single_decode_with_kv_cache(q [Hq, D], k [Hkv, S, D], kv_layout="HND")`` per batch
  row (views, no copy); prefill: ``single_prefill_with_kv_cache(q [S, Hq, D], k [Hkv, S, D],
  kv_layout="HND", causal)`` per batch row; prefill_varlen: ``BatchPrefillWithRaggedKVCacheWrapper``
  over packed q/k/v (NHD) with ``qo_indptr = kv_indptr = cu_seqlens`` (padded inputs are packed
  first: a copy, noted).
- ``sm_scale`` is always passed (1/sqrt(D) when the case gives None); fp16/bf16, head dims 64,
  128, 256 (FlashInfer's compiled set).
"""
from __future__ import annotations

import functools

import torch

from ._adapter import LN2, default_scale, note, staged
from .library import Library
from ._layout import check_dtype, documented, padded_to_packed, unpack_padded, write
from ..interfaces import Unsupported

LIBRARY = Library("FlashInfer", "flashinfer", "flashinfer-python",
                  written_against="0.6.18 (docs at fb28d72; not yet run on a GPU)")
HEAD_DIMS = (64, 128, 256)
WORKSPACE_BYTES = 128 * 1024 * 1024


def _check(q):
    check_dtype("FlashInfer", q)
    if q.shape[-1] not in HEAD_DIMS:
        raise Unsupported(f"FlashInfer: head dim {q.shape[-1]} (compiled for {HEAD_DIMS})")


@functools.lru_cache(maxsize=None)
def _workspace(device: str):
    return torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)


def natural_lse(lse2: torch.Tensor, dst):
    """FlashInfer's base-2 LSE as the suite's natural log, into ``dst`` when given."""
    note("lse: FlashInfer's base-2 LSE multiplied by ln 2 (the suite's natural log)")
    value = lse2.float() * LN2
    if dst is None:
        return value
    return dst.copy_(documented("FlashInfer", "lse", value, tuple(dst.shape)))


def paged_decode_call(fi, q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout, scale,
                      return_lse, out, lse):
    _check(q)
    B, Hq, D = q.shape
    if layout == "HND":
        Hkv, P = kv_cache.shape[2], kv_cache.shape[3]
    else:
        P, Hkv = kv_cache.shape[2], kv_cache.shape[3]
    wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(_workspace(str(q.device)), kv_layout=layout)
    wrapper.plan(kv_page_indptr, kv_page_indices, kv_last_page_len, Hq, Hkv, D, P,
                 q_data_type=q.dtype, kv_data_type=kv_cache.dtype, sm_scale=default_scale(scale, D))
    note(f"kv_cache and page table passed as they are (FlashInfer's own {layout} layout and CSR table)")
    o = out if out is not None else torch.empty_like(q)

    def launch():
        if not return_lse:
            return write(out, wrapper.run(q, kv_cache, out=o)), None
        res, lse2 = wrapper.run(q, kv_cache, out=o, return_lse=True)
        return write(out, res), natural_lse(documented("FlashInfer batch decode", "lse", lse2, (B, Hq)), lse)
    return launch


def single_call(fi, q, k, v, *, causal, scale, return_lse, out, lse, decode: bool):
    """One single_decode / single_prefill call per batch row, on views."""
    _check(q)
    B, Hq, S, D = q.shape
    note(f"one single_{'decode' if decode else 'prefill'}_with_kv_cache call per batch row (views, kv_layout='HND')")
    kw = dict(kv_layout="HND", sm_scale=default_scale(scale, D), return_lse=return_lse)
    o_all = out if out is not None else torch.empty_like(q)

    def launch():
        l_rows = []
        for b in range(B):
            if decode:
                res = fi.single_decode_with_kv_cache(q[b, :, 0], k[b], v[b], **kw)
            else:
                res = fi.single_prefill_with_kv_cache(q[b].transpose(0, 1), k[b], v[b], causal=causal, **kw)
            o, l2 = res if return_lse else (res, None)
            o_all[b] = o[:, None] if decode else o.transpose(0, 1)
            if return_lse:
                l_rows.append(documented("FlashInfer single decode", "lse", l2, (Hq,))[:, None] if decode
                              else documented("FlashInfer single prefill", "lse", l2, (S, Hq)).transpose(0, 1))
        l = natural_lse(torch.stack(l_rows), lse) if return_lse else None
        return o_all, l
    return launch


def ragged_prefill_call(fi, q, k, v, cu_seqlens, *, causal, scale, return_lse, out, lse):
    _check(q)
    T, Hq, D = q.shape
    wrapper = fi.BatchPrefillWithRaggedKVCacheWrapper(_workspace(str(q.device)), kv_layout="NHD")
    cu = cu_seqlens.to(torch.int32)
    wrapper.plan(cu, cu, Hq, k.shape[1], D, causal=causal, sm_scale=default_scale(scale, D), q_data_type=q.dtype)
    o = out if out is not None else torch.empty_like(q)

    def launch():
        if not return_lse:
            return write(out, wrapper.run(q, k, v, out=o)), None
        res, lse2 = wrapper.run(q, k, v, out=o, return_lse=True)
        return write(out, res), natural_lse(documented("FlashInfer ragged prefill", "lse", lse2, (T, Hq)), lse)
    return launch


def _fi():
    return LIBRARY.load()


def _decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    return single_call(_fi(), q, k, v, causal=False, scale=scale, return_lse=return_lse, out=out, lse=lse,
                       decode=True)


def _prefill(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    return single_call(_fi(), q, k, v, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                       decode=False)


def _paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND", scale=None,
           return_lse=False, out=None, lse=None):
    return paged_decode_call(_fi(), q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                             scale=scale, return_lse=return_lse, out=out, lse=lse)


def _varlen(q, k, v, seq, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    fi = _fi()
    if q.dim() == 3:
        return ragged_prefill_call(fi, q, k, v, seq, causal=causal, scale=scale, return_lse=return_lse,
                                   out=out, lse=lse)
    lengths = [int(n) for n in seq.tolist()]
    qp, kp, vp, cu = padded_to_packed(q, k, v, lengths)
    run = ragged_prefill_call(fi, qp, kp, vp, cu, causal=causal, scale=scale, return_lse=return_lse, out=None, lse=None)
    return lambda: unpack_padded(*run(), lengths, q, out, lse)


IMPLS = {
    "prefill": {"flashinfer": staged(LIBRARY, _prefill)},
    "decode": {"flashinfer": staged(LIBRARY, _decode)},
    "prefill_varlen": {"flashinfer": staged(LIBRARY, _varlen)},
    "paged_decode": {"flashinfer": staged(LIBRARY, _paged)},
}
