"""Mutants of MLA chunked prefill (``kernels.mla_paged.mla_paged_prefill``): each has the kernel's
signature and exactly one realistic bug. Most wrap the project's kernel; the causal-alignment and
softmax bugs are plain torch with the bug written in (never the suite's references)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernels.mla_paged import mla_paged_prefill as _prefill

from ._common import CLASS_BUGS, SOFTMAX_BUGS, documented, finish, ignoring_out, reading_views_as_contiguous
from ._mla import exact_attention, latent_rows, mla_scale, online_prefill, prefill_visible

FAMILY = "mla_paged_prefill"


def _torch_prefill(**bug):
    def run(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *,
            causal=True, scale=None, return_lse=False, out=None, lse=None, k_scale=1.0, v_scale=1.0):
        return online_prefill(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                              kv_last_page_len, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                              k_scale=k_scale, v_scale=v_scale, **bug)
    return run


mla_paged_prefill_causal_top_left = documented(
    _torch_prefill(top_left=True), "mla_paged_prefill_causal_top_left",
    "Causal mask aligned top-left (query i sees positions <= i) instead of bottom-right (<= m - n + i): right only "
    "when the chunk is the whole sequence (m == n).")
mla_paged_prefill_causal_excludes_diagonal = documented(
    _torch_prefill(causal_offset=-1), "mla_paged_prefill_causal_excludes_diagonal",
    "Causal offset off by one: query i sees positions < m - n + i, not its own token.")
mla_paged_prefill_causal_one_ahead = documented(
    _torch_prefill(causal_offset=1), "mla_paged_prefill_causal_one_ahead",
    "Causal offset off by one the other way: query i also sees position m - n + i + 1 (the next token).")


def mla_paged_prefill_always_causal(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor,
                                    ckv_cache: torch.Tensor, kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                    kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                    causal: bool = True, scale: Optional[float] = None, return_lse: bool = False,
                                    out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                    k_scale: float = 1.0, v_scale: float = 1.0):
    """Ignores causal=False: the mask is always applied."""
    return _prefill(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                    kv_last_page_len, causal=True, scale=scale, return_lse=return_lse, out=out, lse=lse,
                    k_scale=k_scale, v_scale=v_scale)


def mla_paged_prefill_ignores_kpe(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor,
                                  ckv_cache: torch.Tensor, kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                  kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                  causal: bool = True, scale: Optional[float] = None, return_lse: bool = False,
                                  out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                  k_scale: float = 1.0, v_scale: float = 1.0):
    """The rope part of the score is dropped: score = scale * q_nope . ckv (q_pe . kpe ignored)."""
    return _prefill(q_nope, torch.zeros_like(q_pe), qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                    kv_last_page_len, causal=causal, scale=mla_scale(q_nope, q_pe, scale), return_lse=return_lse,
                    out=out, lse=lse, k_scale=k_scale, v_scale=v_scale)


def mla_paged_prefill_default_scale_of_dc(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor,
                                          ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                                          kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                                          kv_last_page_len: torch.Tensor, *, causal: bool = True,
                                          scale: Optional[float] = None, return_lse: bool = False,
                                          out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                          k_scale: float = 1.0, v_scale: float = 1.0):
    """scale=None resolved to 1/sqrt(Dc) (the latent width) instead of 1/sqrt(Dc + Dr)."""
    if scale is None:
        scale = 1.0 / math.sqrt(q_nope.shape[-1])
    return _prefill(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                    causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale,
                    v_scale=v_scale)


def mla_paged_prefill_last_page_len_off_by_one(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor,
                                               ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                                               kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                                               kv_last_page_len: torch.Tensor, *, causal: bool = True,
                                               scale: Optional[float] = None, return_lse: bool = False,
                                               out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                               k_scale: float = 1.0, v_scale: float = 1.0):
    """Off by one at the last page: m = P * (pages - 1) + last - 1 cached tokens, so the causal
    alignment and the visible range both shift by one."""
    return _prefill(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices,
                    kv_last_page_len - 1, causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse,
                    k_scale=k_scale, v_scale=v_scale, check_indices=False)


def mla_paged_prefill_fp8_scales_swapped(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor,
                                         ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                                         kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                                         kv_last_page_len: torch.Tensor, *, causal: bool = True,
                                         scale: Optional[float] = None, return_lse: bool = False,
                                         out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                         k_scale: float = 1.0, v_scale: float = 1.0):
    """The fp8 scales on the wrong sides: v_scale dequantises the keys, k_scale the values."""
    return _prefill(q_nope, q_pe, qo_indptr, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                    causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=v_scale,
                    v_scale=k_scale)


def mla_paged_prefill_query_rows_of_first_sequence(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor,
                                                   ckv_cache: torch.Tensor, kpe_cache: torch.Tensor,
                                                   kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                                                   kv_last_page_len: torch.Tensor, *, causal: bool = True,
                                                   scale: Optional[float] = None, return_lse: bool = False,
                                                   out: Optional[torch.Tensor] = None,
                                                   lse: Optional[torch.Tensor] = None, k_scale: float = 1.0,
                                                   v_scale: float = 1.0):
    """Queries mapped to sequences by equal chunks (token t belongs to sequence t // n_0) instead of
    through qo_indptr: right only when every sequence has the same query count."""
    B = qo_indptr.shape[0] - 1
    n0 = max(int(qo_indptr[1] - qo_indptr[0]), 1) if B else 1
    T = q_nope.shape[0]
    even = torch.clamp(torch.arange(B + 1, dtype=torch.int32) * n0, max=T).to(qo_indptr.device)
    even[-1] = T
    return _prefill(q_nope, q_pe, even, ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                    causal=causal, scale=scale, return_lse=return_lse, out=out, lse=lse, k_scale=k_scale,
                    v_scale=v_scale, check_indices=False)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]
    return documented(_torch_prefill(**bug), f"mla_paged_prefill_{name}", doc)


mla_paged_prefill_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_prefill, "q_nope", "q_pe", "ckv_cache", "kpe_cache"),
    "mla_paged_prefill_reads_views_as_contiguous",
    "Ignores the strides of the queries and caches: the two halves of a fused [.., Dc + Dr] buffer are read as if "
    "each were contiguous.")
mla_paged_prefill_ignores_out = documented(
    ignoring_out(_prefill), "mla_paged_prefill_ignores_out",
    "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


MUTANTS = {f.__name__: f for f in (
    mla_paged_prefill_causal_top_left,
    mla_paged_prefill_causal_excludes_diagonal,
    mla_paged_prefill_causal_one_ahead,
    mla_paged_prefill_always_causal,
    mla_paged_prefill_ignores_kpe,
    mla_paged_prefill_default_scale_of_dc,
    mla_paged_prefill_last_page_len_off_by_one,
    mla_paged_prefill_fp8_scales_swapped,
    mla_paged_prefill_query_rows_of_first_sequence,
    mla_paged_prefill_reads_views_as_contiguous,
    mla_paged_prefill_ignores_out,
    _softmax_bug("stale_running_max"),
    _softmax_bug("exp_without_max_fp32"),
    *(_softmax_bug(b) for b in CLASS_BUGS if b != "input_dtype_accumulator"))}


# --- controls: correct implementations written from kernels.md, not from the project's code ------

def mla_paged_prefill_fp64(q_nope: torch.Tensor, q_pe: torch.Tensor, qo_indptr: torch.Tensor, ckv_cache: torch.Tensor,
                           kpe_cache: torch.Tensor, kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                           kv_last_page_len: torch.Tensor, *, causal: bool = True, scale: Optional[float] = None,
                           return_lse: bool = False, out: Optional[torch.Tensor] = None,
                           lse: Optional[torch.Tensor] = None, k_scale: float = 1.0, v_scale: float = 1.0):
    """Every query token against its sequence's gathered, dequantised latent rows, masked
    (causal bottom-right), dense softmax in float64."""
    k, v, valid, lengths = latent_rows(ckv_cache, kpe_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                                       k_scale=k_scale, v_scale=v_scale)
    seq, visible = prefill_visible(qo_indptr, lengths, k.shape[1], causal=causal)
    o, l = exact_attention(torch.cat([q_nope, q_pe], -1), k[seq], v[seq], visible, mla_scale(q_nope, q_pe, scale))
    return finish(q_nope, o, l.float(), return_lse, out, lse)


mla_paged_prefill_online_fp32 = documented(_torch_prefill(), "mla_paged_prefill_online_fp32",
                                           "The mutants' tiled online softmax with no bug switched in.")

CONTROLS = {f.__name__: f for f in (mla_paged_prefill_fp64, mla_paged_prefill_online_fp32)}
