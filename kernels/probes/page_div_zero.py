"""Probe page_div_zero (porting_notes.md#page_div_zero): read the K rows of N consecutive
tokens of one sequence from a paged KV cache.

The cache holds pages of ``PAGE_SIZE`` rows; the sequence's page-table entries start at
``pages[page_start]``. Token ``t`` (``tok0 <= t < tok0 + N``) lives in row
``pages[page_start + t // PAGE_SIZE] * PAGE_SIZE + t % PAGE_SIZE``.

original: the page lookup in the kernel with a vector of token indices,
    ``tl.load(PAGES + page_start + token_idx // PAGE_SIZE)``. triton-ascend 3.2.0rc2's adapter
    reports "cannot div 0!" and crashes (SIGSEGV); later versions compile it into scalar loads.
rewrite: the row ids computed on the host by one vectorized torch expression (as
    ``kernels._paged.sparse_rows`` does for the sparse paged family); the kernel loads them
    contiguously and gathers rows.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _rows_page_lookup(K, PAGES, O, page_start, tok0, stride_kt, N: tl.constexpr, D: tl.constexpr,
                      PAGE_SIZE: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    token_idx = tok0 + offs_n
    page = tl.load(PAGES + page_start + token_idx // PAGE_SIZE)
    rows = page * PAGE_SIZE + token_idx % PAGE_SIZE
    k = tl.load(K + rows[:, None] * stride_kt + offs_d[None, :])
    tl.store(O + offs_n[:, None] * D + offs_d[None, :], k)


@triton.jit
def _rows_from_host(K, ROWS, O, stride_kt, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    rows = tl.load(ROWS + offs_n)
    k = tl.load(K + rows[:, None] * stride_kt + offs_d[None, :])
    tl.store(O + offs_n[:, None] * D + offs_d[None, :], k)


def token_rows(pages: torch.Tensor, page_start: int, tok0: int, n: int, page_size: int) -> torch.Tensor:
    """Physical row ids (int32 [n]) of tokens ``tok0 .. tok0 + n - 1``: the host-side page lookup."""
    t = torch.arange(tok0, tok0 + n, device=pages.device, dtype=torch.int64)
    return (pages[page_start + t // page_size].to(torch.int64) * page_size + t % page_size).to(torch.int32)


def _check(k, pages, page_start, tok0, n, page_size):
    (slots, D) = k.shape
    if pages.dtype != torch.int32:
        raise TypeError(f"page_div_zero: pages must be int32, got {pages.dtype}")
    for name, size in (("n", n), ("D", D), ("page_size", page_size)):
        if size < 1 or size & (size - 1):
            raise ValueError(f"page_div_zero: {name} must be a power of two, got {size}")
    last_entry = page_start + (tok0 + n - 1) // page_size
    if tok0 < 0 or page_start < 0 or last_entry >= pages.numel():
        raise ValueError(f"page_div_zero: tokens {tok0}..{tok0 + n - 1} need page-table entry "
                         f"{last_entry}, pages has {pages.numel()}")
    if slots % page_size:
        raise ValueError(f"page_div_zero: k must hold whole pages of {page_size} rows, got {slots}")
    return D


def original(k, pages, page_start, tok0, n, page_size, out=None):
    """Rows [n, D] of tokens ``tok0 ..`` with the page lookup done in the kernel."""
    D = _check(k, pages, page_start, tok0, n, page_size)
    k, pages = k.contiguous(), pages.contiguous()
    if out is None:
        out = torch.empty((n, D), dtype=k.dtype, device=k.device)
    launch(LaunchPlan(kernel=_rows_page_lookup, grid=(1,),
                      args=(k, pages, out, page_start, tok0, k.stride(0)),
                      meta=dict(N=n, D=D, PAGE_SIZE=page_size)))
    return out


def rewrite(k, pages, page_start, tok0, n, page_size, out=None):
    """The same rows with the page lookup done on the host (``token_rows``)."""
    D = _check(k, pages, page_start, tok0, n, page_size)
    k = k.contiguous()
    rows = token_rows(pages, page_start, tok0, n, page_size)
    if out is None:
        out = torch.empty((n, D), dtype=k.dtype, device=k.device)
    launch(LaunchPlan(kernel=_rows_from_host, grid=(1,), args=(k, rows, out, k.stride(0)),
                      meta=dict(N=n, D=D)))
    return out
