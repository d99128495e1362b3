"""Mutants of MLA decode (``kernels.mla_paged.mla_paged_decode``): each has the kernel's signature and
exactly one realistic bug. Most wrap the project's kernel (changing what it is given or what it
wrote); the softmax and merge bugs are plain torch with the bug written in (never the suite's
references)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernels.mla_paged import mla_paged_decode as _decode

from ._common import CLASS_BUGS, SOFTMAX_BUGS, documented, finish, ignoring_out, reading_views_as_contiguous
from ._mla import exact_attention, latent_rows, mla_scale, online_decode

FAMILY = "mla_paged_decode"


def mla_paged_decode_ignores_kpe(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                 kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                                 kv_last_page_len: torch.Tensor, *, scale: Optional[float] = None,
                                 return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                 lse: Optional[torch.Tensor] = None, k_scale: float = 1.0, v_scale: float = 1.0):
    """The rope part of the score is dropped: score = scale * q_nope . ckv (q_pe . kpe ignored)."""
    return _decode(q_nope, torch.zeros_like(q_pe), ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                   kv_last_page_len, scale=mla_scale(q_nope, q_pe, scale), return_lse=return_lse, out=out, lse=lse,
                   k_scale=k_scale, v_scale=v_scale)


def mla_paged_decode_default_scale_of_dc(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                         kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                         kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                         scale: Optional[float] = None, return_lse: bool = False,
                                         out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                         k_scale: float = 1.0, v_scale: float = 1.0):
    """scale=None resolved to 1/sqrt(Dc) (the latent width) instead of 1/sqrt(Dc + Dr)."""
    if scale is None:
        scale = 1.0 / math.sqrt(q_nope.shape[-1])
    return _decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                   scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale)


def mla_paged_decode_last_page_len_off_by_one(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                              kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                              kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                              scale: Optional[float] = None, return_lse: bool = False,
                                              out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                              k_scale: float = 1.0, v_scale: float = 1.0):
    """Off by one at the last page: L = P * (pages - 1) + last - 1, the newest token is dropped."""
    return _decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len - 1,
                   scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale,
                   check_indices=False)


def mla_paged_decode_page_table_off_by_one(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                           kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                           kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                           scale: Optional[float] = None, return_lse: bool = False,
                                           out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                           k_scale: float = 1.0, v_scale: float = 1.0):
    """Page j of a sequence is read at indices[indptr[b] + j + 1] (the last entry wraps)."""
    shifted = kv_page_indices.roll(-1) if kv_page_indices.numel() else kv_page_indices
    return _decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, shifted, kv_last_page_len, scale=scale,
                   return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale)


def mla_paged_decode_fp8_key_scale_twice(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                         kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                         kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                         scale: Optional[float] = None, return_lse: bool = False,
                                         out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                         k_scale: float = 1.0, v_scale: float = 1.0):
    """k_scale applied twice: once in the dequantisation of the key tile, again folded into the score scale."""
    return _decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                   scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale * k_scale, v_scale=v_scale)


def mla_paged_decode_fp8_scales_swapped(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                        kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                        kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                        scale: Optional[float] = None, return_lse: bool = False,
                                        out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                        k_scale: float = 1.0, v_scale: float = 1.0):
    """The fp8 scales on the wrong sides: v_scale dequantises the keys, k_scale the values."""
    return _decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                   scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=v_scale, v_scale=k_scale)


def mla_paged_decode_head_tile_repeats(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                       kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                       kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                       scale: Optional[float] = None, return_lse: bool = False,
                                       out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                       k_scale: float = 1.0, v_scale: float = 1.0):
    """The head-block offset is lost: every block of 16 heads reads the queries of heads 0..15 (right
    while H <= 16)."""
    heads = torch.arange(q_nope.shape[1], device=q_nope.device) % 16
    return _decode(q_nope[:, heads], q_pe[:, heads], ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                   kv_last_page_len, scale=mla_scale(q_nope, q_pe, scale), return_lse=return_lse, out=out, lse=lse,
                   k_scale=k_scale, v_scale=v_scale)


def mla_paged_decode_empty_sequence_unwritten(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                                              kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                              kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                              scale: Optional[float] = None, return_lse: bool = False,
                                              out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                              k_scale: float = 1.0, v_scale: float = 1.0):
    """Early exit for a zero-page sequence before the store: its o (0) and lse (-inf) are never written."""
    o, l = _decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                   scale=scale, return_lse=return_lse, k_scale=k_scale, v_scale=v_scale)
    if out is None:
        out = torch.empty_like(o)
    if return_lse and lse is None:
        lse = torch.empty_like(l)
    has_pages = kv_page_indptr[1:] > kv_page_indptr[:-1]
    out[has_pages] = o[has_pages]
    if return_lse:
        lse[has_pages] = l[has_pages]
    return out, (lse if return_lse else None)


def mla_paged_decode_merge_unweighted_past_threshold(q_nope: torch.Tensor, q_pe: torch.Tensor,
                                                     ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                                                     kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                                                     kv_last_page_len: torch.Tensor, *, scale: Optional[float] = None,
                                                     return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                                     lse: Optional[torch.Tensor] = None, k_scale: float = 1.0,
                                                     v_scale: float = 1.0):
    """Sequences past 512 tokens are split and the splits' outputs averaged instead of weighted by
    exp(lse_i - lse): right until a sequence is long enough to split."""
    k, v, valid, _ = latent_rows(ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                                 k_scale=k_scale, v_scale=v_scale)
    q = torch.cat([q_nope, q_pe], -1).float()
    s = ((q @ k.transpose(-1, -2)) * mla_scale(q_nope, q_pe, scale)).masked_fill(~valid[:, None, :], float("-inf"))
    outs, lses = [], []
    for start in range(0, s.shape[-1], 512):  # one iteration per split, each vectorized
        si = s[..., start:start + 512]
        li = torch.logsumexp(si, -1)
        p = torch.exp(si - torch.where(torch.isfinite(li), li, 0.0)[..., None])
        outs.append(p @ v[:, start:start + 512])
        lses.append(li)
    used = torch.isfinite(torch.stack(lses)).float()
    o = (torch.stack(outs) * used[..., None]).sum(0) / used.sum(0).clamp(min=1)[..., None]
    return finish(q_nope, o, torch.logsumexp(torch.stack(lses), 0), return_lse, out, lse)


def _torch_decode(pow2_pages=False, **bug):
    def run(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, scale=None,
            return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
        return online_decode(q_nope, q_pe, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                             scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale, v_scale=v_scale,
                             pow2_pages=pow2_pages, **bug)
    return run


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]
    return documented(_torch_decode(**bug), f"mla_paged_decode_{name}", doc)


mla_paged_decode_pow2_page_arithmetic = documented(
    _torch_decode(pow2_pages=True), "mla_paged_decode_pow2_page_arithmetic",
    "Page and slot of token t by shift and mask (t >> log2 P, t & (P - 1)): right only for power-of-two page sizes.")
mla_paged_decode_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_decode, "q_nope", "q_pe", "ckv_cache", "kpe_cache"),
    "mla_paged_decode_reads_views_as_contiguous",
    "Ignores the strides of the queries and caches: the two halves of a fused [.., Dc + Dr] buffer are read as if "
    "each were contiguous.")
mla_paged_decode_ignores_out = documented(
    ignoring_out(_decode), "mla_paged_decode_ignores_out",
    "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    mla_paged_decode_ignores_kpe,
    mla_paged_decode_default_scale_of_dc,
    mla_paged_decode_last_page_len_off_by_one,
    mla_paged_decode_page_table_off_by_one,
    mla_paged_decode_fp8_key_scale_twice,
    mla_paged_decode_fp8_scales_swapped,
    mla_paged_decode_head_tile_repeats,
    mla_paged_decode_empty_sequence_unwritten,
    mla_paged_decode_merge_unweighted_past_threshold,
    mla_paged_decode_pow2_page_arithmetic,
    mla_paged_decode_reads_views_as_contiguous,
    mla_paged_decode_ignores_out,
    _softmax_bug("fp16_accumulator"),
    _softmax_bug("stale_running_max"),
    _softmax_bug("exp_without_max_fp32"),
    *(_softmax_bug(b) for b in CLASS_BUGS))}


# --- controls: correct implementations written from kernels.md, not from the project's code ------

def mla_paged_decode_fp64(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                          kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor,
                          *, scale: Optional[float] = None, return_lse: bool = False,
                          out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                          k_scale: float = 1.0, v_scale: float = 1.0):
    """Each sequence's latent rows gathered through the page table, dequantised, dense masked
    attention in float64."""
    k, v, valid, _ = latent_rows(ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                                 k_scale=k_scale, v_scale=v_scale)
    o, l = exact_attention(torch.cat([q_nope, q_pe], -1), k, v, valid, mla_scale(q_nope, q_pe, scale))
    return finish(q_nope, o, l.float(), return_lse, out, lse)


mla_paged_decode_online_fp32 = documented(_torch_decode(), "mla_paged_decode_online_fp32",
                                          "The mutants' tiled online softmax with no bug switched in.")

CONTROLS = {f.__name__: f for f in (mla_paged_decode_fp64, mla_paged_decode_online_fp32)}
