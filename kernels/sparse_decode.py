"""Sparse-token decode over contiguous KV in Triton (docs/contract.md section 5).

Each (batch b, query head h) attends its own multiset of token positions
``sparse_ind[b, h, :sparse_nnz[b, h]]`` of KV head ``h // G``. One program per (b, h) and split of
the index list gathers BLOCK_N whole K/V rows at a time (row gathers ``tok[:, None] * stride +
arange(D)``), scores them with an elementwise product and a sum over D (one query row: no
``tl.dot``, so no bf16-dot issue under the interpreter) and keeps an online softmax in fp32.
The loop runs only over the first ``nnz`` entries; a row with ``nnz == 0`` writes o = 0 and
lse = -inf. With more than one split, every split writes its normalised partial output and LSE
to fp32 scratch and a second kernel merges them (empty splits carry lse = -inf).

On CUDA (``_checks.use_fast_path``) the same kernel runs with ``PREFETCH`` and ``FUSED_MERGE``:
many short splits (about ``FAST_TILE["TARGET"]`` programs: a tile is two dependent loads, index
then rows, so the gather is latency-bound and wants every row of the list in flight at once),
index entries read ahead of the rows they address, and the last split program of each row
merging the partials (``_split.merge_in_last_program``), so the call is one launch.

Portable subset only: no block pointers or descriptors, no libdevice math, no Python globals in
kernels, arithmetic tail masks, int64 base offsets.

``sparse_decode`` validates everything (including the index contents), asks ``sparse_decode_plan``
for the launch chain, then launches it.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._grid import NPU_VECTOR_CORES, npu_cores, npu_splits, plan_grid
from ._split import merge_in_last_program, merge_meta, merge_plan, NO_MERGE, scratch_of, split_outputs
from ._checks import (cdiv, check_decode_qkv, check_flag, check_index_tensor, check_int_range,
                      check_launchable, check_out_lse, check_out_lse_aliases, check_scale,
                      check_values_in_range, is_interpret, is_live, launch, LaunchPlan, next_pow2,
                      on_ascend, use_fast_path)

LOG2E = 1.4426950408889634
MAX_HEAD_DIM = 256
# H100 has 132 SMs: split the index lists until (batch x heads x splits) gives about two waves.
TARGET_PROGRAMS = 256
MIN_SPLIT_LEN = 256


@triton.jit
def _sparse_decode_tile(
    Q, K, V, IND, NNZ, O, LSE, OUT, LSE_OUT, COUNTER,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ib, stride_ih,
    stride_nb, stride_nh,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    stride_outb, stride_outh, stride_lob, stride_loh,
    Hq, D, G, SPLIT_LEN, L_MAX, NUM_SPLITS, qk_scale, pid_bh, split,
    RETURN_LSE: tl.constexpr, PREFETCH: tl.constexpr, FUSED_MERGE: tl.constexpr,
    RETURN_LSE_OUT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr,
):
    """One split of one row's index list: pid_bh is batch * Hq + head."""
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D

    ind_base = IND + b * stride_ib + h * stride_ih
    start = split * SPLIT_LEN
    if PREFETCH:
        # CUDA fast path: the first tile's index entries are read in the same round trip as
        # nnz, and each tile's while the previous tile's rows are in flight, so a tile waits
        # for one memory latency (its rows) instead of three (nnz, indices, rows). Entries
        # past nnz are read (they lie inside sparse_ind) but never used as addresses.
        first = start + offs_n
        tok_next = tl.load(ind_base + first, mask=first < L_MAX, other=0)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    nnz = tl.load(NNZ + b * stride_nb + h * stride_nh)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh

    # This split covers slots [start, end) of the index list; slots >= nnz are never read.
    # Every trip has at least one valid slot, so the running max is finite after the first one.
    end = tl.minimum(start + SPLIT_LEN, nnz)
    m_i = tl.max(tl.full([BLOCK_N], float("-inf"), dtype=tl.float32), 0)  # base-2 running max
    l_i = tl.sum(tl.zeros([BLOCK_N], dtype=tl.float32), 0)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for n in range(start, end, BLOCK_N):
        slots = n + offs_n
        slot_ok = slots < end
        if PREFETCH:
            tok = tok_next.to(tl.int64)
            ahead = slots + BLOCK_N
            tok_next = tl.load(ind_base + ahead, mask=ahead < end, other=0)
        else:
            tok = tl.load(ind_base + slots, mask=slot_ok, other=0).to(tl.int64)
        row_mask = slot_ok[:, None] & d_ok[None, :]
        k = tl.load(k_base + tok[:, None] * stride_ks + offs_d[None, :], mask=row_mask, other=0.0)
        if PREFETCH:  # both gathers in flight before the math
            v = tl.load(v_base + tok[:, None] * stride_vs + offs_d[None, :], mask=row_mask, other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], 1) * qk_scale
        s = tl.where(slot_ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new)
        if not PREFETCH:
            v = tl.load(v_base + tok[:, None] * stride_vs + offs_d[None, :], mask=row_mask, other=0.0)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        m_i = m_new

    # Nothing selected in this split: l_i == 0, acc == 0 -> o = 0, lse = -inf.
    has = l_i > 0.0
    l_safe = tl.where(has, l_i, 1.0)
    o = acc / l_safe
    tl.store(O + b * stride_ob + h * stride_oh + split * stride_osplit + offs_d,
             o.to(O.dtype.element_ty), mask=d_ok)
    if RETURN_LSE:
        lse = tl.where(has, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
        tl.store(LSE + b * stride_lb + h * stride_lh + split * stride_lsplit, lse)
    if FUSED_MERGE:  # one row's splits: a group of one head
        merge_in_last_program(O, LSE, OUT, LSE_OUT, COUNTER + pid_bh, b, h, 1, D,
                              stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh,
                              stride_lsplit, stride_outb, stride_outh, stride_lob, stride_loh,
                              NUM_SPLITS, RETURN_LSE_OUT, 1, BLOCK_SPLITS, SPLIT_CHUNK, BLOCK_D)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=[
    "Hq", "G", "SPLIT_LEN", "L_MAX", "NUM_SPLITS", "stride_ib", "stride_ih", "stride_nb",
    "stride_nh", "stride_lb", "stride_lh", "stride_lsplit", "stride_lob", "stride_loh", "n_bh",
    "n_work", "n_programs",
])
def _sparse_decode_fwd(
    Q, K, V, IND, NNZ, O, LSE, OUT, LSE_OUT, COUNTER,
    stride_qb, stride_qh,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ib, stride_ih,
    stride_nb, stride_nh,
    stride_ob, stride_oh, stride_osplit,
    stride_lb, stride_lh, stride_lsplit,
    stride_outb, stride_outh, stride_lob, stride_loh,
    Hq, D, G, SPLIT_LEN, L_MAX, NUM_SPLITS, qk_scale, n_bh, n_work, n_programs,
    RETURN_LSE: tl.constexpr, PREFETCH: tl.constexpr, FUSED_MERGE: tl.constexpr,
    RETURN_LSE_OUT: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_SPLITS: tl.constexpr, SPLIT_CHUNK: tl.constexpr, PERSISTENT: tl.constexpr,
):
    """``PREFETCH`` and ``FUSED_MERGE``: the CUDA fast path (``sparse_decode_plan``)."""
    if PERSISTENT:  # kernels/_grid.py: rows are the fast index, so every row's first split goes first
        for work in range(tl.program_id(0), n_work, n_programs):
            _sparse_decode_tile(Q, K, V, IND, NNZ, O, LSE, OUT, LSE_OUT, COUNTER,
                                stride_qb, stride_qh, stride_kb, stride_kh, stride_ks, stride_vb,
                                stride_vh, stride_vs, stride_ib, stride_ih, stride_nb, stride_nh,
                                stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh,
                                stride_lsplit, stride_outb, stride_outh, stride_lob, stride_loh,
                                Hq, D, G, SPLIT_LEN, L_MAX, NUM_SPLITS, qk_scale,
                                work % n_bh, work // n_bh,
                                RETURN_LSE, PREFETCH, FUSED_MERGE, RETURN_LSE_OUT, BLOCK_N,
                                BLOCK_D, BLOCK_SPLITS, SPLIT_CHUNK)
    else:
        _sparse_decode_tile(Q, K, V, IND, NNZ, O, LSE, OUT, LSE_OUT, COUNTER,
                            stride_qb, stride_qh, stride_kb, stride_kh, stride_ks, stride_vb,
                            stride_vh, stride_vs, stride_ib, stride_ih, stride_nb, stride_nh,
                            stride_ob, stride_oh, stride_osplit, stride_lb, stride_lh,
                            stride_lsplit, stride_outb, stride_outh, stride_lob, stride_loh,
                            Hq, D, G, SPLIT_LEN, L_MAX, NUM_SPLITS, qk_scale,
                            tl.program_id(0), tl.program_id(1),
                            RETURN_LSE, PREFETCH, FUSED_MERGE, RETURN_LSE_OUT, BLOCK_N,
                            BLOCK_D, BLOCK_SPLITS, SPLIT_CHUNK)


def sparse_decode_config(B: int, Hq: int, L_max: int, D: int, dtype: torch.dtype, interpret: bool,
                         num_splits: Optional[int] = None, ascend: bool = False,
                         cores: int = NPU_VECTOR_CORES) -> dict:
    """Tiles, launch meta and the split of the index lists: BLOCK_N, BLOCK_D, num_warps,
    num_stages, SPLIT_LEN (a multiple of BLOCK_N), NUM_SPLITS (every split starts below L_max).
    ``ascend``: half the rows at D=256 (32 rows filled 94.7% of the unified buffer) and at
    D=128, and splits that spread the rows over ``cores`` persistent programs
    (``_grid.npu_splits``)."""
    block_d = max(16, next_pow2(D))
    if interpret:
        # Few, large programs: the interpreter's cost grows with program count.
        block_n, warps, stages = min(128, max(16, next_pow2(L_max))), 4, 1
        auto_splits = cdiv(L_max, 512)  # still exercises the merge for L_max > 512
    else:
        # Two gathered [BLOCK_N, BLOCK_D] tiles (K, V) live in registers as fp32. Ascend: 4096
        # elements a tile (with the persistent loop 64x128 took 94.1% of the UB, 32x128 67.4%).
        if ascend:
            block_n = min(64, max(16, 4096 // block_d))
        else:
            block_n = 64 if block_d <= 128 else 32
        if dtype == torch.float32:
            block_n //= 2
        warps, stages = 4, 2
        if ascend:
            auto_splits = npu_splits(B * Hq, cores, cdiv(L_max, MIN_SPLIT_LEN))
        else:
            auto_splits = min(cdiv(TARGET_PROGRAMS, B * Hq), cdiv(L_max, MIN_SPLIT_LEN))
    want = max(1, auto_splits if num_splits is None else num_splits)
    span = max(1, L_max)
    split_len = cdiv(cdiv(span, want), block_n) * block_n
    return dict(BLOCK_N=block_n, BLOCK_D=block_d, num_warps=warps, num_stages=stages,
                SPLIT_LEN=split_len, NUM_SPLITS=cdiv(span, split_len))


#: CUDA fast path (``sparse_decode_fast_config``): rows per gather, warps, stages, and the
#: programs the list split aims at (H100, kept 2% of S32000: 12.8 us at D128 with 320 programs of
#: one 64-row tile, 13.8 with 640 of 32 rows; 54.5 us at B4 D256, 82 with 16-row tiles). A tile is a chain of two dependent loads (indices, then
#: rows) that no loop can overlap within a program, so the gather is latency-bound and wants as
#: many small programs in flight as the GPU holds (~8 per SM), each merged in-kernel.
FAST_TILE = dict(BLOCK_N=64, num_warps=4, num_stages=2, TARGET=512)


def sparse_decode_fast_config(B: int, Hq: int, L_max: int, D: int, dtype: torch.dtype,
                              num_splits: Optional[int] = None,
                              config: Optional[dict] = None) -> dict:
    """The fast path's tiles and list split (same keys as ``sparse_decode_config``): about
    TARGET programs over (batch, head, split), splits of whole BLOCK_N tiles. ``config``
    overrides FAST_TILE's entries (the tile sweep, ``scripts/decode_variants.py``)."""
    cfg = {**FAST_TILE, **(config or {})}
    block_d = max(16, next_pow2(D))
    # fp32 rows are twice the bytes of a 16-bit tile: half as many.
    block_n = cfg["BLOCK_N"] if config and "BLOCK_N" in config else max(
        16, cfg["BLOCK_N"] // (2 if dtype == torch.float32 else 1))
    span = max(1, L_max)
    want = num_splits or max(1, min(cdiv(cfg["TARGET"], B * Hq), cdiv(span, block_n)))
    split_len = cdiv(cdiv(span, want), block_n) * block_n
    return dict(BLOCK_N=block_n, BLOCK_D=block_d, num_warps=cfg["num_warps"],
                num_stages=cfg["num_stages"], SPLIT_LEN=split_len,
                NUM_SPLITS=cdiv(span, split_len))


def sparse_decode_plan(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sparse_ind: torch.Tensor,
                       sparse_nnz: torch.Tensor, out: torch.Tensor, lse: Optional[torch.Tensor], *,
                       scale: float, num_splits: Optional[int] = None,
                       interpret: Optional[bool] = None, config: Optional[dict] = None) -> LaunchPlan:
    """The launch chain for validated inputs and allocated outputs (``lse`` None: no LSE).

    With more than one split, the plan allocates fp32 scratch for the partial results; the
    portable path's ``then`` is the merge launch, while on the CUDA fast path
    (``_checks.use_fast_path``) the last split program of each row merges (no second launch)
    and index entries are read ahead of the rows they address. ``config``: fast-path tile
    overrides (see ``sparse_decode_fast_config``).
    """
    B, Hq, _, D = q.shape
    Hkv = k.shape[1]
    L_max = sparse_ind.shape[2]
    interpret = is_interpret() if interpret is None else interpret
    ascend = on_ascend(q)
    fast = use_fast_path(q)
    if fast and not interpret:
        cfg = sparse_decode_fast_config(B, Hq, L_max, D, q.dtype, num_splits, config)
    else:  # the interpreter keeps its few large programs on either path
        cfg = sparse_decode_config(B, Hq, L_max, D, q.dtype, interpret, num_splits, ascend,
                                   npu_cores(q, vector=True) if ascend else NPU_VECTOR_CORES)
    splits = cfg.pop("NUM_SPLITS")
    split_len = cfg.pop("SPLIT_LEN")
    return_lse = lse is not None
    fused = fast and splits > 1
    o_dst, l_dst, write_lse, o_strides, l_strides = split_outputs(out, lse, splits, B, Hq, D)
    # Fused merge: a zeroed ticket per (batch, head), left at zero by the row's last program.
    counter = torch.zeros(B * Hq, dtype=torch.int32, device=q.device) if fused else out
    args = (q, k, v, sparse_ind, sparse_nnz, o_dst, l_dst, out, lse if return_lse else out, counter,
            q.stride(0), q.stride(1),
            k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2),
            sparse_ind.stride(0), sparse_ind.stride(1),
            sparse_nnz.stride(0), sparse_nnz.stride(1),
            *o_strides, *l_strides,
            out.stride(0), out.stride(1),
            *((lse.stride(0), lse.stride(1)) if return_lse else (0, 0)),
            Hq, D, Hq // Hkv, split_len, L_max, splits, float(scale) * LOG2E)
    g = plan_grid((B * Hq, splits), q, vector=True)
    merge = merge_meta(splits, 1, cfg["BLOCK_D"], cfg["num_warps"]) if fused else NO_MERGE
    meta = dict(RETURN_LSE=write_lse, PREFETCH=fast, FUSED_MERGE=fused,
                RETURN_LSE_OUT=fused and return_lse, PERSISTENT=g.persistent,
                BLOCK_SPLITS=merge["BLOCK_SPLITS"], SPLIT_CHUNK=merge["SPLIT_CHUNK"], **cfg)
    plan = LaunchPlan(kernel=_sparse_decode_fwd, grid=g.grid,
                      args=args + (B * Hq, g.n_work, g.n_programs), meta=meta,
                      workspace=scratch_of(out, o_dst, l_dst) + (((counter, True),) if fused else ()))
    if splits > 1 and not fused:
        plan.then = merge_plan(o_dst, l_dst, out, lse if return_lse else None, cfg["BLOCK_D"])
    return plan


def _validate(q, k, v, sparse_ind, sparse_nnz, scale, return_lse, out, lse, num_splits,
              check_indices) -> None:
    """Every check that reads no device memory but ``check_launchable`` (which came after the
    data checks, and still does)."""
    fn = "sparse_decode"
    B, Hq, Hkv, S, D = check_decode_qkv(fn, q, k, v, MAX_HEAD_DIM)
    check_index_tensor(fn, "sparse_ind", sparse_ind, device=q.device, rank=3,
                       shape=(B, Hq, None), dims="[B, Hq, L_max]")
    L_max = sparse_ind.shape[2]
    check_index_tensor(fn, "sparse_nnz", sparse_nnz, device=q.device, rank=2, shape=(B, Hq),
                       dims="[B, Hq]")
    check_flag(fn, "return_lse", return_lse)
    check_flag(fn, "check_indices", check_indices)
    check_scale(fn, scale, D)
    if num_splits is not None:
        check_int_range(fn, "num_splits", num_splits, 1, max(1, L_max))
    inputs = {"q": q, "k": k, "v": v, "sparse_ind": sparse_ind, "sparse_nnz": sparse_nnz}
    check_out_lse(fn, out, lse, return_lse, o_shape=(B, Hq, 1, D), o_dims="[B, Hq, 1, D]",
                  lse_shape=(B, Hq, 1), lse_dims="[B, Hq, 1]", like=q, inputs=inputs)


def _check_indices(q, k, sparse_ind, sparse_nnz) -> None:
    """Data-dependent (reads the index tensors; a device sync). Entries past nnz are ignored."""
    fn = "sparse_decode"
    L_max, S = sparse_ind.shape[2], k.shape[2]
    check_values_in_range(fn, "sparse_nnz", sparse_nnz, 0, L_max, closed=True,
                          what="entries (valid slots per row, at most L_max)")
    valid = torch.arange(L_max, device=q.device) < sparse_nnz.unsqueeze(-1)
    check_values_in_range(fn, "sparse_ind", sparse_ind, 0, S, where=valid,
                          what="entries within the first sparse_nnz of a row (token positions, < S)")


def sparse_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sparse_ind: torch.Tensor,
                  sparse_nnz: torch.Tensor, *, scale: Optional[float] = None,
                  return_lse: bool = False, out: Optional[torch.Tensor] = None,
                  lse: Optional[torch.Tensor] = None, num_splits: Optional[int] = None,
                  check_indices: bool = True,
                  ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Decode attention over selected tokens: q [B, Hq, 1, D], k/v [B, Hkv, S, D],
    sparse_ind [B, Hq, L_max] int32, sparse_nnz [B, Hq] int32
    -> (o [B, Hq, 1, D], lse [B, Hq, 1] fp32 | None).

    Query head h attends tokens ``sparse_ind[b, h, :sparse_nnz[b, h]]`` of KV head h // (Hq / Hkv):
    any order, duplicates counted as often as listed; entries past nnz are never read (-1 padding
    or anything else). nnz == 0 gives o = 0, lse = -inf. fp16/bf16/fp32, fp32 accumulation,
    scale defaults to 1/sqrt(D), natural-log LSE. ``num_splits`` (1..L_max) forces that many
    splits of the index lists (merged by a second launch); default: ``sparse_decode_config``.
    ``check_indices`` (default on) verifies 0 <= nnz <= L_max and 0 <= index < S before launch.
    """
    fn = "sparse_decode"
    tensors_in = (q, k, v, sparse_ind, sparse_nnz)
    key = _CALLS.key(tensors_in, (out, lse), (scale, return_lse, num_splits, check_indices))
    slot = _CALLS.lookup(key)
    if slot is None:
        _validate(q, k, v, sparse_ind, sparse_nnz, scale, return_lse, out, lse, num_splits,
                  check_indices)
        if check_indices:
            _check_indices(q, k, sparse_ind, sparse_nnz)
        check_launchable(fn, "q", q)
        slot = _CALLS.validated(key)
    else:
        if out is not None or lse is not None:
            check_out_lse_aliases(fn, out, lse, dict(zip(_INPUTS, tensors_in)))
        if check_indices:
            _check_indices(q, k, sparse_ind, sparse_nnz)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if return_lse and lse is None:
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    if not return_lse:
        lse = None
    tensors = tensors_in + (out, lse)
    bound = None if slot is None else slot.get(())
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = sparse_decode_plan(q, k, v, sparse_ind, sparse_nnz, out, lse,
                              scale=check_scale(fn, scale, q.shape[-1]), num_splits=num_splits)
    _CALLS.run(slot, (), plan, tensors, is_live(q), launch)
    return out, lse


_INPUTS = ("q", "k", "v", "sparse_ind", "sparse_nnz")
_CALLS = CallCache("sparse_decode")
