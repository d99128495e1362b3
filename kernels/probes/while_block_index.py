"""Probe while_block_index (porting_notes.md#while_block_index): a block-sparse attention tile
that walks its row of listed KV blocks with a ``while`` loop, reloading the next block index until
the padding value, as the first block_sparse kernel did.

One program computes ``o = softmax(q k^T * scale) v`` for a [BM, D] query tile over the keys of
the listed blocks (block ids ascending, padded with ``PAD``; the last block may be partial).

original: ``blk = tl.load(ROW); while blk != PAD: ...; j += 1; blk = tl.load(ROW + j)``. With the
    block_sparse kernel's D=64 tiles (BM=128, BN=64) the bishengir of triton-ascend 3.2.0rc4 and
    3.2.0 fails with "'hivm.hir.copy' op Unsupported copy from cbuf to cbuf!". rc2 compiles these
    tiles; at D=128 it fails too, but with one of two messages from run to run, which a strict
    ledger entry cannot hold (porting_notes.md#while_block_index).
rewrite: the number of listed blocks counted on the host and a bounded ``for j in range(n)``.
"""
import torch
import triton
import triton.language as tl

from kernels._checks import DOT_INPUT_PRECISION, LaunchPlan, launch
from kernels._softmax import online_softmax_step

PAD = 65535
LOG2E = 1.4426950408889634


@triton.jit
def _listed_blocks_while(Q, K, V, O, ROW, S, n_listed, qk_scale, PAD: tl.constexpr, BKV: tl.constexpr,
                         BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, DOT: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BM], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    j = 0
    blk = tl.load(ROW)
    while blk != PAD:
        kv_start = blk * BKV
        kv_len = tl.minimum(BKV, S - kv_start)
        for n0 in range(0, kv_len, BN):
            cols = kv_start + n0 + offs_n
            col_ok = (n0 + offs_n) < kv_len
            k = tl.load(K + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            v = tl.load(V + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            m_i, l_i, acc = online_softmax_step(q, k, v, col_ok[None, :], m_i, l_i, acc, qk_scale, DOT)
        j += 1
        blk = tl.load(ROW + j)
    tl.store(O + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty))


@triton.jit
def _listed_blocks_counted(Q, K, V, O, ROW, S, n_listed, qk_scale, PAD: tl.constexpr, BKV: tl.constexpr,
                           BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, DOT: tl.constexpr):
    offs_m = tl.arange(0, BM)
    offs_n = tl.arange(0, BN)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BM], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BM], dtype=tl.float32)
    acc = tl.zeros([BM, D], dtype=tl.float32)
    for j in range(0, n_listed):
        kv_start = tl.load(ROW + j) * BKV
        kv_len = tl.minimum(BKV, S - kv_start)
        for n0 in range(0, kv_len, BN):
            cols = kv_start + n0 + offs_n
            col_ok = (n0 + offs_n) < kv_len
            k = tl.load(K + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            v = tl.load(V + cols[:, None] * D + offs_d[None, :], mask=col_ok[:, None], other=0.0)
            m_i, l_i, acc = online_softmax_step(q, k, v, col_ok[None, :], m_i, l_i, acc, qk_scale, DOT)
    tl.store(O + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty))


def _attend(kernel, q, k, v, row, bkv: int, block_n: int, out):
    BM, D = q.shape
    S = k.shape[0]
    if row.dtype != torch.int32 or row.dim() != 1:
        raise TypeError("while_block_index: row must be an int32 vector")
    n_listed = int((row != PAD).sum())
    if n_listed == 0 or n_listed == row.numel() or bool((row[:n_listed] == PAD).any()):
        raise ValueError("while_block_index: row must list >= 1 block, then end in PAD padding")
    if out is None:
        out = torch.empty_like(q)
    args = (q.contiguous(), k.contiguous(), v.contiguous(), out, row.contiguous(), S, n_listed,
            LOG2E / D ** 0.5)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=args,
                      meta=dict(PAD=PAD, BKV=bkv, BM=BM, BN=block_n, D=D, DOT=DOT_INPUT_PRECISION)))
    return out


def original(q, k, v, row, bkv, block_n, out=None):
    """Attention of one query tile over the listed blocks, walked with ``while``."""
    return _attend(_listed_blocks_while, q, k, v, row, bkv, block_n, out)


def rewrite(q, k, v, row, bkv, block_n, out=None):
    """The same attention over a host-counted ``for`` loop."""
    return _attend(_listed_blocks_counted, q, k, v, row, bkv, block_n, out)


def keys(row: torch.Tensor, bkv: int, S: int) -> torch.Tensor:
    """The key positions the listed blocks cover (for the reference)."""
    blocks = row[row != PAD].long()
    cols = (blocks[:, None] * bkv + torch.arange(bkv, device=row.device)[None, :]).flatten()
    return cols[cols < S]
