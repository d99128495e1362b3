"""FlashInfer's single and batch decode/prefill APIs as decode, prefill, varlen and paged decode,
and its MLA wrapper as MLA paged decode and prefill.

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
- mla_paged_decode, mla_paged_prefill: ``flashinfer.mla.BatchMLAPagedAttentionWrapper`` (its
  docstrings in ``flashinfer/mla.py`` of the 0.6 line; that snapshot's ``run`` also takes
  ``return_lse_base_on_e``, not passed, so that earlier 0.6 releases take the call): ``plan(qo_indptr, kv_indptr, kv_indices,
  kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale, q_data_type,
  kv_data_type)`` in ``prepare``, ``run(q_nope, q_pe, ckv_cache, kpe_cache, out=, return_lse=)``
  timed. Its caches are the suite's (``[pages, P, Dc]`` / ``[pages, P, Dr]``, read through their
  page and token strides, last axis unit-stride) and its page table the suite's CSR one
  (``kv_indptr`` / ``kv_indices``) with ``kv_len_arr`` the sequence lengths (from the last-page
  lengths, on the host); decode is ``qo_indptr = arange(B + 1)``, prefill passes the case's
  ``qo_indptr``, FlashInfer's causal mask being bottom-right aligned as the suite's. The LSE is
  base 2 (converted, as above). Widths: DeepSeek's 512 / 64, the ones FlashInfer documents and
  tests for this wrapper; fp8 caches are ``Unsupported`` (``run`` takes no k_scale / v_scale and
  documents 16-bit caches; FlashInfer's fp8 MLA entry point, ``trtllm_batch_decode_with_kv_cache_mla``,
  is Blackwell-only and takes one fused cache).
"""
from __future__ import annotations

import functools

import torch

from ._adapter import LN2, default_scale, note, staged
from .library import Library
from ._layout import check_dtype, dense_copy, documented, padded_to_packed, sequence_lengths, unpack_padded, write
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


#: (head_dim_ckv, head_dim_kpe) the MLA wrapper is documented and tested for (DeepSeek-V2/V3).
MLA_WIDTHS = ((512, 64),)


def _unit_last(name: str, t: torch.Tensor) -> torch.Tensor:
    """``t`` as it is when its last axis is unit-stride (FlashInfer reads the other strides), else a copy."""
    if t.stride(-1) == 1:
        return t
    note(f"{name}: copied to unit stride on its last axis (FlashInfer reads the other strides only)")
    return dense_copy(t)


def mla_call(mla, q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
             *, causal, scale, return_lse, out, lse, k_scale, v_scale):
    """Plan of ``BatchMLAPagedAttentionWrapper`` over the suite's caches and CSR table; the
    launch runs it into the caller's buffers."""
    check_dtype("FlashInfer MLA", q_nope)
    if ckv_cache.dtype != q_nope.dtype or kpe_cache.dtype != q_nope.dtype:
        raise Unsupported(f"FlashInfer MLA: a {str(ckv_cache.dtype).replace('torch.', '')} cache under "
                          f"{str(q_nope.dtype).replace('torch.', '')} queries (BatchMLAPagedAttentionWrapper.run "
                          "takes no k_scale / v_scale: fp8 caches are not documented for it)")
    if float(k_scale) != 1.0 or float(v_scale) != 1.0:
        raise Unsupported("FlashInfer MLA: k_scale / v_scale other than 1 (run takes no cache scales)")
    T, H, Dc = q_nope.shape
    Dr, P = q_pe.shape[-1], ckv_cache.shape[1]
    if (Dc, Dr) not in MLA_WIDTHS:
        raise Unsupported(f"FlashInfer MLA: head_dim_ckv {Dc}, head_dim_kpe {Dr} (documented for {MLA_WIDTHS})")
    kv_len = torch.tensor(sequence_lengths(kv_page_indptr, kv_last_page_len, P), dtype=torch.int32,
                          device=q_nope.device)
    note("kv_len_arr: the sequence lengths from kv_last_page_len (host); kv_indptr / kv_indices: the case's CSR "
         "page table as it is")
    wrapper = mla.BatchMLAPagedAttentionWrapper(_workspace(str(q_nope.device)))
    wrapper.plan(qo_indptr.to(torch.int32), kv_page_indptr, kv_page_indices, kv_len, H, Dc, Dr, P, causal,
                 default_scale(scale, Dc + Dr), q_nope.dtype, ckv_cache.dtype)
    qn, qp = _unit_last("q_nope", q_nope), _unit_last("q_pe", q_pe)
    ckv, kpe = _unit_last("ckv_cache", ckv_cache), _unit_last("kpe_cache", kpe_cache)
    o = out if out is not None and out.stride(-1) == 1 else torch.empty_like(q_nope)

    def launch():
        if not return_lse:
            return write(out, wrapper.run(qn, qp, ckv, kpe, out=o)), None
        res, lse2 = wrapper.run(qn, qp, ckv, kpe, out=o, return_lse=True)
        return write(out, res), natural_lse(documented("FlashInfer MLA", "lse", lse2, (T, H)), lse)
    return launch


def _mla():
    """``flashinfer.mla`` (a release without it: ``Unsupported`` naming it)."""
    mla = getattr(_fi(), "mla", None)
    return mla if mla is not None else LIBRARY.attribute("mla")


def _mla_decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, scale=None,
                return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
    mla = _mla()
    qo_indptr = torch.arange(q_nope.shape[0] + 1, dtype=torch.int32, device=q_nope.device)
    note("qo_indptr: arange(B + 1) (one query per sequence)")
    return mla_call(mla, q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                    kv_last_page_len, causal=False, scale=scale, return_lse=return_lse, out=out, lse=lse,
                    k_scale=k_scale, v_scale=v_scale)


def _mla_prefill(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *,
                 causal=True, scale=None, return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
    return mla_call(_mla(), q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                    kv_last_page_len, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                    k_scale=k_scale, v_scale=v_scale)


IMPLS = {
    "prefill": {"flashinfer": staged(LIBRARY, _prefill)},
    "decode": {"flashinfer": staged(LIBRARY, _decode)},
    "prefill_varlen": {"flashinfer": staged(LIBRARY, _varlen)},
    "paged_decode": {"flashinfer": staged(LIBRARY, _paged)},
    "mla_paged_decode": {"flashinfer": staged(LIBRARY, _mla_decode)},
    "mla_paged_prefill": {"flashinfer": staged(LIBRARY, _mla_prefill)},
}
