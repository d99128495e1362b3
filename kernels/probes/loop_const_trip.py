"""Probe loop_const_trip (porting_notes.md#loop_if_mask): the loop of ``loop_if_mask`` with a
compile-time trip count: ``PAGES`` is a ``tl.constexpr``, so Triton sees ``range(2)`` or
``range(3)`` literally, as a kernel specialized per page count would.

original: ``mask = offs < PAGE`` then, in ``if i == PAGES - 1:``, ``mask = i * PAGE + offs <
    seq_len``. triton-ascend 3.2.0rc2's adapter fails for 2 and 3 pages ("failed to legalize
    unresolved materialization from () to 'tensor<16x...>'"); one page compiles.
rewrite: the tail mask computed arithmetically on every trip, no ``if``.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _page_sum_if_mask(X, O, seq_len, PAGES: tl.constexpr, PAGE: tl.constexpr):
    offs = tl.arange(0, PAGE)
    acc = tl.zeros([PAGE], dtype=tl.float32)
    for i in range(PAGES):
        mask = offs < PAGE
        if i == PAGES - 1:
            mask = i * PAGE + offs < seq_len
        x = tl.load(X + i * PAGE + offs, mask=mask, other=0.0)
        acc += x.to(tl.float32)
    tl.store(O + offs, acc)


@triton.jit
def _page_sum_tail_mask(X, O, seq_len, PAGES: tl.constexpr, PAGE: tl.constexpr):
    offs = tl.arange(0, PAGE)
    acc = tl.zeros([PAGE], dtype=tl.float32)
    for i in range(PAGES):
        mask = i * PAGE + offs < seq_len
        x = tl.load(X + i * PAGE + offs, mask=mask, other=0.0)
        acc += x.to(tl.float32)
    tl.store(O + offs, acc)


def page_sum(kernel, x: torch.Tensor, page: int, out: torch.Tensor | None, probe: str) -> torch.Tensor:
    """Per-slot fp32 sums over the pages of ``x`` with ``kernel``, the page count a constexpr."""
    if x.dim() != 1 or x.numel() == 0:
        raise ValueError(f"{probe}: x must be a non-empty 1-d tensor, got shape {list(x.shape)}")
    if page < 1 or page & (page - 1):
        raise ValueError(f"{probe}: page must be a power of two, got {page}")
    x = x.contiguous()
    seq_len = x.numel()
    if out is None:
        out = torch.empty((page,), dtype=torch.float32, device=x.device)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(x, out, seq_len),
                      meta=dict(PAGES=triton.cdiv(seq_len, page), PAGE=page)))
    return out


def original(x, page, out=None):
    """Per-slot sums over the pages of ``x``; last-page mask set inside an ``if``."""
    return page_sum(_page_sum_if_mask, x, page, out, "loop_const_trip")


def rewrite(x, page, out=None):
    """The same sums with the tail mask ``i * PAGE + offs < seq_len`` on every page."""
    return page_sum(_page_sum_tail_mask, x, page, out, "loop_const_trip")
