"""vLLM's Triton attention ops as decode, paged decode, (causal) prefill and MLA decode implementations.

Written against vLLM 0.33's sources (``vllm/v1/attention/ops/triton_decode_attention.py`` and
``triton_unified_attention.py``; read with the suite's source fetch, the wheel was never
installed here). **Not yet run on a GPU**: the mapping is tested on CPU against stand-ins that
follow the documented semantics (tests/test_ecosystem_adapters.py).

- decode, paged_decode: ``decode_attention_fwd(q [B, Hq, D], k_buffer, v_buffer, o [B, Hq, D],
  lse [B, Hq] fp32, req_to_token [B, pages], b_seq_len [B], attn_logits [B, Hq, splits, D + 1],
  num_kv_splits, sm_scale, page_size)``. Its kernel addresses token ``t`` of page ``p`` at
  ``(p * page_size + t) * k_buffer.stride(-3)``: the pool must be page-contiguous
  ``[pages, page_size, Hkv, D]``, which the suite's interleaved K/V cache is not, so K and V are
  copied out (noted). Its LSE is ``e_max + log(e_sum)``, natural log, written straight into the
  caller's buffer, as is ``o``. A sequence of length 0 divides by a zero sum in its reduction
  (vLLM never schedules one): ``Unsupported``.
- prefill, prefill_varlen: ``unified_attention(q [T, Hq, D], k/v cache [blocks, 16, Hkv, D],
  out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal=True, ...)``;
  causal only (it asserts so) and no LSE: other cases are ``Unsupported``. K/V are copied into a
  16-token paged cache (noted).
- mla_paged_decode: ``decode_attention_fwd`` as vLLM's Triton MLA backend
  (``v1/attention/backends/mla/triton_mla.py``, ``forward_mqa``) calls it: ``q = cat(q_nope,
  q_pe)`` [B, H, Dc + Dr], ``k_buffer`` the fused latent cache as one KV head [pages, P, 1,
  Dc + Dr], ``v_buffer = k_buffer[..., :Dc]``, ``o`` [B, H, Dc], ``num_kv_splits`` 4, the block
  table and sequence lengths from the suite's CSR table. The kernel reads the rope half of a
  key from the same row as its latent half and addresses token t of page p at ``(p * P + t) *
  stride(-3)``: a fused, page-contiguous pair of caches is passed as a view of its buffer, two
  separate ones are copied into one (noted); the query is concatenated (a copy, noted). Its LSE
  is natural log (as above). An fp8 cache goes with ``k_scale`` (an fp32 tensor), which the kernel
  applies to K and V alike: a case whose ``v_scale`` differs from ``k_scale`` is ``Unsupported``,
  as is an empty sequence (a zero sum, as above).
"""
from __future__ import annotations

import torch

from ._adapter import default_scale, note, staged
from .library import Library
from ._layout import block_table, check_dtype, dense_copy, padded_to_packed, paged_kv, sequence_lengths, unpack_padded, write
from ..interfaces import Unsupported

LIBRARY = Library("vLLM", "vllm", "vllm", written_against="0.33 (Triton ops; not yet run on a GPU)")

DECODE_OPS = ("v1.attention.ops.triton_decode_attention", "attention.ops.triton_decode_attention")
UNIFIED_OPS = ("v1.attention.ops.triton_unified_attention", "attention.ops.triton_unified_attention")
#: What vLLM's Triton backend passes as num_kv_splits.
NUM_KV_SPLITS = 8
#: The page size the prefill adapters copy K/V into (vLLM's default block size).
BLOCK = 16


def _op(modules, name):
    LIBRARY.load()  # not installed or broken: that is the reason, said once
    last = None
    for path in modules:
        try:
            return getattr(LIBRARY.attribute(path), name)
        except (Unsupported, AttributeError) as exc:
            last = exc
    raise Unsupported(f"vLLM: none of {', '.join(modules)} has {name} ({last})")


def decode_call(decode_attention_fwd, q, k_pool, v_pool, table, lengths, page_size, *, scale, out, lse,
                return_lse):
    """The launch of ``decode_attention_fwd`` over page-contiguous pools [pages, P, Hkv, D]."""
    B, Hq, D = q.shape
    if any(n == 0 for n in lengths):
        raise Unsupported("vLLM decode_attention_fwd: a sequence of length 0 (its reduction divides by a zero sum)")
    check_dtype("vLLM decode_attention_fwd", q, (torch.float16, torch.bfloat16, torch.float32))
    seq = torch.tensor(lengths, dtype=torch.int32, device=q.device)
    logits = torch.empty(B, Hq, NUM_KV_SPLITS, D + 1, dtype=torch.float32, device=q.device)
    o = out if out is not None else torch.empty_like(q)
    l = lse if return_lse and lse is not None else torch.empty(B, Hq, dtype=torch.float32, device=q.device)
    sm_scale = default_scale(scale, D)

    def launch():
        decode_attention_fwd(q, k_pool, v_pool, o, l, table, seq, logits, NUM_KV_SPLITS, sm_scale, page_size)
        return o, (l if return_lse else None)
    return launch


def paged_pools(kv_cache, layout):
    """Page-contiguous K and V pools [pages, P, Hkv, D] (a copy of the interleaved cache)."""
    k, v = paged_kv(kv_cache, layout)
    note(f"kv_cache: K and V copied into page-contiguous pools [pages, P, Hkv, D] ({layout}; the kernel "
         "assumes page stride = P * token stride)")
    return dense_copy(k), dense_copy(v)


def _paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND", scale=None,
           return_lse=False, out=None, lse=None):
    fwd = _op(DECODE_OPS, "decode_attention_fwd")
    k, v = paged_pools(kv_cache, layout)
    lengths = sequence_lengths(kv_page_indptr, kv_last_page_len, k.shape[1])
    return decode_call(fwd, q, k, v, block_table(kv_page_indptr, kv_page_indices), lengths, k.shape[1],
                       scale=scale, out=out, lse=lse, return_lse=return_lse)


def dense_decode_pools(k, v):
    """Dense K/V [B, Hkv, S, D] as one page per sequence: pools [B, S, Hkv, D] (a copy), table [B, 1]."""
    note("k, v: copied to [B, S, Hkv, D], one page of S tokens per sequence")
    B, S = k.shape[0], k.shape[2]
    table = torch.arange(B, dtype=torch.int32, device=k.device)[:, None]
    return dense_copy(k.transpose(1, 2)), dense_copy(v.transpose(1, 2)), table, [S] * B, S


def _decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    fwd = _op(DECODE_OPS, "decode_attention_fwd")
    kp, vp, table, lengths, page = dense_decode_pools(k, v)
    o3 = None if out is None else out[:, :, 0]
    l2 = None if lse is None else lse[:, :, 0]
    run = decode_call(fwd, q[:, :, 0], kp, vp, table, lengths, page, scale=scale, out=o3, lse=l2,
                      return_lse=return_lse)

    def launch():
        o, l = run()
        return (out if out is not None else o[:, :, None]), (None if l is None else (lse if lse is not None else l[:, :, None]))
    return launch


def packed_paged(k, v, cu: list[int], block: int = BLOCK):
    """Packed K/V [T, Hkv, D] -> a paged cache [pages, block, Hkv, D] and its block table."""
    note(f"k, v: copied into a paged cache of {block}-token pages (unified_attention reads a paged cache)")
    lengths = [b - a for a, b in zip(cu[:-1], cu[1:])]
    counts = [-(-n // block) for n in lengths]
    pool_k = k.new_zeros(sum(counts), block, *k.shape[1:])
    pool_v = v.new_zeros(sum(counts), block, *v.shape[1:])
    table = torch.zeros(len(lengths), max([1, *counts]), dtype=torch.int32, device=k.device)
    page = 0
    for b, (n, c) in enumerate(zip(lengths, counts)):
        pool_k[page:page + c].view(-1, *k.shape[1:])[:n] = k[cu[b]:cu[b + 1]]
        pool_v[page:page + c].view(-1, *v.shape[1:])[:n] = v[cu[b]:cu[b + 1]]
        table[b, :c] = torch.arange(page, page + c, dtype=torch.int32)
        page += c
    return pool_k, pool_v, table, lengths


def unified_call(unified_attention, q, k, v, cu_seqlens, *, scale, out):
    """The launch of ``unified_attention`` over packed q/k/v [T, H, D] (causal within each sequence)."""
    check_dtype("vLLM unified_attention", q, (torch.float16, torch.bfloat16))
    cu = [int(x) for x in cu_seqlens.tolist()]
    kc, vc, table, lengths = packed_paged(k, v, cu)
    seqused = torch.tensor(lengths, dtype=torch.int32, device=q.device)
    cu_q = cu_seqlens.to(device=q.device, dtype=torch.int32)
    descale = torch.ones(len(lengths), k.shape[1], dtype=torch.float32, device=q.device)
    o = out if out is not None else torch.empty_like(q)
    max_len = max(lengths)

    def launch():
        unified_attention(q, kc, vc, o, cu_q, max_len, seqused, max_len, default_scale(scale, q.shape[-1]), True,
                          (-1, -1), table, 0.0, None, descale, descale)
        return o
    return launch


def _no_lse_causal_only(causal, return_lse):
    if return_lse:
        raise Unsupported("vLLM unified_attention returns no LSE")
    if not causal:
        raise Unsupported("vLLM unified_attention is causal only (it asserts causal)")


def _varlen(q, k, v, seq, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    fn = _op(UNIFIED_OPS, "unified_attention")  # not installed: that reason first
    _no_lse_causal_only(causal, return_lse)
    if q.dim() == 3:
        return _wrap(unified_call(fn, q, k, v, seq, scale=scale, out=out))
    lengths = [int(n) for n in seq.tolist()]
    qp, kp, vp, cu = padded_to_packed(q, k, v, lengths)
    run = unified_call(fn, qp, kp, vp, cu, scale=scale, out=None)
    return lambda: unpack_padded(run(), None, lengths, q, out)


def _prefill(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    B, Hq, S, D = q.shape
    lengths = torch.full((B,), S, dtype=torch.int32)
    return _varlen(q, k, v, lengths, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse)


def _wrap(run):
    return lambda: (run(), None)


#: What vLLM's Triton MLA backend passes as num_kv_splits (1 only in its batch-invariant mode).
MLA_KV_SPLITS = 4
FP8 = getattr(torch, "float8_e4m3fn", None)


def fused_latent(ckv_cache, kpe_cache):
    """The two caches as vLLM's one KV head of fused rows [pages, P, 1, Dc + Dr]: a view when
    they already are the halves of one page-contiguous buffer, else a copy (noted)."""
    pages, P, Dc = ckv_cache.shape
    Dr = kpe_cache.shape[-1]
    row = ckv_cache.stride(1)
    if (ckv_cache.stride(-1) == 1 and kpe_cache.stride(-1) == 1 and kpe_cache.stride()[:2] == ckv_cache.stride()[:2]
            and kpe_cache.data_ptr() == ckv_cache.data_ptr() + Dc * ckv_cache.element_size()
            and row >= Dc + Dr and ckv_cache.stride(0) == P * row):
        note("ckv_cache, kpe_cache: passed as one fused [pages, P, 1, Dc + Dr] view of their buffer (no copy)")
        return ckv_cache.as_strided((pages, P, 1, Dc + Dr), (P * row, row, Dc + Dr, 1))
    note("ckv_cache, kpe_cache: copied into one fused page-contiguous cache [pages, P, 1, Dc + Dr] (the kernel "
         "reads a key's rope half from its latent row and assumes page stride = P * token stride)")
    fused = torch.empty(pages, P, 1, Dc + Dr, dtype=ckv_cache.dtype, device=ckv_cache.device)
    fused[:, :, 0, :Dc] = ckv_cache
    fused[:, :, 0, Dc:] = kpe_cache
    return fused


def mla_decode_call(decode_attention_fwd, q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                    kv_last_page_len, *, scale, return_lse, out, lse, k_scale, v_scale):
    check_dtype("vLLM Triton MLA", q_nope)
    B, H, Dc = q_nope.shape
    Dr, P = q_pe.shape[-1], ckv_cache.shape[1]
    fp8 = FP8 is not None and ckv_cache.dtype == FP8
    if not fp8 and (ckv_cache.dtype != q_nope.dtype or float(k_scale) != 1.0 or float(v_scale) != 1.0):
        raise Unsupported(f"vLLM Triton MLA: a {str(ckv_cache.dtype).replace('torch.', '')} cache with "
                          f"k_scale {k_scale}, v_scale {v_scale} (a cache in q's dtype is read unscaled)")
    if fp8 and float(k_scale) != float(v_scale):
        raise Unsupported(f"vLLM Triton MLA: k_scale {k_scale} != v_scale {v_scale} (the kernel dequantises K and "
                          "V of the shared latent row with k_scale alone)")
    lengths = sequence_lengths(kv_page_indptr, kv_last_page_len, P)
    if any(n == 0 for n in lengths):
        raise Unsupported("vLLM decode_attention_fwd: a sequence of length 0 (its reduction divides by a zero sum)")
    kv = fused_latent(ckv_cache, kpe_cache)
    note("q_nope, q_pe: concatenated into q [B, H, Dc + Dr] (copy), as vLLM's backend does")
    q = torch.cat([q_nope, q_pe], -1)
    table = block_table(kv_page_indptr, kv_page_indices)
    note("kv_page_indptr / kv_page_indices / kv_last_page_len: a block table [B, max pages] and the sequence lengths")
    seq = torch.tensor(lengths, dtype=torch.int32, device=q.device)
    logits = torch.empty(B, H, MLA_KV_SPLITS, Dc + 1, dtype=torch.float32, device=q.device)
    # The kernel writes o through its batch and head strides and the LSE at batch stride + head:
    # the caller's buffers are used where they have that form.
    o = out if out is not None and out.stride(-1) == 1 else torch.empty_like(q_nope)
    l = lse if return_lse and lse is not None and lse.stride(-1) == 1 else \
        torch.empty(B, H, dtype=torch.float32, device=q.device)
    sm_scale = default_scale(scale, Dc + Dr)
    kw = {"k_scale": torch.tensor([float(k_scale)], dtype=torch.float32, device=q.device)} if fp8 else {}

    def launch():
        decode_attention_fwd(q, kv, kv[..., :Dc], o, l, table, seq, logits, MLA_KV_SPLITS, sm_scale, P, **kw)
        return write(out, o), (write(lse, l, "lse") if return_lse else None)
    return launch


def _mla_decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, scale=None,
                return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
    fwd = _op(DECODE_OPS, "decode_attention_fwd")
    return mla_decode_call(fwd, q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                           scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale)


IMPLS = {
    "prefill": {"vllm": staged(LIBRARY, _prefill)},
    "decode": {"vllm": staged(LIBRARY, _decode)},
    "prefill_varlen": {"vllm": staged(LIBRARY, _varlen)},
    "paged_decode": {"vllm": staged(LIBRARY, _paged)},
    "mla_paged_decode": {"vllm": staged(LIBRARY, _mla_decode)},
}
