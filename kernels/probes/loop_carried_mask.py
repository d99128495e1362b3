"""Probe loop_carried_mask (porting_notes.md#loop_carried_mask): a mask computed before a loop
and recomputed at the end of each trip for the next one, so the mask is a loop-carried value,
the way a port that "advances" its mask with its pointers is written.

original: ``mask = offs < seq_len`` before the loop; at the end of trip ``i``,
    ``mask = (i + 1) * PAGE + offs < seq_len``. Every triton-ascend version measured fails with
    2 or more trips (3.2.0rc2 SIGSEGV, 3.2.0rc4 SIGABRT "encountered AddPtrOp produced by
    unsupported operation", 3.2.0 "failed to legalize unresolved materialization from () to
    'tensor<16xi1>'"); one trip compiles.
rewrite: the mask computed from the trip index at the top of each trip (nothing carried).
"""
import triton
import triton.language as tl

from .loop_const_trip import _page_sum_tail_mask, page_sum


@triton.jit
def _page_sum_carried_mask(X, O, seq_len, PAGES: tl.constexpr, PAGE: tl.constexpr):
    offs = tl.arange(0, PAGE)
    acc = tl.zeros([PAGE], dtype=tl.float32)
    mask = offs < seq_len
    for i in range(PAGES):
        x = tl.load(X + i * PAGE + offs, mask=mask, other=0.0)
        acc += x.to(tl.float32)
        mask = (i + 1) * PAGE + offs < seq_len
    tl.store(O + offs, acc)


def original(x, page, out=None):
    """Per-slot sums over the pages of ``x``; the mask carried from trip to trip."""
    return page_sum(_page_sum_carried_mask, x, page, out, "loop_carried_mask")


def rewrite(x, page, out=None):
    """The same sums with the mask recomputed from the trip index."""
    return page_sum(_page_sum_tail_mask, x, page, out, "loop_carried_mask")
