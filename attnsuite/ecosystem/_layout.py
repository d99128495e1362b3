"""Layout moves the adapters share: writing into the caller's buffers, expanding GQA heads,
turning the suite's paged cache and CSR page table into what a library takes. Each says what
it copies through ``note``, so the record carries it."""
from __future__ import annotations

import torch

from ._adapter import note
from ..interfaces import Unsupported


def write(buffer, value: torch.Tensor, name: str = "out"):
    """``value`` into the caller's buffer (a copy of the library's own result: noted)."""
    if buffer is None:
        return value
    if tuple(value.shape) != tuple(buffer.shape):
        raise LibraryContractError(f"the library's {name} has shape {list(value.shape)}, the case's "
                                   f"{list(buffer.shape)} (the adapter maps documented shapes only)")
    if value.data_ptr() != buffer.data_ptr() or value.stride() != buffer.stride():
        note(f"{name}: the library's result copied into the caller's buffer (it takes no {name}=)")
        buffer.copy_(value)
    return buffer


def check_dtype(library: str, q: torch.Tensor, allowed=(torch.float16, torch.bfloat16)) -> None:
    if q.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise Unsupported(f"{library}: dtype {str(q.dtype).replace('torch.', '')} not supported ({names})")


def expand_heads(k: torch.Tensor, v: torch.Tensor, hq: int, dim: int = 1):
    """K/V with their heads repeated to ``hq`` (a copy), for calls that take no GQA."""
    hkv = k.shape[dim]
    if hkv == hq:
        return k, v
    note(f"k, v: {hkv} KV heads repeated to the {hq} query heads (copy; the call takes no GQA)")
    g = hq // hkv
    return k.repeat_interleave(g, dim), v.repeat_interleave(g, dim)


def dense_copy(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` with row-major strides on every axis. ``x.contiguous()`` is not enough for
    kernels that compute addresses from one stride: torch calls a view contiguous whatever the
    stride of a size-1 axis is, and returns it as it is (a [B, 1, H, D] transpose keeps
    ``stride(1) == D``, so ``page * P * stride(1)`` lands in the wrong page)."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device).copy_(x)


def paged_kv(kv_cache: torch.Tensor, layout: str):
    """(k, v) page pools [pages, P, Hkv, D] (NHD views of the suite's cache; no copy)."""
    if layout == "NHD":
        return kv_cache[:, 0], kv_cache[:, 1]
    if layout == "HND":
        return kv_cache[:, 0].transpose(1, 2), kv_cache[:, 1].transpose(1, 2)
    raise ValueError(f"layout must be 'HND' or 'NHD', got {layout!r}")


def sequence_lengths(kv_page_indptr, kv_last_page_len, page_size: int) -> list[int]:
    """L_b = P * (pages_b - 1) + last_b (0 for a sequence without pages), on the host."""
    ptr = kv_page_indptr.tolist()
    last = kv_last_page_len.tolist()
    return [page_size * (ptr[b + 1] - ptr[b] - 1) + last[b] if ptr[b + 1] > ptr[b] else 0
            for b in range(len(ptr) - 1)]


def gather_dense(kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout: str):
    """The paged cache as dense, zero-padded K/V [B, Hkv, L_max, D] and the lengths (a gather:
    noted; done outside the library call)."""
    k_pages, v_pages = paged_kv(kv_cache, layout)
    page_size, hkv, d = k_pages.shape[1:]
    lengths = sequence_lengths(kv_page_indptr, kv_last_page_len, page_size)
    B = len(lengths)
    L = max([1, *lengths])
    k = kv_cache.new_zeros(B, L, hkv, d)
    v = kv_cache.new_zeros(B, L, hkv, d)
    ptr = kv_page_indptr.tolist()
    for b in range(B):
        if lengths[b]:
            pages = kv_page_indices[ptr[b]:ptr[b + 1]].long()
            k[b, :lengths[b]] = k_pages[pages].reshape(-1, hkv, d)[:lengths[b]]
            v[b, :lengths[b]] = v_pages[pages].reshape(-1, hkv, d)[:lengths[b]]
    note("kv_cache: pages gathered into a dense zero-padded K/V [B, Hkv, L_max, D] (copy, outside the library call)")
    return k.transpose(1, 2), v.transpose(1, 2), lengths


def block_table(kv_page_indptr, kv_page_indices, width: int | None = None) -> torch.Tensor:
    """The CSR page list as a dense block table int32 [B, max pages] (rows padded with page 0)."""
    ptr = kv_page_indptr.tolist()
    counts = [ptr[b + 1] - ptr[b] for b in range(len(ptr) - 1)]
    width = width or max([1, *counts])
    table = torch.zeros(len(counts), width, dtype=torch.int32, device=kv_page_indices.device)
    for b, n in enumerate(counts):
        table[b, :n] = kv_page_indices[ptr[b]:ptr[b + 1]]
    return table


def padded_to_packed(q, k, v, lengths: list[int]):
    """Padded varlen [B, H, S, D] -> packed [T, H, D] (copy: noted) and cu_seqlens int32."""
    note("q, k, v: padded [B, H, S, D] packed into [T, H, D] (copy, outside the library call)")
    cat = lambda x: torch.cat([x[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)]).contiguous()
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=q.device)
    return cat(q), cat(k), cat(v), cu


def unpack_padded(o_packed, lse_packed, lengths: list[int], like: torch.Tensor, out=None, lse=None):
    """Packed results (o [T, H, D], lse [T, H] natural log or None) into padded [B, H, S, ...]
    buffers; rows past a sequence's length are zeros with LSE -inf, as the contract says."""
    note("padded: result unpacked into the caller's buffers (copy), rows past a length written as zeros (LSE -inf)")
    o_all = out if out is not None else torch.empty_like(like)
    o_all.zero_()
    l_all = None
    if lse_packed is not None:
        l_all = lse if lse is not None else torch.empty(like.shape[:3], dtype=torch.float32, device=like.device)
        l_all.fill_(float("-inf"))
    start = 0
    for b, n in enumerate(lengths):
        o_all[b, :, :n] = o_packed[start:start + n].transpose(0, 1)
        if l_all is not None:
            l_all[b, :, :n] = lse_packed[start:start + n].transpose(0, 1)
        start += n
    return o_all, l_all


class LibraryContractError(RuntimeError):
    """A library returned something other than what its documentation says (a finding about the
    library: the case fails with this message, at the launch stage)."""


def documented(library: str, name: str, t: torch.Tensor, shape: tuple) -> torch.Tensor:
    """``t`` if it has the documented shape, else a ``LibraryContractError`` (never a silent reshape)."""
    if tuple(t.shape) != tuple(shape):
        raise LibraryContractError(f"{library} returned {name} of shape {list(t.shape)}; documented {list(shape)}")
    return t
