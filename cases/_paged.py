"""Input generation for the paged and sparse decode families: FlashInfer-style page tables,
paged KV caches, and sparse token selections.

Slots that hold no token of any sequence (the tail of a last page, pool pages no sequence
owns) are filled with NaN: a kernel that lets them touch its result (even as ``0 * NaN``
after masking only the scores) fails, as it would on a cache fresh from ``torch.empty``.
"""
from __future__ import annotations

import itertools
import math

import torch

from ._attention import randn

PLACEMENTS = ("ordered", "shuffled", "scattered")


def pages_for(length: int, page_size: int) -> int:
    return math.ceil(length / page_size)


def page_table(gen: torch.Generator, lengths, page_size: int, placement: str, pool: int | None = None):
    """(indptr, indices, last_page_len, num_pages_total) for sequences of the given lengths.

    ordered: pages 0..n-1 in sequence order; shuffled: a permutation of them; scattered: drawn
    without repetition from a pool of ``pool`` pages (default 4x what the batch needs, plus 3).
    A zero-length sequence owns no page and gets last_page_len 0.
    """
    counts = [pages_for(n, page_size) for n in lengths]
    total = sum(counts)
    if placement == "ordered":
        indices, num_pages = torch.arange(total), max(total, 1)
    elif placement == "shuffled":
        indices, num_pages = torch.randperm(total, generator=gen), max(total, 1)
    elif placement == "scattered":
        num_pages = pool if pool is not None else 4 * total + 3
        indices = torch.randperm(num_pages, generator=gen)[:total]
    else:
        raise ValueError(f"unknown placement {placement!r}")
    indptr = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int32)
    last = torch.tensor([n - page_size * (c - 1) if c else 0 for n, c in zip(lengths, counts)],
                        dtype=torch.int32)
    return indptr, indices.to(torch.int32), last, num_pages


def cache_shape(num_pages: int, Hkv: int, page_size: int, D: int, layout: str) -> tuple:
    if layout == "HND":
        return (num_pages, 2, Hkv, page_size, D)
    if layout == "NHD":
        return (num_pages, 2, page_size, Hkv, D)
    raise ValueError(f"unknown layout {layout!r}")


def token_view(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """The cache as [num_pages, 2, Hkv, page_size, D] whatever its layout (a view, no copy)."""
    return cache if layout == "HND" else cache.transpose(2, 3)


def paged_cache(gen, lengths, page_size, Hkv, D, dtype, layout, indptr, indices, num_pages):
    """A random paged cache whose slots outside every sequence hold NaN."""
    cache = randn(gen, cache_shape(num_pages, Hkv, page_size, D, layout), dtype)
    used = torch.zeros(num_pages, page_size, dtype=torch.bool)
    for b, n in enumerate(lengths):  # per sequence, not per token: marks its pages' used slots
        pages = indices[indptr[b]:indptr[b + 1]].long()
        used[pages] = (torch.arange(len(pages) * page_size) < n).view(-1, page_size)
    token_view(cache, layout).masked_fill_(~used[:, None, None, :, None], float("nan"))
    return cache


def dense_to_cache(k: torch.Tensor, v: torch.Tensor, page_size: int, layout: str, indices: torch.Tensor,
                   num_pages: int) -> torch.Tensor:
    """Write dense k/v [B, Hkv, S, D] into pages: sequence b owns ``n = ceil(S / page_size)``
    pages, ``indices[b * n : (b + 1) * n]`` in order; slots past S hold NaN."""
    B, Hkv, S, D = k.shape
    n = pages_for(S, page_size)
    cache = torch.full(cache_shape(num_pages, Hkv, page_size, D, layout), float("nan"), dtype=k.dtype)
    view = token_view(cache, layout)
    for part, x in ((0, k), (1, v)):
        padded = torch.full((B, Hkv, n * page_size, D), float("nan"), dtype=k.dtype)
        padded[:, :, :S] = x
        pages = padded.view(B, Hkv, n, page_size, D).transpose(1, 2).reshape(B * n, Hkv, page_size, D)
        view[indices.long(), part] = pages
    return cache


def selection(gen, lengths, Hq: int, keep: float, *, order: str = "shuffled", duplicates: bool = False,
              empty_rows: bool = False, pad: str = "-1", extra: int = 0):
    """(sparse_ind [B, Hq, L_max], sparse_nnz [B, Hq]) choosing ~keep of each sequence's tokens
    per query head.

    keep == 1.0 selects every token exactly once. ``duplicates`` draws with replacement;
    ``order`` 'sorted' or 'shuffled'; ``empty_rows`` forces nnz = 0 on some heads; entries past
    nnz are -1 (``pad='-1'``) or out-of-range garbage (``pad='garbage'``) that must be ignored;
    ``extra`` widens L_max beyond every nnz.
    """
    B = len(lengths)
    nnz = torch.zeros(B, Hq, dtype=torch.int32)
    rows = []
    for b, n in enumerate(lengths):
        for h in range(Hq):  # case construction, not a reference: a loop here is fine
            count = 0 if n == 0 else (n if keep >= 1.0 else max(1, round(keep * n)))
            if empty_rows and (b + h) % 3 == 0:
                count = 0
            if duplicates and count:
                chosen = torch.randint(0, n, (count,), generator=gen)
            else:
                chosen = torch.randperm(n, generator=gen)[:count]
            if order == "sorted":
                chosen = chosen.sort().values
            nnz[b, h] = count
            rows.append(chosen)
    l_max = max(1, max(len(r) for r in rows) + extra)
    fill = -1 if pad == "-1" else 10**6
    ind = torch.full((B * Hq, l_max), fill, dtype=torch.int32)
    for i, r in enumerate(rows):
        ind[i, :len(r)] = r.to(torch.int32)
    return ind.view(B, Hq, l_max), nnz
