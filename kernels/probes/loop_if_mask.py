"""Probe loop_if_mask (porting_notes.md#loop_if_mask): a loop over the pages of a sequence whose
body reassigns the load mask inside ``if i == num_pages - 1:`` (only the last page is partial).

The kernel sums a sequence of ``seq_len`` values page by page: ``out[j] = sum_i x[i * PAGE + j]``
over the ``i * PAGE + j < seq_len``, accumulated in fp32. ``num_pages = cdiv(seq_len, PAGE)`` is
a runtime argument, so the trip count is a runtime value, except that Triton specializes an
integer argument equal to 1 into a constant: one page compiles as a loop of trip count 1.

original: ``mask = offs < PAGE`` then, in ``if i == num_pages - 1:``, ``mask = i * PAGE + offs <
    seq_len``. triton-ascend 3.2.0rc2's adapter fails with "failed to legalize unresolved
    materialization from () to 'tensor<16xi1>'" when the trip count is 2 (1 compiles).
rewrite: the tail mask computed arithmetically on every iteration, no ``if``.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _page_sum_if_mask(X, O, seq_len, num_pages, PAGE: tl.constexpr):
    offs = tl.arange(0, PAGE)
    acc = tl.zeros([PAGE], dtype=tl.float32)
    for i in range(num_pages):
        mask = offs < PAGE
        if i == num_pages - 1:
            mask = i * PAGE + offs < seq_len
        x = tl.load(X + i * PAGE + offs, mask=mask, other=0.0)
        acc += x.to(tl.float32)
    tl.store(O + offs, acc)


@triton.jit
def _page_sum_tail_mask(X, O, seq_len, num_pages, PAGE: tl.constexpr):
    offs = tl.arange(0, PAGE)
    acc = tl.zeros([PAGE], dtype=tl.float32)
    for i in range(num_pages):
        mask = i * PAGE + offs < seq_len
        x = tl.load(X + i * PAGE + offs, mask=mask, other=0.0)
        acc += x.to(tl.float32)
    tl.store(O + offs, acc)


def _page_sum(kernel, x: torch.Tensor, page: int, out: torch.Tensor | None) -> torch.Tensor:
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"loop_if_mask: x must be a non-empty 1-d tensor, got shape {list(x.shape)}")
    if page < 1 or page & (page - 1):
        raise ValueError(f"loop_if_mask: page must be a power of two, got {page}")
    x = x.contiguous()
    seq_len = x.numel()
    if out is None:
        out = torch.empty((page,), dtype=torch.float32, device=x.device)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(x, out, seq_len, triton.cdiv(seq_len, page)),
                      meta=dict(PAGE=page)))
    return out


def original(x, page, out=None):
    """Per-slot sums over the pages of ``x`` (fp32 [page]); last-page mask set inside an ``if``."""
    return _page_sum(_page_sum_if_mask, x, page, out)


def rewrite(x, page, out=None):
    """The same sums with the tail mask ``i * PAGE + offs < seq_len`` on every page."""
    return _page_sum(_page_sum_tail_mask, x, page, out)
