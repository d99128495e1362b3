"""Probe loop_reduction_bound (porting_notes.md#loop_reduction_bound): a loop whose trip count is
a reduction of a loaded tile, e.g. the number of blocks a block-sparse row lists, counted in the
kernel and then walked.

original: ``n = tl.sum((ids != PAD).to(tl.int32), axis=0)`` then ``for j in range(0, n)``.
    triton-ascend 3.2.0rc2's adapter fails ("failed to legalize unresolved materialization ...
    tensor<...xi32>") whatever the loop body holds; 3.2.0 compiles it.
rewrite: the count made on the host (``(ids != PAD).sum(1)``) and loaded per row as a scalar.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch

#: Fills a row past its listed ids.
PAD = 65535


@triton.jit
def _listed_sum_counted_here(IDS, V, COUNTS, O, W, BLOCK_W: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, BLOCK_W)
    ids = tl.load(IDS + r * W + offs, mask=offs < W, other=65535)
    n = tl.sum((ids != 65535).to(tl.int32), axis=0)
    acc = 0.0
    for j in range(0, n):
        acc += tl.load(V + tl.load(IDS + r * W + j)).to(tl.float32)
    tl.store(O + r, acc)


@triton.jit
def _listed_sum_counted_on_host(IDS, V, COUNTS, O, W, BLOCK_W: tl.constexpr):
    r = tl.program_id(0)
    n = tl.load(COUNTS + r)
    acc = 0.0
    for j in range(0, n):
        acc += tl.load(V + tl.load(IDS + r * W + j)).to(tl.float32)
    tl.store(O + r, acc)


def listed_sum(kernel, ids: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    """Per row of ``ids`` (int32 [R, W], listed ids first, then PAD), the fp32 sum of ``v`` over
    the listed ids."""
    if ids.dim() != 2 or ids.dtype != torch.int32 or v.dim() != 1:
        raise TypeError("loop_reduction_bound: ids must be int32 [R, W] and v a vector")
    R, W = ids.shape
    ids = ids.contiguous()
    counts = (ids != PAD).sum(1).to(torch.int32)
    if out is None:
        out = torch.empty((R,), dtype=torch.float32, device=ids.device)
    launch(LaunchPlan(kernel=kernel, grid=(R,), args=(ids, v.contiguous(), counts, out, W),
                      meta=dict(BLOCK_W=triton.next_power_of_2(W))))
    return out


def original(ids, v, out=None):
    """Listed sums, the loop bounded by a count reduced in the kernel."""
    return listed_sum(_listed_sum_counted_here, ids, v, out)


def rewrite(ids, v, out=None):
    """Listed sums, the loop bounded by a count made on the host."""
    return listed_sum(_listed_sum_counted_on_host, ids, v, out)
