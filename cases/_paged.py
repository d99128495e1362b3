"""Input generation for the paged and sparse decode families: FlashInfer-style page tables,
paged KV caches, and sparse token selections.

Slots that hold no token of any sequence (the tail of a last page, pool pages no sequence
owns) are filled with NaN: a kernel that lets them touch its result (even as ``0 * NaN``
after masking only the scores) fails, as it would on a cache fresh from ``torch.empty``.
"""
from __future__ import annotations

import hashlib
import itertools
import math

import torch

from ._attention import device_randn, on_accelerator, randn
from ._dims import CONTIG, draw_length, fused_rows, pool_slice, row_pad

PLACEMENTS = ("ordered", "shuffled", "scattered")
#: Sequences that share their first pages (a prefix cache: one physical copy of a common prompt).
SHARED = "shared"


def pages_for(length: int, page_size: int) -> int:
    return math.ceil(length / page_size)


def page_table(gen: torch.Generator, lengths, page_size: int, placement: str, pool: int | None = None,
               pages=None):
    """(indptr, indices, last_page_len, num_pages_total) for sequences of the given lengths.

    ordered: pages 0..n-1 in sequence order; shuffled: a permutation of them; scattered: drawn
    without repetition from a pool of ``pool`` pages (default 4x what the batch needs, plus 3);
    given: ``pages`` itself, in a pool of ``pool`` pages (a FlashInfer-Trace workload's own page
    table, attnsuite/flashinfer_trace; pages may be shared between sequences, as with a prefix cache);
    shared: every non-empty sequence's first pages, as many as the shortest of them fills, are
    the same physical pages (a prefix cache), the rest its own, all at shuffled places in a pool
    with 3 spare pages.
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
    elif placement == SHARED:
        owners = [c for n, c in zip(lengths, counts) if n]
        common = min((n // page_size for n in lengths if n), default=0)
        num_pages = common + sum(c - common for c in owners) + 3
        perm = torch.randperm(num_pages, generator=gen)
        prefix, rest, parts = perm[:common], iter(perm[common:].tolist()), []
        for n, c in zip(lengths, counts):
            if c:
                parts.append(torch.cat([prefix, torch.tensor([next(rest) for _ in range(c - common)],
                                                             dtype=perm.dtype)]))
        indices = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64)
    elif placement == "given":
        indices, num_pages = torch.tensor(pages, dtype=torch.int64).reshape(-1), pool
        if len(indices) != total:
            raise ValueError(f"given page table has {len(indices)} pages, the lengths need {total}")
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


#: Caches of at least this many elements draw their values from the cache's shape and dtype
#: alone (not the case's generator), so every case of one cache geometry (a benchmark's kept-
#: ratio sweep, a family's bench cases, the three paged families at the bench shape) shares
#: them. On the host they are drawn once per process and copied, instead of drawn again for each
#: case (1G values); on an accelerator they are drawn again, in milliseconds, on the device.
SHARED_FROM = 1 << 26
_SHARED: dict = {}


def shared_values(shape: tuple, dtype: torch.dtype, device=None) -> torch.Tensor:
    """Random values that depend on (shape, dtype) and the kind of device only. On the host the
    last ones drawn are kept (one cache's worth of host memory) and a fresh copy is returned each
    time; device memory is never held between cases."""
    key = (tuple(shape), str(dtype))
    seed = int.from_bytes(hashlib.sha256(repr(key).encode()).digest()[:8], "little") & (2**63 - 1)
    if on_accelerator(device):
        drawn = device_randn(seed, shape, dtype, device)
        if drawn is not None:
            return drawn
    if key not in _SHARED:
        _SHARED.clear()
        _SHARED[key] = randn(torch.Generator().manual_seed(seed), shape, dtype)
    return _SHARED[key].to(device or "cpu", copy=True)  # a copy on the host too: the caller masks it in place


def paged_cache(gen, lengths, page_size, Hkv, D, dtype, layout, indptr, indices, num_pages, device=None):
    """A random paged cache whose slots outside every sequence hold NaN; a bulk cache is drawn on
    ``device`` when one is given (cases/_attention.randn)."""
    shape = cache_shape(num_pages, Hkv, page_size, D, layout)
    # An fp8 cache is the fp16 draw rounded to e4m3 (the same values as an fp16 cache of this
    # geometry, to e4m3's precision).
    draw = torch.float16 if dtype == FP8 else dtype
    if math.prod(shape) >= SHARED_FROM:
        cache = shared_values(shape, draw, device)
    else:
        cache = randn(gen, shape, draw, device)
    cache = cache.to(dtype)
    used = torch.zeros(num_pages, page_size, dtype=torch.bool)
    for b, n in enumerate(lengths):  # per sequence, not per token: marks its pages' used slots
        pages = indices[indptr[b]:indptr[b + 1]].long()
        # |=: a page shared by two sequences (a given page table) keeps the slots either uses.
        used[pages] |= (torch.arange(len(pages) * page_size) < n).view(-1, page_size)
    unused = ~used.to(cache.device)[:, None, None, :, None]
    if dtype == FP8:
        fill_fp8_nan(token_view(cache, layout), unused)
    else:
        token_view(cache, layout).masked_fill_(unused, float("nan"))
    return cache


FP8 = torch.float8_e4m3fn
#: e4m3fn's two NaN encodings (it has no infinities): +NaN and -NaN.
FP8_NAN_BITS = (0x7F, 0xFF)


def fill_fp8_nan(cache: torch.Tensor, where: torch.Tensor) -> None:
    """Write e4m3fn NaN bit patterns into the slots of an fp8 ``cache`` where ``where`` holds
    (broadcastable; the slot axis is -2), alternating 0x7f and 0xff from slot to slot, so a
    kernel that lets either encoding through (or decodes it as a number) shows. fp8 tensors have
    no masked_fill: the fill goes through the byte view."""
    slot = torch.arange(cache.shape[-2], device=cache.device)[:, None]
    raw = cache.view(torch.uint8)
    raw.masked_fill_(where & (slot % 2 == 0), FP8_NAN_BITS[0])
    raw.masked_fill_(where & (slot % 2 == 1), FP8_NAN_BITS[1])


def slot_positions(indptr: torch.Tensor, indices: torch.Tensor, lengths, page_size: int,
                   num_pages: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(position, length) [num_pages, page_size] int64: the logical position of the token each
    cache slot holds and the length of its sequence; -1 and 0 for slots no token owns."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64)
    entries = torch.arange(int(indptr[-1]))
    seq = torch.searchsorted(indptr.to(torch.int64), entries, right=True) - 1
    first = (entries - indptr.to(torch.int64)[seq]) * page_size
    pos = torch.full((num_pages, page_size), -1, dtype=torch.int64)
    length = torch.zeros((num_pages, page_size), dtype=torch.int64)
    pos[indices.long()] = first[:, None] + torch.arange(page_size)[None, :]
    length[indices.long()] = lengths[seq][:, None].expand(-1, page_size)
    owned = (pos >= 0) & (pos < length)
    return torch.where(owned, pos, -1), torch.where(owned, length, 0)


def dense_to_cache(k: torch.Tensor, v: torch.Tensor, page_size: int, layout: str, indices: torch.Tensor,
                   num_pages: int) -> torch.Tensor:
    """Write dense k/v [B, Hkv, S, D] into pages: sequence b owns ``n = ceil(S / page_size)``
    pages, ``indices[b * n : (b + 1) * n]`` in order; slots past S hold NaN."""
    B, Hkv, S, D = k.shape
    n = pages_for(S, page_size)
    cache = torch.full(cache_shape(num_pages, Hkv, page_size, D, layout), float("nan"), dtype=k.dtype,
                       device=k.device)
    view = token_view(cache, layout)
    for part, x in ((0, k), (1, v)):
        padded = torch.full((B, Hkv, n * page_size, D), float("nan"), dtype=k.dtype, device=k.device)
        padded[:, :, :S] = x
        pages = padded.view(B, Hkv, n, page_size, D).transpose(1, 2).reshape(B * n, Hkv, page_size, D)
        view[indices.long().to(k.device), part] = pages
    return cache


def selection(gen, lengths, Hq: int, keep: float, *, order: str = "shuffled", duplicates: bool = False,
              empty_rows: bool = False, pad: str = "-1", extra: int = 0):
    """(sparse_ind [B, Hq, L_max], sparse_nnz [B, Hq]) choosing ~keep of each sequence's tokens
    per query head.

    keep == 1.0 selects every token exactly once. ``duplicates`` draws with replacement;
    ``order`` 'sorted' or 'shuffled'; ``empty_rows`` forces nnz = 0 on some heads; entries past
    nnz are -1 (``pad='-1'``), out-of-range garbage (``pad='garbage'``) or stale in-range
    positions of the sequence (``pad='stale'``, -1 for an empty sequence), all to be ignored;
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
    if pad == "stale":
        n_of_row = torch.tensor(lengths, dtype=torch.int64).repeat_interleave(Hq)[:, None]
        ind = (torch.rand((B * Hq, l_max), generator=gen) * n_of_row).long().to(torch.int32)
        ind = torch.where(n_of_row > 0, ind, -1).to(torch.int32)
    else:
        ind = torch.full((B * Hq, l_max), -1 if pad == "-1" else 10**6, dtype=torch.int32)
    for i, r in enumerate(rows):
        ind[i, :len(r)] = r.to(torch.int32)
    return ind.view(B, Hq, l_max), nnz


#: Views of a paged cache: a page and head slice of a larger pool (q from a fused projection),
#: and rows wider than D.
PAGED_VIEWS = ("pool", "rowpad")
PAGE_SIZES = (1, 16, 64, 256)


def paged_views(view: str, q, cache, layout: str) -> tuple:
    if view == CONTIG:
        return q, cache
    if view == "pool":
        B, Hq, D = q.shape
        Hkv = cache.shape[2] if layout == "HND" else cache.shape[3]
        return fused_rows(q, q.new_full((B, 2 * Hkv, D), float("nan")))[0], pool_slice(cache, layout)
    if view == "rowpad":
        return row_pad(q), row_pad(cache)
    raise ValueError(f"unknown view {view!r}")


def draw_page_table(rng, hi: int = 1100) -> tuple:
    """(page_size, placement, layout, lengths) for the fuzz profile: several sequences, some
    empty, lengths at tile residues, page boundaries and past the split threshold."""
    P = rng.choice(PAGE_SIZES)
    if P == 1:
        hi = min(hi, 200)  # one loop step per token: the interpreter's cost
    lengths = []
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.1:
            lengths.append(0)
        elif r < 0.4:  # a short last page: whole pages plus a few tokens
            lengths.append(min(hi, P * rng.randint(0, max(0, hi // P - 1)) + rng.randint(1, max(1, min(P, 128)))))
        else:
            lengths.append(draw_length(rng, hi))
    return P, rng.choice(PLACEMENTS), rng.choice(("HND", "NHD")), tuple(lengths)
