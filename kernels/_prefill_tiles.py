"""Launch tiles of the dense attention loop, shared by the portable prefill (``prefill``), the
CUDA fast path (``attn_fast``), and the varlen and block-sparse kernels built on the same loop.
It sits below all of them: none of them needs another to pick its tiles."""
from __future__ import annotations

import torch

from ._checks import next_pow2


#: Tile candidates (BLOCK_M, BLOCK_N, num_warps, num_stages) per (16-bit dtype?, BLOCK_D), the
#: first one the default. From an H100 sweep of the two bench shapes (~227 KB shared memory):
#: D=64 fp16 causal S=1024: 64x64 w4 s3 0.225 ms (128x64 w8 s3 0.240, 128x128 w4 s2 0.286);
#: D=128 bf16 causal S=16384: 128x128 w8 s3 521 TFLOP/s (128x64 w8 s3 502, 64x64 w4 s3 482).
_TILES = {
    (True, 64): [(64, 64, 4, 3), (64, 64, 4, 2), (128, 64, 8, 3), (64, 32, 4, 3), (128, 128, 8, 3)],
    (True, 128): [(128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 8, 4), (64, 64, 4, 3), (128, 128, 8, 2)],
    (True, 256): [(64, 32, 4, 2), (64, 64, 8, 2), (128, 32, 8, 2), (32, 32, 4, 2)],
    # fp32 tiles are twice the bytes.
    (False, 64): [(64, 64, 4, 3), (64, 32, 4, 3), (128, 32, 8, 2)],
    (False, 128): [(64, 32, 4, 2), (64, 64, 8, 2), (32, 32, 4, 2)],
    (False, 256): [(32, 32, 4, 2), (64, 16, 4, 2)],
}


def prefill_candidates(D: int, dtype: torch.dtype) -> list[dict]:
    """Launch configs the tuner may choose from on a GPU; the first is the default."""
    block_d = max(16, next_pow2(D))
    tiles = _TILES[(dtype.itemsize == 2, max(64, block_d))]
    return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d, num_warps=w, num_stages=st)
            for bm, bn, w, st in tiles]


def prefill_config(S: int, D: int, dtype: torch.dtype, interpret: bool, ascend: bool = False) -> dict:
    """Conservative tiles (BLOCK_M, BLOCK_N, BLOCK_D, num_warps, num_stages) that fit in every
    kernel built on this loop and on every backend: the block-sparse and varlen kernels use
    these, and so does ``prefill`` off CUDA (128x128 tiles at D=128 overflow an Ascend core's
    192 KB unified buffer). ``prefill`` on CUDA starts from ``prefill_candidates``.

    ``ascend`` (prefill, varlen and block-sparse): at most 64x32 (32x32 at D=256). 128x64 filled
    93-99.7% of the unified buffer on the bench shapes (triton-ascend 3.2.0, Ascend910B2); 64x32
    at most 73% there, but 90.1% at D=256. Not 64x64: with an LSE output bishengir planned 142%
    of the buffer for it, an overflow (porting_notes.md, "Unified buffer (UB) use")."""
    block_d = max(16, next_pow2(D))
    if interpret:
        # The interpreter's cost grows with program count, not tile size: few, large tiles.
        bm = min(128, max(16, next_pow2(S)))
        return dict(BLOCK_M=bm, BLOCK_N=bm, BLOCK_D=block_d, num_warps=4, num_stages=1)
    if dtype.itemsize == 2:
        bm, bn, warps, stages = {64: (128, 64, 4, 3), 128: (128, 64, 8, 3)}.get(
            max(64, block_d), (64, 32, 4, 2))
    else:
        bm, bn, warps, stages = {64: (64, 64, 4, 3), 128: (64, 32, 4, 2)}.get(
            max(64, block_d), (32, 32, 4, 2))
    if ascend:
        bm, bn = min(bm, 64 if block_d <= 128 else 32), min(bn, 32)
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d, num_warps=warps, num_stages=stages)
