"""FlagGems (FlagOpen/FlagGems, Triton kernels) as prefill, decode, varlen and paged decode.

Written against FlagGems 5.0.2 (``flag_gems/ops/attention.py`` and ``flash_api.py``):

- prefill, decode: ``flash_attention_forward(q, k, v, None, None, max_q, max_k, 0.0, causal,
  False, scale=...)``, torch's ``aten::_flash_attention_forward`` convention: q/k/v
  ``[B, S, H, D]`` (the suite's BNSD tensors are passed as transposed views, no copy), GQA
  native, fp16/bf16, D up to 256 (other D padded by FlagGems itself); returns ``(out [B, S, H, D],
  softmax_lse [B, H, S] fp32 natural log, ...)``. It takes no ``out=``: the result is copied into
  the caller's buffer (noted).
- prefill_varlen, paged_decode: ``flash_attn_varlen_func`` (vLLM's flash-attn interface): packed
  q ``[T, Hq, D]``, ``cu_seqlens_q/k``; paged with ``block_table [B, pages]``, ``seqused_k`` and a
  cache ``[pages, page_size, Hkv, D]`` (the suite's NHD cache gives that as a view; HND as a
  transposed view: both passed as they are, no copy: the library reads strides); ``out=`` is the
  caller's buffer; ``softmax_lse [Hq, T]`` natural log (transposed into the caller's ``[T, Hq]``,
  a copy). Causal is bottom-right aligned there, which equals the suite's rule when each
  sequence's query and key lengths are equal (always, in prefill_varlen).
- Scale: ``softmax_scale`` / ``scale`` passed explicitly (1/sqrt(D) when the case gives None).
"""
from __future__ import annotations

import torch

from ._adapter import default_scale, note, staged
from .library import Library
from ._layout import block_table, check_dtype, documented, padded_to_packed, paged_kv, sequence_lengths, unpack_padded, write
from ..interfaces import Unsupported

#: gpu_tested: the full profile on a lent H100 (torch 2.11, Triton 3.6), docs/hardware-log.md.
LIBRARY = Library("FlagGems", "flag_gems", "flag_gems", written_against="5.0.2", gpu_tested=True)
NAME_FWD = "FlagGems flash_attention_forward"
NAME_VARLEN = "FlagGems flash_attn_varlen_func"
#: Head dims FlagGems' flash kernels accept (others up to 256 are zero-padded by FlagGems).
MAX_HEAD_DIM = 256


def _ops():
    return LIBRARY.attribute("ops")


def _check(q, D):
    check_dtype("FlagGems flash attention", q)
    if D > MAX_HEAD_DIM or D % 8:
        raise Unsupported(f"FlagGems flash attention: head dim {D} (at most {MAX_HEAD_DIM}, a multiple of 8)")


def _dense(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    fwd = _ops().flash_attention_forward
    B, Hq, S, D = q.shape
    _check(q, D)
    note("q, k, v: passed as [B, S, H, D] views of the BNSD inputs (transpose, no copy)")
    args = (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))

    def launch():
        res = fwd(*args, None, None, S, k.shape[2], 0.0, bool(causal and S > 1), False,
                  scale=default_scale(scale, D))
        o = write(out, documented(NAME_FWD, "out", res[0], (B, S, Hq, D)).transpose(1, 2))
        l = write(lse, documented(NAME_FWD, "softmax_lse", res[1], (B, Hq, S)).float(), "lse") if return_lse else None
        return o, l
    return launch


def _decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    return _dense(q, k, v, causal=False, scale=scale, return_lse=return_lse, out=out, lse=lse)


def _varlen(q, k, v, seq, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    fn = _ops().flash_attn_varlen_func
    D = q.shape[-1]
    _check(q, D)
    padded = q.dim() == 4
    if padded:
        lengths = [int(n) for n in seq.tolist()]
        qp, kp, vp, cu = padded_to_packed(q, k, v, lengths)
        packed_out = torch.empty_like(qp)
    else:
        qp, kp, vp, cu = q, k, v, seq
        lengths = [b - a for a, b in zip(cu.tolist()[:-1], cu.tolist()[1:])]
        packed_out = out if out is not None else torch.empty_like(q)
    max_len = max(lengths)

    def launch():
        res = fn(qp, kp, vp, max_len, cu, max_len, cu_seqlens_k=cu, softmax_scale=default_scale(scale, D),
                 causal=bool(causal), return_softmax_lse=return_lse, out=packed_out)
        o, l = (res if return_lse else (res, None))
        if return_lse:
            documented(NAME_VARLEN, "softmax_lse", l, (qp.shape[1], qp.shape[0]))
        if padded:
            return unpack_padded(o, None if l is None else l.transpose(0, 1).float(), lengths, q, out, lse)
        return write(out, o), (write(lse, l.transpose(0, 1).float(), "lse") if return_lse else None)
    return launch


def _paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND", scale=None,
           return_lse=False, out=None, lse=None):
    fn = _ops().flash_attn_varlen_func
    B, Hq, D = q.shape
    _check(q, D)
    k_pages, v_pages = paged_kv(kv_cache, layout)
    lengths = sequence_lengths(kv_page_indptr, kv_last_page_len, k_pages.shape[1])
    table = block_table(kv_page_indptr, kv_page_indices)
    seqused = torch.tensor(lengths, dtype=torch.int32, device=q.device)
    cu_q = torch.arange(B + 1, dtype=torch.int32, device=q.device)
    note(f"kv_cache: K and V passed as [pages, page_size, Hkv, D] views ({layout}: "
         f"{'as stored' if layout == 'NHD' else 'transposed'}, no copy); CSR page list -> block_table [B, max pages]")
    empty = torch.tensor([n == 0 for n in lengths], device=q.device)
    if bool(empty.any()):
        note("sequences without pages: the flash-attn convention (LSE +inf for a row with no key) read as the suite's -inf")

    def launch():
        res = fn(q, k_pages, v_pages, 1, cu_q, max([1, *lengths]), seqused_k=seqused, softmax_scale=default_scale(scale, D),
                 causal=False, block_table=table, return_softmax_lse=return_lse,
                 out=out if out is not None else torch.empty_like(q))
        o, l = (res if return_lse else (res, None))
        if return_lse:
            l = documented(NAME_VARLEN, "softmax_lse", l, (Hq, B)).transpose(0, 1).float()
            l = torch.where(empty[:, None] & (l == float("inf")), float("-inf"), l)
            l = write(lse, l, "lse")
        return write(out, o), l
    return launch


IMPLS = {
    "prefill": {"flag_gems": staged(LIBRARY, _dense)},
    "decode": {"flag_gems": staged(LIBRARY, _decode)},
    "prefill_varlen": {"flag_gems": staged(LIBRARY, _varlen)},
    "paged_decode": {"flag_gems": staged(LIBRARY, _paged)},
}
