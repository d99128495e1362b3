"""Block-sparse non-causal prefill attention (docs/contract.md section 8) in Triton.

``sabi [B, H, ceil(S/BQ), ceil(S/BKV)]`` lists, per query block-row, the KV blocks it attends
(ascending, right-padded with 65535). ``block_shape = (BQ, BKV)`` is a run-time argument: the
kernel's tiles (BLOCK_M <= BQ, BLOCK_N <= BKV) are decoupled from the sparse block shape, so all
16 shapes run on one kernel source. ``block_sparse`` validates, asks ``block_sparse_plan`` for the
launch, then launches it.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._checks import (cdiv, DOT_INPUT_PRECISION, FLOAT_DTYPES, check_flag, check_index_tensor,
                      check_launchable, check_nonempty, check_out_lse, check_out_lse_aliases,
                      check_rows_fit_int32, check_scale, check_tensor, check_values_in_range,
                      is_interpret, is_live, launch,
                      LaunchPlan, next_pow2, on_ascend, use_fast_path)
from . import attn_fast
from ._grid import persistent, plan_grid
from ._softmax import online_softmax_step
from .prefill import prefill_config

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256
PAD = 65535
BLOCK_SIZES = (128, 256, 512, 1024)


@triton.jit
def _block_sparse_tile(
    Q, K, V, O, LSE, SABI, COUNTS,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    stride_ib, stride_ih, stride_ir, stride_ic,
    H, S, D, BQ, BKV, n_rows, qk_scale, pid_m, pid_bh,
    RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Query tile pid_m (BLOCK_M rows) of batch pid_bh // H, head pid_bh % H."""
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    row_start = pid_m * BLOCK_M
    # BLOCK_M divides BQ (both powers of two, BLOCK_M <= BQ): a tile lies in one block-row.
    brow = row_start // BQ
    offs_m = row_start + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < D
    io_mask = (offs_m[:, None] < S) & d_ok

    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qs + offs_d[None, :],
                mask=io_mask, other=0.0)
    k_base = K + b * stride_kb + h * stride_kh
    v_base = V + b * stride_vb + h * stride_vh
    row_ptr = SABI + b * stride_ib + h * stride_ih + brow.to(tl.int64) * stride_ir

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # A bounded loop over the row's listed blocks, counted on the host. A `while` reloading the
    # next entry until the padding value failed the Ascend compile at D=128 (rc2 and 3.2.0:
    # "'hivm.hir.copy' op Unsupported copy from cbuf to cbuf!" after a UB overflow).
    n_listed = tl.load(COUNTS + pid_bh * n_rows + brow)
    for j in range(0, n_listed):
        kv_start = tl.load(row_ptr + j * stride_ic) * BKV
        # Only the tiles of this block that hold keys < S (the last block may be partial), so
        # every visited tile has at least one valid key and the running max stays finite.
        kv_len = tl.minimum(BKV, S - kv_start)
        for n0 in range(0, kv_len, BLOCK_N):
            cols = kv_start + n0 + offs_n
            col_ok = (n0 + offs_n) < kv_len
            kv_mask = col_ok[:, None] & d_ok
            k = tl.load(k_base + cols[:, None].to(tl.int64) * stride_ks + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            v = tl.load(v_base + cols[:, None].to(tl.int64) * stride_vs + offs_d[None, :],
                        mask=kv_mask, other=0.0)
            m_i, l_i, acc = online_softmax_step(q, k, v, col_ok[None, :], m_i, l_i, acc, qk_scale,
                                                DOT_PRECISION)

    o = acc / l_i[:, None]
    tl.store(O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_os + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=io_mask)
    if RETURN_LSE:
        lse = (m_i + tl.log2(l_i)) * 0.6931471805599453
        tl.store(LSE + b * stride_lb + h * stride_lh + offs_m, lse, mask=offs_m < S)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=[
    "H", "S", "n_rows", "stride_lb", "stride_lh", "stride_ib", "stride_ih", "stride_ir",
    "stride_ic", "n_bh", "n_work", "n_programs",
])
def _block_sparse_fwd(
    Q, K, V, O, LSE, SABI, COUNTS,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    stride_ib, stride_ih, stride_ir, stride_ic,
    H, S, D, BQ, BKV, n_rows, qk_scale, n_bh, n_work, n_programs,
    RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PERSISTENT: tl.constexpr,
):
    if PERSISTENT:  # kernels/_grid.py
        # Batches and heads are the fast index. A tile's cost (its block-row's listed blocks) is
        # known only on the device, and masks make it vary by row far more than by head (a
        # block-causal sabi lists one block more per row): with rows fast, a program striding
        # by n_programs through a row count that shares a factor with it would keep landing on
        # the same rows, heavy or light, of every head.
        for work in range(tl.program_id(0), n_work, n_programs):
            _block_sparse_tile(Q, K, V, O, LSE, SABI, COUNTS, stride_qb, stride_qh, stride_qs,
                               stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs,
                               stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                               stride_ib, stride_ih, stride_ir, stride_ic,
                               H, S, D, BQ, BKV, n_rows, qk_scale, work // n_bh, work % n_bh,
                               RETURN_LSE, DOT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_D)
    else:
        _block_sparse_tile(Q, K, V, O, LSE, SABI, COUNTS, stride_qb, stride_qh, stride_qs,
                           stride_kb, stride_kh, stride_ks, stride_vb, stride_vh, stride_vs,
                           stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                           stride_ib, stride_ih, stride_ir, stride_ic,
                           H, S, D, BQ, BKV, n_rows, qk_scale, tl.program_id(0), tl.program_id(1),
                           RETURN_LSE, DOT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_D)


def block_sparse_config(S: int, D: int, block_shape: tuple, dtype: torch.dtype, interpret: bool,
                        ascend: bool = False) -> dict:
    """Tile sizes and launch meta: prefill's tiles, clamped to the sparse block shape.

    ``ascend``: prefill's npu tiles (64x32 up to D=128). With the 128x64 tiles of a GPU the
    D=128 cases took 89.6% of the unified buffer under the persistent loop (triton-ascend 3.2.0;
    94.1% on 3.2.0rc2, 84.1% and 92.2% before the loop); with 64x32, 49.7% (50.7% on rc2)."""
    cfg = prefill_config(S, D, dtype, interpret, ascend)
    bq, bkv = block_shape
    cfg["BLOCK_M"] = min(cfg["BLOCK_M"], bq, max(16, next_pow2(S)))
    cfg["BLOCK_N"] = min(cfg["BLOCK_N"], bkv, max(16, next_pow2(S)))
    return cfg


def counts_on_host(q: torch.Tensor) -> bool:
    """Whether the kernel planned for ``q`` reads the listed blocks per row from a tensor the
    caller makes (``block_counts``): the portable kernel. The CUDA fast path counts each row in
    the kernel (``kernels/_block_index.py``), so its call makes no tensor. The portable kernel
    cannot: triton-ascend 3.2.0rc2's adapter rejects a loop bounded by a reduction ("failed to
    legalize unresolved materialization ... tensor<256xi32>"), and a ``while`` over the row
    fails on Ascend too (porting_notes.md#while_block_index)."""
    return not (use_fast_path(q) and not persistent(q))


def block_sparse_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sabi: torch.Tensor,
                      out: torch.Tensor, lse: Optional[torch.Tensor], *, block_shape: tuple,
                      scale: float, interpret: Optional[bool] = None,
                      counts: Optional[torch.Tensor] = None) -> LaunchPlan:
    """The launch for already-validated inputs and allocated outputs (``lse`` None: no LSE).
    ``counts``: ``block_counts(sabi)`` when the caller made it already (only the portable
    kernel reads it: ``counts_on_host``)."""
    B, H, S, D = q.shape
    bq, bkv = (int(x) for x in block_shape)
    interpret = is_interpret() if interpret is None else interpret
    cfg = block_sparse_config(S, D, (bq, bkv), q.dtype, interpret, on_ascend(q))
    return_lse = lse is not None
    lse_arg = lse if return_lse else out
    lse_strides = (lse.stride(0), lse.stride(1)) if return_lse else (0, 0)
    strides = (q.stride(0), q.stride(1), q.stride(2),
               k.stride(0), k.stride(1), k.stride(2),
               v.stride(0), v.stride(1), v.stride(2),
               out.stride(0), out.stride(1), out.stride(2),
               *lse_strides,
               sabi.stride(0), sabi.stride(1), sabi.stride(2), sabi.stride(3),
               H, S, D, bq, bkv)
    if not counts_on_host(q):
        return _fast_plan(q, k, v, (q, k, v, out, lse_arg, sabi, *strides, sabi.shape[3],
                                    float(scale) * LOG2E),
                          lse is not None, (bq, bkv), scale, interpret)
    if counts is None:
        counts = block_counts(sabi)
    args = (q, k, v, out, lse_arg, sabi, counts, *strides, sabi.shape[2], float(scale) * LOG2E)
    # The portable kernel's query-row offsets along S are int32 (its key rows are int64).
    for name, t in (("q", q), ("out", out)):
        check_rows_fit_int32("block_sparse", name, t, 2)
    g = plan_grid((cdiv(S, cfg["BLOCK_M"]), B * H), q, vector=False)
    meta = dict(RETURN_LSE=return_lse, DOT_PRECISION=DOT_INPUT_PRECISION,
                PERSISTENT=g.persistent, **cfg)
    return LaunchPlan(kernel=_block_sparse_fwd, grid=g.grid,
                      args=args + (B * H, g.n_work, g.n_programs), meta=meta)


def _fast_plan(q, k, v, args, return_lse, block_shape, scale, interpret) -> LaunchPlan:
    """The CUDA fast path (``kernels/attn_fast.py``) over the portable kernel's arguments but
    the counts (its programs count their rows; ``n_cols`` in place of ``n_rows``): one flat
    loop over the listed blocks' tiles, descriptor loads, the scale in the exponent; prefill's
    fast tiles, clamped to the block."""
    B, H, S, D = q.shape
    bq, bkv = block_shape
    cfg = attn_fast.finish_config(attn_fast.fast_candidates(S, D, q.dtype)[0], S, D, (q, k, v),
                                  interpret)
    cfg["BLOCK_M"] = min(cfg["BLOCK_M"], bq, max(16, next_pow2(S)))
    cfg["BLOCK_N"] = min(cfg["BLOCK_N"], bkv, max(16, next_pow2(S)))
    if cfg["USE_TMA"] and q.device.type == "cuda":
        attn_fast.ensure_allocator()
    meta = dict(RETURN_LSE=return_lse, DOT_PRECISION=DOT_INPUT_PRECISION,
                NEG_SCALE=float(scale) < 0, **cfg)
    return LaunchPlan(kernel=attn_fast._block_sparse_fast, grid=(cdiv(S, cfg["BLOCK_M"]), B * H),
                      args=args, meta=meta)


def block_counts(sabi: torch.Tensor) -> torch.Tensor:
    """Listed blocks per row (validated rows are ascending, padded only at the right): a small
    device reduction per call, no sync."""
    return (sabi != PAD).sum(dim=-1, dtype=torch.int32)


def _check_block_shape(fn: str, block_shape) -> tuple[int, int]:
    ok = (isinstance(block_shape, (tuple, list)) and len(block_shape) == 2
          and all(isinstance(x, int) and not isinstance(x, bool) for x in block_shape))
    if not ok:
        raise TypeError(f"{fn}: block_shape must be a pair of ints (BQ, BKV), got {block_shape!r}")
    if any(x not in BLOCK_SIZES for x in block_shape):
        raise ValueError(f"{fn}: block_shape entries must each be one of {BLOCK_SIZES}, "
                         f"got {tuple(block_shape)}")
    return int(block_shape[0]), int(block_shape[1])


def check_sabi_rows(fn: str, sabi: torch.Tensor, n_cols: int) -> None:
    """Contents of a sparse block index (a device sync): entries in [0, n_cols) or PAD; every row
    lists at least one block; listed blocks strictly ascending, padding only at the right."""
    check_values_in_range(fn, "sabi", sabi, 0, n_cols, where=sabi != PAD,
                          what=f"entries (KV-block columns, or the padding value {PAD})")
    first = sabi[..., 0]
    if bool((first == PAD).any()):
        pos = [int(i) for i in (first == PAD).nonzero()[0]]
        raise ValueError(f"{fn}: every sabi row must list at least one KV block; row {pos} "
                         f"starts with the padding value {PAD}")
    if sabi.shape[-1] > 1:
        a, b = sabi[..., :-1], sabi[..., 1:]
        bad = (b != PAD) & (a >= b)
        if bool(bad.any()):
            pos = [int(i) for i in bad.nonzero()[0]]
            row = [int(x) for x in sabi[tuple(pos[:3])].tolist()]
            raise ValueError(f"{fn}: sabi rows must be strictly ascending, right-padded with {PAD}; "
                             f"row {pos[:3]} is not (at column {pos[3] + 1}): {row}")


def _validate(q, k, v, sabi, block_shape, scale, return_lse, out, lse, check_indices=True) -> tuple[int, int]:
    """Every check that reads no device memory but ``check_launchable`` (after the sabi rows'
    contents, as before); returns the block shape."""
    fn = "block_sparse"
    dims = "[B, H, S, D]"
    check_tensor(fn, "q", q, rank=4, dims=dims, dtypes=FLOAT_DTYPES)
    check_nonempty(fn, "q", q, dims)
    B, H, S, D = q.shape
    if D > MAX_HEAD_DIM:
        raise ValueError(f"{fn}: q head dim D must be <= {MAX_HEAD_DIM}, got {D}")
    for name, t in (("k", k), ("v", v)):
        check_tensor(fn, name, t, rank=4, dims=dims, dtypes=(q.dtype,), device=q.device, like="q",
                     shape=(B, H, S, D))
    bq, bkv = _check_block_shape(fn, block_shape)
    n_rows, n_cols = cdiv(S, bq), cdiv(S, bkv)
    check_index_tensor(fn, "sabi", sabi, device=q.device, rank=4, shape=(B, H, n_rows, n_cols),
                       dims="[B, H, ceil(S/BQ), ceil(S/BKV)]")
    check_flag(fn, "return_lse", return_lse)
    check_flag(fn, "check_indices", check_indices)
    check_scale(fn, scale, D)
    check_out_lse(fn, out, lse, return_lse, o_shape=(B, H, S, D), o_dims=dims, lse_shape=(B, H, S),
                  lse_dims="[B, H, S]", like=q, inputs={"q": q, "k": k, "v": v, "sabi": sabi})
    return bq, bkv


def block_sparse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sabi: torch.Tensor, *,
                 block_shape: tuple, scale: Optional[float] = None, return_lse: bool = False,
                 out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                 check_indices: bool = True,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-causal attention of q [B, H, S, D] over the KV blocks ``sabi`` lists -> (o, lse).

    ``lse`` is fp32 natural log [B, H, S] when ``return_lse``, else an empty fp32 tensor (numel 0).
    fp16/bf16/fp32; scale defaults to 1/sqrt(D); ``out``/``lse`` are written in place if given.
    ``check_indices`` (default on) verifies the sabi rows (in range, at least one block, strictly
    ascending, right-padded) before launch, a device sync; without it the call never waits for
    the device.
    """
    fn = "block_sparse"
    key = _CALLS.key((q, k, v, sabi), (out, lse), (block_shape, scale, return_lse, check_indices))
    slot = _CALLS.lookup(key)
    if slot is None:
        _validate(q, k, v, sabi, block_shape, scale, return_lse, out, lse, check_indices)
        if check_indices:
            check_sabi_rows(fn, sabi, sabi.shape[3])
        check_launchable(fn, "q", q)
        slot = _CALLS.validated(key)
    else:
        if out is not None or lse is not None:
            check_out_lse_aliases(fn, out, lse, {"q": q, "k": k, "v": v, "sabi": sabi})
        if check_indices:
            check_sabi_rows(fn, sabi, sabi.shape[3])
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if return_lse and lse is None:
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    counts = block_counts(sabi) if counts_on_host(q) else None
    tensors = (q, k, v, sabi, out, lse if return_lse else None, counts)
    bound = None if slot is None else slot.get(())
    if bound is not None:
        bound.launch(tensors, launch)
    else:
        plan = block_sparse_plan(q, k, v, sabi, out, lse if return_lse else None,
                                 block_shape=(int(block_shape[0]), int(block_shape[1])),
                                 scale=check_scale(fn, scale, q.shape[-1]), counts=counts)
        _CALLS.run(slot, (), plan, tensors, is_live(q), launch)
    if not return_lse:
        lse = torch.empty(0, dtype=torch.float32, device=q.device)
    return out, lse


_CALLS = CallCache("block_sparse")
