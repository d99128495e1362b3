"""Shared pieces of the paged-KV decode kernels (paged, sparse paged, MagicPIG).

- Validation of the paged cache and of FlashInfer's CSR page table (shapes and dtypes first, then
  the data-dependent checks, which read the index tensors: one device sync).
- The host-side translation of logical token positions to physical row ids used by the sparse
  kernels (vectorized torch, one pre-pass, see ``sparse_rows``).
- The split-KV merge kernel and its plan.

Cache layouts: ``kv_cache[page, 0 | 1, ...]`` is K | V; "HND" is [P, 2, Hkv, page_size, D] and
"NHD" is [P, 2, page_size, Hkv, D]. Kernels only see four strides (page, K/V, head, slot), so one
kernel serves both layouts and any strides (last dimension contiguous).
"""
from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import torch

from ._checks import (FLOAT_DTYPES, check_index_tensor, check_nonempty, check_out_lse, check_tensor,
                      check_values_in_range)

LAYOUTS = ("HND", "NHD")
INT32_MAX = 2**31 - 1


# ----------------------------------------------------------------------------- layout helpers

def check_layout(fn: str, layout) -> str:
    if not isinstance(layout, str):
        raise TypeError(f"{fn}: layout must be a str, one of {LAYOUTS}, got {type(layout).__name__}")
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def kv_dims(kv_cache: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    """(num_pages_total, Hkv, page_size, D)."""
    P, _, a, b, D = kv_cache.shape
    return (P, a, b, D) if layout == "HND" else (P, b, a, D)


def kv_strides(kv_cache: torch.Tensor, layout: str) -> tuple[int, int, int, int]:
    """(stride_page, stride_kv, stride_head, stride_slot) in elements."""
    sp, skv, sa, sb, _ = kv_cache.stride()
    return (sp, skv, sa, sb) if layout == "HND" else (sp, skv, sb, sa)


def kv_dims_text(layout: str) -> str:
    return ("[num_pages, 2, Hkv, page_size, D]" if layout == "HND"
            else "[num_pages, 2, page_size, Hkv, D]")


# ----------------------------------------------------------------------------- validation

def check_q(fn: str, q, max_head_dim: int) -> tuple[int, int, int]:
    """q [B, Hq, D] in a float dtype, every dimension >= 1; returns (B, Hq, D)."""
    check_tensor(fn, "q", q, rank=3, dims="[B, Hq, D]", dtypes=FLOAT_DTYPES)
    check_nonempty(fn, "q", q, "[B, Hq, D]")
    B, Hq, D = q.shape
    if D > max_head_dim:
        raise ValueError(f"{fn}: q head dim D must be <= {max_head_dim}, got {D}")
    return B, Hq, D


def check_paged_kv(fn: str, q: torch.Tensor, kv_cache, layout: str,
                   other_dtypes: tuple = ()) -> tuple[int, int, int]:
    """kv_cache of q's dtype/device, [P, 2, ..., D] in ``layout``; returns (P, Hkv, page_size).
    ``other_dtypes``: cache dtypes accepted besides q's (an fp8 cache, kernels/_fp8.py).

    P == 0 (an empty pool) is allowed: then every sequence must have zero pages.
    """
    dims = kv_dims_text(layout)
    check_tensor(fn, "kv_cache", kv_cache, rank=5, dims=dims, dtypes=(q.dtype, *other_dtypes),
                 device=q.device, like="q")
    P, Hkv, page_size, D = kv_dims(kv_cache, layout)
    want = (None, 2, Hkv, page_size, q.shape[2]) if layout == "HND" else (None, 2, page_size, Hkv, q.shape[2])
    check_tensor(fn, "kv_cache", kv_cache, shape=want, dims=dims)
    if Hkv == 0 or page_size == 0:
        raise ValueError(f"{fn}: kv_cache must have Hkv >= 1 and page_size >= 1 {dims}, "
                         f"got {list(kv_cache.shape)}")
    return P, Hkv, page_size


def check_page_table(fn: str, B: int, device: torch.device, kv_page_indptr, kv_page_indices,
                     kv_last_page_len) -> None:
    """Structure of FlashInfer's CSR page table (``kv_last_page_len`` may be None): int32, on
    ``device``, ranks and shapes. The values are checked by ``check_index_values``."""
    check_index_tensor(fn, "kv_page_indptr", kv_page_indptr, device=device, rank=1, shape=(B + 1,),
                       dims="[B+1]")
    check_index_tensor(fn, "kv_page_indices", kv_page_indices, device=device, rank=1,
                       dims="[indptr[B]]")
    if kv_last_page_len is not None:
        check_index_tensor(fn, "kv_last_page_len", kv_last_page_len, device=device, rank=1,
                           shape=(B,), dims="[B]")


def check_sparse_indices(fn: str, B: int, Hq: int, device: torch.device, sparse_ind,
                         sparse_nnz) -> int:
    """Structure of sparse_ind [B, Hq, L_max] / sparse_nnz [B, Hq] (int32, device); returns L_max.
    The values are checked by ``check_index_values``."""
    check_index_tensor(fn, "sparse_ind", sparse_ind, device=device, rank=3, dims="[B, Hq, L_max]")
    check_tensor(fn, "sparse_ind", sparse_ind, shape=(B, Hq, None), dims="[B, Hq, L_max]")
    check_index_tensor(fn, "sparse_nnz", sparse_nnz, device=device, rank=2, shape=(B, Hq),
                       dims="[B, Hq]")
    return sparse_ind.shape[2]


def token_limits(page_size: int, kv_page_indptr: torch.Tensor,
                 kv_last_page_len: Optional[torch.Tensor]) -> torch.Tensor:
    """int32 [B]: number of valid logical positions per sequence (L_b, or page_size * pages_b
    when no last_page_len is given); 0 for a zero-page sequence (whatever its last_page_len).
    Computed in int64 and clamped to int32's range (``check_index_values`` rejects a sequence
    whose length does not fit)."""
    n_pages = kv_page_indptr[1:].to(torch.int64) - kv_page_indptr[:-1]
    if kv_last_page_len is None:
        limits = n_pages * page_size
    else:
        limits = torch.where(n_pages > 0, (n_pages - 1) * page_size + kv_last_page_len, 0)
    return limits.clamp_(0, INT32_MAX).to(torch.int32)


def read_scalars(scalars: Sequence[torch.Tensor]) -> list[float]:
    """The values of several 0-d tensors (one device, any dtypes) in one device sync, as floats
    (float64: exact for int32)."""
    groups: dict = {}
    for i, t in enumerate(scalars):
        groups.setdefault(t.dtype, []).append(i)
    parts = [torch.stack([scalars[i] for i in idx]).to(torch.float64) for idx in groups.values()]
    flat = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()
    out = [0.0] * len(scalars)
    for v, i in zip(flat, [i for idx in groups.values() for i in idx]):
        out[i] = v
    return out


def check_index_values(fn: str, num_pages: int, page_size: int, kv_page_indptr: torch.Tensor,
                       kv_page_indices: torch.Tensor, kv_last_page_len: Optional[torch.Tensor],
                       sparse_ind: Optional[torch.Tensor] = None,
                       sparse_nnz: Optional[torch.Tensor] = None,
                       extra_stats: Sequence[torch.Tensor] = (),
                       extra_ok: Optional[Callable[[list], bool]] = None,
                       extra_raise: Optional[Callable[[], None]] = None) -> int:
    """The data-dependent checks (inputs already structurally valid). Returns the largest page
    count of any sequence (the paged planner sizes its split by it).

    Page table: indptr[0] == 0, non-decreasing, indptr[B] == len(indices); page ids in
    [0, num_pages); last_page_len in [1, page_size] for sequences with >= 1 page and 0 for a
    sequence with none (docs/contract.md, "Bad input"). Sparse lists
    (if given): 0 <= nnz <= L_max; the first nnz entries of row (b, h) in [0, L_b) (or
    [0, page_size * pages_b) without last_page_len); entries past nnz are not looked at.
    ``extra_stats`` are further 0-d tensors read in the same sync; ``extra_ok(values)`` judges
    them and ``extra_raise()`` raises their message.

    Cost: a few reductions to min/max statistics on the device and ONE sync to read them (no
    per-condition syncs); only when something is wrong does a slower pass find the first
    offending element and raise a ValueError naming it.
    """
    n_idx = kv_page_indices.shape[0]
    # int64: an int32 difference wraps, and a table whose entries pass 2**31 would then look
    # non-decreasing and end at len(indices).
    n_pages = kv_page_indptr[1:].to(torch.int64) - kv_page_indptr[:-1]
    stats = [kv_page_indptr[0], kv_page_indptr[-1], *torch.aminmax(n_pages)]
    if n_idx:
        stats += list(torch.aminmax(kv_page_indices))
    if kv_last_page_len is not None:
        stats += list(torch.aminmax(torch.where(n_pages > 0, kv_last_page_len, 1)))
        stats.append(torch.where(n_pages > 0, 0, kv_last_page_len).abs().max())
    L_max = 0 if sparse_ind is None else sparse_ind.shape[2]
    if sparse_ind is not None:
        stats += list(torch.aminmax(sparse_nnz))
    if L_max:
        limits = token_limits(page_size, kv_page_indptr, kv_last_page_len)
        valid = torch.arange(L_max, device=sparse_ind.device, dtype=torch.int32) < sparse_nnz[:, :, None]
        stats.append(torch.where(valid, sparse_ind, 0).min())
        stats.append(torch.where(valid, sparse_ind - limits[:, None, None], -1).max())
    n_own = len(stats)
    vals = read_scalars(stats + list(extra_stats))
    v = iter(vals)
    first, total, np_min, np_max = next(v), next(v), next(v), next(v)
    # Kernels count a sequence's tokens in int32: pages_b * page_size must fit.
    ok = first == 0 and total == n_idx and np_min >= 0 and np_max * page_size <= INT32_MAX
    if n_idx:
        i_min, i_max = next(v), next(v)
        ok = ok and i_min >= 0 and i_max < num_pages
    if kv_last_page_len is not None:
        l_min, l_max, l_empty = next(v), next(v), next(v)
        ok = ok and l_min >= 1 and l_max <= page_size and l_empty == 0
    if sparse_ind is not None:
        z_min, z_max = next(v), next(v)
        ok = ok and z_min >= 0 and z_max <= L_max
    if L_max:
        t_min, rel_max = next(v), next(v)
        ok = ok and t_min >= 0 and rel_max < 0
    if extra_ok is not None:
        ok = ok and extra_ok(vals[n_own:])
    if ok:
        return max(0, int(np_max))

    # Slow path: name the first offence.
    indptr = kv_page_indptr.to(torch.int64)
    n_pages = indptr[1:] - indptr[:-1]
    if int(indptr[0]) != 0:
        raise ValueError(f"{fn}: kv_page_indptr[0] must be 0, got {int(indptr[0])}")
    if bool((n_pages < 0).any()):
        i = int((n_pages < 0).nonzero()[0, 0])
        raise ValueError(f"{fn}: kv_page_indptr must be non-decreasing, got indptr[{i}] = "
                         f"{int(indptr[i])} > indptr[{i + 1}] = {int(indptr[i + 1])}")
    if n_idx != int(indptr[-1]):
        raise ValueError(f"{fn}: kv_page_indices must have shape [indptr[B]] = [{int(indptr[-1])}], "
                         f"got {list(kv_page_indices.shape)}")
    longest = int(n_pages.max())
    if longest * page_size > INT32_MAX:
        b = int(n_pages.argmax())
        raise ValueError(f"{fn}: kv_page_indptr gives sequence {b} {longest} pages of {page_size} "
                         f"tokens, more than int32 token positions reach (2**31 - 1)")
    check_values_in_range(fn, "kv_page_indices", kv_page_indices, 0, num_pages, what="page ids")
    if kv_last_page_len is not None:
        check_values_in_range(fn, "kv_last_page_len", kv_last_page_len, 1, page_size,
                              where=n_pages > 0, closed=True)
        check_values_in_range(fn, "kv_last_page_len", kv_last_page_len, 0, 0, where=n_pages == 0,
                              closed=True, what="values of sequences with no page")
    if sparse_ind is not None:
        check_values_in_range(fn, "sparse_nnz", sparse_nnz, 0, L_max, closed=True,
                              what="values (0 <= nnz <= L_max)")
    if L_max:
        check_values_in_range(fn, "sparse_ind", sparse_ind, 0, limits[:, None, None], where=valid,
                              what="token positions (within the first nnz entries)")
    if extra_raise is not None:
        extra_raise()
    raise ValueError(f"{fn}: index tensors failed a data check")  # not reached


def check_outputs(fn: str, out, lse, return_lse, B: int, Hq: int, D: int, q: torch.Tensor,
                  inputs: dict) -> None:
    check_out_lse(fn, out, lse, return_lse, o_shape=(B, Hq, D), o_dims="[B, Hq, D]",
                  lse_shape=(B, Hq), lse_dims="[B, Hq]", like=q, inputs=inputs)


# ----------------------------------------------------------------------------- host translation

def row_unit(kv_cache: torch.Tensor, layout: str) -> int:
    """The unit (in elements) of a physical row id: the gcd of the page and slot strides (D*Hkv
    or D for a contiguous cache), so page * stride_page + slot * stride_slot == row * unit."""
    P, _, page_size, _ = kv_dims(kv_cache, layout)
    sp, _, _, ss = kv_strides(kv_cache, layout)
    unit = math.gcd(sp if P > 1 else 0, ss if page_size > 1 else 0)
    return max(unit, 1)


def check_row_ids_fit(fn: str, kv_cache: torch.Tensor, layout: str) -> None:
    """Physical row ids are int32: the largest one must fit (a shape-only check)."""
    P, _, page_size, _ = kv_dims(kv_cache, layout)
    sp, _, _, ss = kv_strides(kv_cache, layout)
    top = (max(P, 1) - 1) * sp + (page_size - 1) * ss
    if top // row_unit(kv_cache, layout) > INT32_MAX:
        raise ValueError(f"{fn}: kv_cache is too large for int32 physical row ids "
                         f"(shape {list(kv_cache.shape)}, strides {tuple(kv_cache.stride())})")


def sparse_rows(kv_cache: torch.Tensor, layout: str, kv_page_indptr: torch.Tensor,
                kv_page_indices: torch.Tensor, sparse_ind: torch.Tensor,
                sparse_nnz: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Logical token positions -> physical row ids, int32 [B, Hq, L_max] (contiguous), and the row
    unit: the K row of token t of sequence b for KV head hk starts at element
    ``rows[b, h, j] * unit + hk * stride_head`` (V: plus stride_kv).

    Why on the host: the in-kernel page lookup ``tl.load(pages + start + t // PAGE_SIZE)`` with a
    vector ``t`` does not compile on triton-ascend 3.2.0rc2 ("cannot div 0", then SIGSEGV) and
    later Ascend versions scalarize it; a contiguous page-table window plus ``tl.gather`` is
    float-only on A2/A3. One vectorized torch pass over [B, Hq, L_max] (about ten small int32
    device ops, no sync) costs 4 bytes per selected token against 4*D bytes of K/V rows, and
    leaves the kernel with a contiguous index load followed by a row gather. Entries at or past
    nnz (-1 padding or garbage) map to some in-range row and are never read by the kernel.
    int32 is exact here: ``check_row_ids_fit`` bounds the largest row id.
    """
    _, _, page_size, _ = kv_dims(kv_cache, layout)
    sp, _, _, ss = kv_strides(kv_cache, layout)
    unit = row_unit(kv_cache, layout)
    B, Hq, L_max = sparse_ind.shape
    n_idx = kv_page_indices.shape[0]
    if n_idx == 0 or L_max == 0:  # no page anywhere: every nnz is 0 and nothing is read
        return torch.zeros((B, Hq, L_max), dtype=torch.int32, device=sparse_ind.device), unit
    valid = torch.arange(L_max, device=sparse_ind.device, dtype=torch.int32) < sparse_nnz[:, :, None]
    t = torch.where(valid, sparse_ind, 0)
    page_in_seq = t // page_size
    slot = t - page_in_seq * page_size
    pos = (kv_page_indptr[:-1, None, None] + page_in_seq).clamp_(0, n_idx - 1)
    rows = kv_page_indices[pos] * (sp // unit) + slot * (ss // unit)
    return rows, unit
