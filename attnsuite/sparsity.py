"""The block-sparsity generator (docs/contract.md section 8), reusable by cases and benchmarks.

A sparse block index ``sabi [B, H, n_rows, n_cols]`` lists, per query block-row, the KV-block
columns it attends: ascending, right-padded with ``PAD`` (65535). Sparsity ``s`` is the fraction
of KV blocks dropped per row: each row keeps ``round(n_cols * (1 - s))`` randomly chosen blocks
(seeded), plus the frame blocks forced active on top of that budget:
``frame = (left_cols, right_cols, top_rows, bottom_rows)`` in blocks of the respective axis.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

PAD = 65535
BLOCK_SIZES = (128, 256, 512, 1024)
NO_FRAME = (0, 0, 0, 0)


def blocks_for_tokens(tokens: int, block_size: int) -> int:
    """The origin's rule to turn a token target into a block count: ceil(tokens / block_size)."""
    return -(-int(tokens) // int(block_size))


def kept_per_row(n_cols: int, sparsity: float) -> int:
    """Blocks each row keeps from the random budget: round(n_cols * (1 - s))."""
    return int(round(n_cols * (1.0 - float(sparsity))))


def frame_exceeds_budget(n_rows: int, n_cols: int, sparsity: float,
                         frame: Sequence[int] = NO_FRAME) -> Optional[str]:
    """The spec's skip rule: a reason string when the case is meaningless, else None.

    Skip when a row would keep fewer than one block, or when the frame alone (the forced
    left + right columns of an ordinary row) exceeds the ``1 - s`` share of a row.
    """
    keep = kept_per_row(n_cols, sparsity)
    if keep < 1:
        return (f"sparsity {sparsity} keeps round({n_cols} * {1 - sparsity:.3g}) = {keep} blocks "
                f"per row: fewer than 1")
    left, right = int(frame[0]), int(frame[1])
    forced = min(n_cols, left + right)
    if forced > (1.0 - float(sparsity)) * n_cols:
        return (f"frame forces {forced} of {n_cols} blocks per row (left {left} + right {right}), "
                f"more than 1 - s = {1 - sparsity:.3g} of a row")
    return None


def forced_mask(n_rows: int, n_cols: int, frame: Sequence[int] = NO_FRAME) -> torch.Tensor:
    """[n_rows, n_cols] bool: the frame blocks (first/last columns of every row, every column of
    the first/last rows)."""
    left, right, top, bottom = (int(f) for f in frame)
    if min(left, right, top, bottom) < 0:
        raise ValueError(f"block_index: frame entries must be >= 0, got {tuple(frame)}")
    cols = torch.arange(n_cols)
    rows = torch.arange(n_rows)
    col_forced = (cols < left) | (cols >= n_cols - right)
    row_forced = (rows < top) | (rows >= n_rows - bottom)
    return col_forced[None, :] | row_forced[:, None]


def mask_to_index(mask: torch.Tensor) -> torch.Tensor:
    """Bool [..., n_cols] -> int32 [..., n_cols]: the True columns ascending, then PAD."""
    n_cols = mask.shape[-1]
    cols = torch.arange(n_cols, dtype=torch.int64).expand_as(mask)
    idx = torch.where(mask, cols, torch.full_like(cols, PAD))
    return idx.sort(dim=-1).values.to(torch.int32)


def block_index(n_rows: int, n_cols: int, sparsity: float, *, frame: Sequence[int] = NO_FRAME,
                generator: torch.Generator, batch_heads: Sequence[int] = (1, 1)) -> torch.Tensor:
    """int32 [B, H, n_rows, n_cols] sparse block index.

    Every row keeps ``round(n_cols * (1 - s))`` blocks drawn (with ``generator``) from its
    non-frame columns, plus all its frame blocks; rows sorted ascending, right-padded with PAD.
    """
    if not 0.0 <= float(sparsity) <= 1.0:
        raise ValueError(f"block_index: sparsity must be in [0, 1], got {sparsity}")
    if n_rows < 1 or n_cols < 1:
        raise ValueError(f"block_index: n_rows and n_cols must be >= 1, got {n_rows}, {n_cols}")
    B, H = (int(x) for x in batch_heads)
    keep = kept_per_row(n_cols, sparsity)
    forced = forced_mask(n_rows, n_cols, frame).expand(B, H, n_rows, n_cols)
    # Random priority per block; frame blocks are taken anyway, so they do not use the budget.
    prio = torch.rand((B, H, n_rows, n_cols), generator=generator)
    prio = torch.where(forced, torch.full_like(prio, -1.0), prio)
    rank = prio.argsort(dim=-1, descending=True).argsort(dim=-1)
    chosen = (rank < keep) & ~forced
    return mask_to_index(chosen | forced)


def frame_from_tokens(tokens: int, block_shape: Sequence[int]) -> tuple[int, int, int, int]:
    """A frame of ``tokens`` on every side, in blocks: columns by BKV, rows by BQ."""
    bq, bkv = block_shape
    if not tokens:
        return NO_FRAME
    c, r = blocks_for_tokens(tokens, bkv), blocks_for_tokens(tokens, bq)
    return (c, c, r, r)


def grid_shape(S: int, block_shape: Sequence[int]) -> tuple[int, int]:
    """(n_rows, n_cols) = (ceil(S / BQ), ceil(S / BKV))."""
    return math.ceil(S / block_shape[0]), math.ceil(S / block_shape[1])
