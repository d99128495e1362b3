"""Mutants of paged decode (``kernels.paged_decode.paged_decode``): each has the kernel's signature
and exactly one realistic bug. Most wrap the project's kernel (changing what it is given or what
it wrote); one is plain torch with the bug written in (never the suite's references)."""
from __future__ import annotations

import math
from typing import Optional

import torch

from kernels.paged_decode import paged_decode as _paged_decode

from ._common import (CLASS_BUGS, owning_pages_once, SOFTMAX_BUGS, documented, finish, heads_for_queries_pow2, ignoring_out,
                      online_attention, page_and_slot_pow2, reading_views_as_contiguous)

FAMILY = "paged_decode"


def _head_axis(layout):
    return 2 if layout == "HND" else 3


def _page_size(kv_cache, layout):
    return kv_cache.shape[3] if layout == "HND" else kv_cache.shape[2]


def paged_decode_last_page_len_off_by_one(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                          kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                          layout: str = "HND", scale: Optional[float] = None,
                                          return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                          lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                          check_indices: bool = True):
    """Off by one at the last page: L = page_size * (pages - 1) + last - 1, the newest token is dropped."""
    return _torch_paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                        scale=scale, return_lse=return_lse, out=out, lse=lse, last_offset=-1)


def _torch_paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout, scale, return_lse,
                 out, lse, last_offset):
    """Plain-torch paged decode (fp32, row max subtracted) over L_b = page_size * (pages_b - 1) +
    last_b + last_offset tokens; a sequence with no token gives o = 0, lse = -inf."""
    B, Hq, D = q.shape
    P = _page_size(kv_cache, layout)
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    pages = (kv_page_indptr[1:] - kv_page_indptr[:-1]).long()
    lengths = torch.where(pages > 0, P * (pages - 1) + kv_last_page_len.long() + last_offset,
                          torch.zeros_like(pages)).clamp(min=0)
    n_max = max(int(lengths.max()) if B else 0, 1)
    t = torch.arange(n_max, device=q.device)
    valid = t[None, :] < lengths[:, None]                                     # [B, N]
    slot_in_table = (kv_page_indptr[:-1].long()[:, None] + t[None, :] // P)
    slot_in_table = torch.where(valid, slot_in_table, torch.zeros_like(slot_in_table))
    page = kv_page_indices.long()[slot_in_table.clamp(max=max(kv_page_indices.numel() - 1, 0))]
    rows = page * P + t[None, :] % P                                          # [B, N] cache rows
    hnd = kv_cache if layout == "HND" else kv_cache.transpose(2, 3)          # [pages, 2, Hkv, P, D]
    Hkv = hnd.shape[2]
    flat = hnd.permute(1, 2, 0, 3, 4).reshape(2, Hkv, -1, D).float()          # [2, Hkv, pages*P, D]
    kv = flat[:, :, rows]                                                     # [2, Hkv, B, N, D]
    kv = torch.where(valid[None, None, :, :, None], kv, torch.zeros_like(kv))  # cache holds NaN slots
    k, v = (x.permute(1, 0, 2, 3).repeat_interleave(Hq // Hkv, dim=1) for x in kv)  # [B, Hq, N, D]
    s = (q.float()[:, :, None, :] @ k.transpose(-1, -2))[:, :, 0] * scale    # [B, Hq, N]
    s = s.masked_fill(~valid[:, None, :], float("-inf"))
    m = s.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    l = p.sum(-1, keepdim=True)
    o = (p[:, :, None, :] @ v)[:, :, 0] / torch.where(l > 0, l, torch.ones_like(l))
    if out is None:
        out = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    out.copy_(o.to(out.dtype))
    if not return_lse:
        return out, None
    if lse is None:
        lse = torch.empty((B, Hq), dtype=torch.float32, device=q.device)
    lse.copy_((m + torch.log(l))[..., 0])
    return out, lse


def paged_decode_page_table_off_by_one(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                       kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                       layout: str = "HND", scale: Optional[float] = None,
                                       return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                       lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                       check_indices: bool = True):
    """Page-table indexing off by one: page j is read at indices[indptr[b] + j + 1] (the last slot wraps)."""
    shifted = kv_page_indices.roll(-1) if kv_page_indices.numel() else kv_page_indices
    return _paged_decode(q, kv_cache, kv_page_indptr, shifted, kv_last_page_len, layout=layout, scale=scale,
                         return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices)


def paged_decode_ignores_page_table(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                    kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                    layout: str = "HND", scale: Optional[float] = None,
                                    return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                    lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                    check_indices: bool = True):
    """Skips the page-table lookup: page j of sequence b is pool page indptr[b] + j (assumes contiguous pages)."""
    identity = torch.arange(kv_page_indices.numel(), dtype=kv_page_indices.dtype, device=kv_page_indices.device)
    return _paged_decode(q, kv_cache, kv_page_indptr, identity, kv_last_page_len, layout=layout, scale=scale,
                         return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices)


def paged_decode_nhd_read_as_hnd(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                 kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                 layout: str = "HND", scale: Optional[float] = None,
                                 return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                 lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                 check_indices: bool = True):
    """Wrong layout: an NHD cache [pages, 2, page_size, Hkv, D] is addressed with HND strides."""
    if layout == "NHD":
        n, two, P, Hkv, D = kv_cache.shape
        kv_cache, layout = kv_cache.view(n, two, Hkv, P, D), "HND"  # same memory, HND strides
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices)


def paged_decode_gqa_head_modulo(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                 kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                 layout: str = "HND", scale: Optional[float] = None,
                                 return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                 lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                 check_indices: bool = True):
    """Wrong GQA head mapping: query head h reads KV head h % Hkv instead of h // G."""
    axis = _head_axis(layout)
    reps = [1] * kv_cache.dim()
    reps[axis] = q.shape[1] // kv_cache.shape[axis]  # tiled heads: h // 1 reads KV head h % Hkv
    return _paged_decode(q, kv_cache.repeat(*reps), kv_page_indptr, kv_page_indices, kv_last_page_len,
                         layout=layout, scale=scale, return_lse=return_lse, out=out, lse=lse,
                         num_splits=num_splits, check_indices=check_indices)


def paged_decode_empty_sequence_unwritten(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                          kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                          layout: str = "HND", scale: Optional[float] = None,
                                          return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                          lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                          check_indices: bool = True):
    """Early exit for a zero-page sequence before the store: its o (0) and lse (-inf) are never written."""
    o, l = _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, num_splits=num_splits, check_indices=check_indices)
    B, Hq, D = q.shape
    if out is None:
        out = torch.empty((B, Hq, D), dtype=q.dtype, device=q.device)
    if return_lse and lse is None:
        lse = torch.empty((B, Hq), dtype=torch.float32, device=q.device)
    has_pages = (kv_page_indptr[1:] > kv_page_indptr[:-1]).tolist()
    for b in range(B):
        if has_pages[b]:
            out[b].copy_(o[b])
            if return_lse:
                lse[b].copy_(l[b])
    return out, (lse if return_lse else None)


def _gather(q, kv_cache, indptr, indices, last, layout, pow2_pages=False, pow2_groups=False, zero_unused=True):
    """(k, v [B, Hq, N, D] in the cache dtype, valid [B, 1, 1, N]): each sequence's tokens in
    logical order, read page by page through the table (N: the longest sequence)."""
    B, Hq, D = q.shape
    hnd = kv_cache if layout == "HND" else kv_cache.transpose(2, 3)      # [pages, 2, Hkv, P, D]
    P, Hkv = hnd.shape[3], hnd.shape[2]
    pages = (indptr[1:] - indptr[:-1]).long()
    lengths = torch.where(pages > 0, P * (pages - 1) + last.long(), 0)
    N = max(int(lengths.max()) if B else 0, 1)
    t = torch.arange(N, device=q.device)
    valid = t[None, :] < lengths[:, None]                                  # [B, N]
    page_in_seq, slot = page_and_slot_pow2(t, P) if pow2_pages else (t // P, t % P)
    entry = torch.where(valid, indptr[:-1].long()[:, None] + page_in_seq, 0).clamp(max=max(indices.numel() - 1, 0))
    page = indices.long()[entry] if indices.numel() else torch.zeros_like(entry)
    kv = hnd[page, :, :, slot]                                             # [B, N, 2, Hkv, D]
    if zero_unused:
        kv = torch.where(valid[:, :, None, None, None], kv, torch.zeros((), dtype=kv.dtype))
    k, v = (kv[:, :, i].permute(0, 2, 1, 3) for i in (0, 1))
    k, v = ((heads_for_queries_pow2(x, Hq) if pow2_groups else x.repeat_interleave(Hq // Hkv, dim=1))
            for x in (k, v))
    return k, v, valid[:, None, None, :]


def _online_paged(q, kv_cache, indptr, indices, last, *, layout, scale, return_lse, out, lse, pow2_pages=False,
                  pow2_groups=False, zero_unused=True, **bug):
    """Tiled online-softmax paged decode in torch (64-token tiles of each sequence)."""
    k, v, valid = _gather(q, kv_cache, indptr, indices, last, layout, pow2_pages, pow2_groups, zero_unused)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    o, l = online_attention(q[:, :, None], k, v, scale, valid, **bug)
    return finish(q, o[:, :, 0], l[:, :, 0], return_lse, out, lse)


def _softmax_bug(name):
    doc, bug = SOFTMAX_BUGS[name]

    def mutant(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
               kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *, layout: str = "HND",
               scale: Optional[float] = None, return_lse: bool = False, out: Optional[torch.Tensor] = None,
               lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None, check_indices: bool = True):
        return _online_paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                             scale=scale, return_lse=return_lse, out=out, lse=lse, **bug)

    mutant.__name__ = f"paged_decode_{name}"
    mutant.__doc__ = doc
    return mutant


def paged_decode_pow2_page_arithmetic(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                      kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                      layout: str = "HND", scale: Optional[float] = None, return_lse: bool = False,
                                      out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                      num_splits: Optional[int] = None, check_indices: bool = True):
    """Page and slot of token t by shift and mask (t >> log2 P, t & (P - 1)): right only for
    power-of-two page sizes."""
    return _online_paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, pow2_pages=True)


def paged_decode_pow2_group_packing(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                    kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                    layout: str = "HND", scale: Optional[float] = None, return_lse: bool = False,
                                    out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                    num_splits: Optional[int] = None, check_indices: bool = True):
    """Query head h reads KV head h >> log2(G): a group packing that assumes G is a power of two."""
    return _online_paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, pow2_groups=True)


def paged_decode_merge_unweighted_past_threshold(q: torch.Tensor, kv_cache: torch.Tensor,
                                                 kv_page_indptr: torch.Tensor, kv_page_indices: torch.Tensor,
                                                 kv_last_page_len: torch.Tensor, *, layout: str = "HND",
                                                 scale: Optional[float] = None, return_lse: bool = False,
                                                 out: Optional[torch.Tensor] = None,
                                                 lse: Optional[torch.Tensor] = None,
                                                 num_splits: Optional[int] = None, check_indices: bool = True):
    """Sequences past 512 tokens are split and the splits' outputs averaged instead of weighted by
    exp(lse_i - lse): right until a sequence is long enough to split."""
    k, v, valid = _gather(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = ((q.float()[:, :, None] @ k.float().transpose(-1, -2)) * scale).masked_fill(~valid, float("-inf"))
    outs, lses = [], []
    for start in range(0, s.shape[-1], 512):  # one iteration per split, each vectorized
        si = s[..., start:start + 512]
        li = torch.logsumexp(si, -1)
        p = torch.exp(si - torch.where(torch.isfinite(li), li, 0.0)[..., None])
        outs.append(p @ v[:, :, start:start + 512].float())
        lses.append(li)
    used = torch.isfinite(torch.stack(lses)).float()
    o = (torch.stack(outs) * used[..., None]).sum(0) / used.sum(0).clamp(min=1)[..., None]
    return finish(q, o[:, :, 0], torch.logsumexp(torch.stack(lses), 0)[:, :, 0], return_lse, out, lse)


paged_decode_reads_views_as_contiguous = documented(
    reading_views_as_contiguous(_paged_decode, "q", "kv_cache"), "paged_decode_reads_views_as_contiguous",
    "Ignores the strides of q and the cache: a page pool that is a slice of a larger one is read as if "
    "contiguous.")
paged_decode_ignores_out = documented(
    ignoring_out(_paged_decode), "paged_decode_ignores_out",
    "Ignores the caller's out= / lse= buffers and returns tensors of its own.")


# --- fp8 (e4m3fn) caches: K = cache * k_scale, V = cache * v_scale (kernels.md section 11) ---------

FP8 = torch.float8_e4m3fn


def dequantized(kv_cache, layout, k_scale=1.0, v_scale=1.0, as_dtype=None):
    """An fp8 cache as fp32 with its scales applied (its NaN slots stay NaN); a 16-bit cache as
    it is. ``as_dtype``: read the bytes as that fp8 format instead of e4m3fn (a bug)."""
    if kv_cache.dtype != FP8:
        return kv_cache
    raw = kv_cache if as_dtype is None else kv_cache.view(as_dtype)
    hnd = (raw if layout == "HND" else raw.transpose(2, 3)).float()
    wide = torch.stack((hnd[:, 0] * float(k_scale), hnd[:, 1] * float(v_scale)), 1)
    return wide if layout == "HND" else wide.transpose(2, 3)


def paged_decode_fp8_k_scale_on_v(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                  kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                  layout: str = "HND", scale: Optional[float] = None, return_lse: bool = False,
                                  out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                  num_splits: Optional[int] = None, check_indices: bool = True,
                                  k_scale: float = 1.0, v_scale: float = 1.0):
    """fp8 cache: V is dequantised with k_scale (one scale variable used for both halves)."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices, k_scale=k_scale, v_scale=k_scale)


def paged_decode_fp8_scales_ignored(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                    kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                    layout: str = "HND", scale: Optional[float] = None, return_lse: bool = False,
                                    out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                    num_splits: Optional[int] = None, check_indices: bool = True,
                                    k_scale: float = 1.0, v_scale: float = 1.0):
    """fp8 cache: the raw e4m3 values are used, k_scale and v_scale are never applied."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices)


def paged_decode_fp8_scales_applied_twice(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                          kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                          layout: str = "HND", scale: Optional[float] = None,
                                          return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                          lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                          check_indices: bool = True, k_scale: float = 1.0, v_scale: float = 1.0):
    """fp8 cache: each scale is applied twice (to the tile on load and again to its product)."""
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices, k_scale=k_scale * k_scale, v_scale=v_scale * v_scale)


def paged_decode_fp8_nan_slots_unmasked(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                        kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                        layout: str = "HND", scale: Optional[float] = None,
                                        return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                        lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                        check_indices: bool = True, k_scale: float = 1.0, v_scale: float = 1.0):
    """The whole page is loaded and dequantised, unused slots included; only their scores are
    masked, so an unused slot's NaN encoding reaches P @ V as 0 * NaN."""
    return _online_paged(q, dequantized(kv_cache, layout, k_scale, v_scale), kv_page_indptr, kv_page_indices,
                         kv_last_page_len, layout=layout, scale=scale, return_lse=return_lse, out=out, lse=lse,
                         zero_unused=False)


def paged_decode_fp8_subnormals_flushed(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                        kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                        layout: str = "HND", scale: Optional[float] = None,
                                        return_lse: bool = False, out: Optional[torch.Tensor] = None,
                                        lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                                        check_indices: bool = True, k_scale: float = 1.0, v_scale: float = 1.0):
    """fp8 decode that flushes e4m3 subnormals (exponent field 0) to zero."""
    if kv_cache.dtype == FP8:
        raw = kv_cache.view(torch.uint8)
        kv_cache = torch.where((raw & 0x78) == 0, raw & 0x80, raw).view(FP8)
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices, k_scale=k_scale, v_scale=v_scale)


def paged_decode_fp8_read_as_e5m2(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                  kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                  layout: str = "HND", scale: Optional[float] = None, return_lse: bool = False,
                                  out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                  num_splits: Optional[int] = None, check_indices: bool = True,
                                  k_scale: float = 1.0, v_scale: float = 1.0):
    """fp8 cache decoded in the wrong format: the bytes are read as e5m2 instead of e4m3fn."""
    return _online_paged(q, dequantized(kv_cache, layout, k_scale, v_scale, as_dtype=torch.float8_e5m2),
                         kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout, scale=scale,
                         return_lse=return_lse, out=out, lse=lse)


def paged_decode_fp8_scaled_in_fp8(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                                   kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *,
                                   layout: str = "HND", scale: Optional[float] = None, return_lse: bool = False,
                                   out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                                   num_splits: Optional[int] = None, check_indices: bool = True,
                                   k_scale: float = 1.0, v_scale: float = 1.0):
    """fp8 cache: the scaled values are rounded back to e4m3 (saturating at 448, losing what
    falls below its subnormals) before use."""
    if kv_cache.dtype == FP8:
        kv_cache = dequantized(kv_cache, layout, k_scale, v_scale).to(FP8)
    return _paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse, num_splits=num_splits,
                         check_indices=check_indices)


MUTANTS = {f.__name__: f for f in (
    _softmax_bug("fp16_accumulator"),
    _softmax_bug("stale_running_max"),
    _softmax_bug("exp_without_max_fp32"),
    paged_decode_merge_unweighted_past_threshold,
    paged_decode_reads_views_as_contiguous,
    paged_decode_ignores_out,
    paged_decode_last_page_len_off_by_one,
    paged_decode_page_table_off_by_one,
    paged_decode_ignores_page_table,
    paged_decode_nhd_read_as_hnd,
    paged_decode_gqa_head_modulo,
    paged_decode_empty_sequence_unwritten,
    *(_softmax_bug(b) for b in CLASS_BUGS),
    paged_decode_pow2_page_arithmetic, paged_decode_pow2_group_packing,
    paged_decode_fp8_k_scale_on_v, paged_decode_fp8_scales_ignored, paged_decode_fp8_scales_applied_twice,
    paged_decode_fp8_nan_slots_unmasked, paged_decode_fp8_subnormals_flushed, paged_decode_fp8_read_as_e5m2,
    paged_decode_fp8_scaled_in_fp8)}


# --- controls: correct implementations written from docs/contract.md, not from the project's code ------

def paged_decode_fp64(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                      kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *, layout: str = "HND",
                      scale: Optional[float] = None, return_lse: bool = False, out: Optional[torch.Tensor] = None,
                      lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                      check_indices: bool = True, k_scale: float = 1.0, v_scale: float = 1.0):
    """Each sequence gathered through the page table, dense masked attention in float64."""
    kv_cache = dequantized(kv_cache, layout, k_scale, v_scale)
    k, v, valid = _gather(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = ((q.double()[:, :, None] @ k.double().transpose(-1, -2)) * scale).masked_fill(~valid, float("-inf"))
    l = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(l), l, 0.0)[..., None])
    return finish(q, (p @ v.double())[:, :, 0], l[:, :, 0].float(), return_lse, out, lse)


def paged_decode_sdpa_fp32(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                           kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *, layout: str = "HND",
                           scale: Optional[float] = None, return_lse: bool = False,
                           out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                           num_splits: Optional[int] = None, check_indices: bool = True,
                           k_scale: float = 1.0, v_scale: float = 1.0):
    """Gathered sequences through torch's scaled_dot_product_attention (fp32, boolean mask); a
    sequence with no token gives zeros and lse -inf."""
    kv_cache = dequantized(kv_cache, layout, k_scale, v_scale)
    k, v, valid = _gather(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    qf = q.float()[:, :, None]
    sees = valid.any(-1, keepdim=True)
    o = torch.nn.functional.scaled_dot_product_attention(qf, k.float(), v.float(), attn_mask=valid | ~sees,
                                                         scale=scale)
    o = torch.where(sees, o, 0.0)
    l = torch.logsumexp(((qf @ k.float().transpose(-1, -2)) * scale).masked_fill(~valid, float("-inf")), -1)
    return finish(q, o[:, :, 0], l[:, :, 0], return_lse, out, lse)


def paged_decode_online_fp32(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                             kv_page_indices: torch.Tensor, kv_last_page_len: torch.Tensor, *, layout: str = "HND",
                             scale: Optional[float] = None, return_lse: bool = False,
                             out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                             num_splits: Optional[int] = None, check_indices: bool = True,
                             k_scale: float = 1.0, v_scale: float = 1.0):
    """The mutants' tiled online softmax with no bug switched in."""
    return _online_paged(q, dequantized(kv_cache, layout, k_scale, v_scale), kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                         scale=scale, return_lse=return_lse, out=out, lse=lse)


CONTROLS = {f.__name__: f for f in (paged_decode_fp64, paged_decode_sdpa_fp32, paged_decode_online_fp32)}
MUTANTS["paged_decode_one_owner_per_page"] = owning_pages_once(paged_decode_fp64, "paged_decode_one_owner_per_page")
