"""Variable-length prefill (docs/contract.md section 2): one Triton kernel, two layouts.

* ``prefill_padded``: q [B, Hq, S, D], k/v [B, Hkv, S, D] and ``lengths [B]`` int32 with
  ``1 <= lengths[b] <= S``. Keys at positions >= lengths[b] are masked; query rows >= lengths[b]
  are written as zeros (their LSE as -inf), never left unwritten.
* ``prefill_packed``: q [T, Hq, D], k/v [T, Hkv, D] and ``cu_seqlens [B+1]`` int32 (exclusive
  prefix sums: starts at 0, non-decreasing, ends at T); attention (causal or not) stays inside each
  sequence. The LSE is [T, Hq] (token-major, like q), fp32 natural log.

Both wrappers validate, ask a public ``*_plan`` for one fully specified launch, then launch it.
The kernel sees a sequence as (start token, length): padded passes start 0 and the batch stride;
packed passes start cu_seqlens[b] and a batch stride of 0.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ._softmax import online_softmax_step
from ._callcache import CallCache
from ._checks import (cdiv, DOT_INPUT_PRECISION, FLOAT_DTYPES, check_flag, check_gqa, check_index_tensor,
                      check_int_range, check_launchable, check_nonempty, check_out_lse,
                      check_out_lse_aliases, check_scale, check_tensor, check_values_in_range,
                      is_interpret, is_live, launch, LaunchPlan, on_ascend, use_fast_path)
from . import attn_fast
from ._grid import persistent, plan_grid
from .prefill import LOG2E, MAX_HEAD_DIM, prefill_config


@triton.jit
def _varlen_tile(
    Q, K, V, O, LSE, SEQ,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh, stride_ls,
    Hq, S, D, G, qk_scale, pid_m, pid_bh,
    PACKED: tl.constexpr, CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Query block pid_m of sequence b = pid_bh // Hq, head pid_bh % Hq."""
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    if PACKED:
        # SEQ = cu_seqlens: the sequence is tokens [start, end); only its own rows are written.
        start = tl.load(SEQ + b).to(tl.int64)
        seq_len = (tl.load(SEQ + b + 1) - tl.load(SEQ + b)).to(tl.int32)
        rows = seq_len
    else:
        # SEQ = lengths: rows [0, S) are all written, those >= seq_len as zeros.
        start = b * 0
        seq_len = tl.load(SEQ + b).to(tl.int32)
        rows = S
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d[None, :] < D
    row_ok = offs_m < seq_len
    tok_m = start + offs_m.to(tl.int64)

    q = tl.load(Q + b * stride_qb + h * stride_qh + tok_m[:, None] * stride_qs + offs_d[None, :],
                mask=row_ok[:, None] & d_ok, other=0.0)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh

    # A tile with no valid row skips the loop. In a tile with a valid row every row (the invalid
    # ones included) sees key 0, so the running max is finite after one step and nothing is NaN.
    tile_ok = pid_m * BLOCK_M < seq_len
    if CAUSAL:
        kv_end = tl.minimum(offs_m + 1, seq_len)
        hi = tl.minimum((pid_m + 1) * BLOCK_M, seq_len)
    else:
        kv_end = tl.zeros([BLOCK_M], dtype=tl.int32) + seq_len
        hi = seq_len
    hi = tl.where(tile_ok, hi, 0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for kv_start in range(0, hi, BLOCK_N):
        cols = kv_start + offs_n
        kv_mask = (cols[:, None] < seq_len) & d_ok
        tok_n = start + cols.to(tl.int64)
        k = tl.load(k_base + tok_n[:, None] * stride_ks + offs_d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_base + tok_n[:, None] * stride_vs + offs_d[None, :], mask=kv_mask, other=0.0)
        m_i, l_i, acc = online_softmax_step(q, k, v, cols[None, :] < kv_end[:, None], m_i, l_i, acc,
                                            qk_scale, DOT_PRECISION)

    l_safe = tl.where(row_ok, l_i, 1.0)
    o = tl.where(row_ok[:, None], acc / l_safe[:, None], 0.0)
    store_ok = offs_m < rows
    tl.store(O + b * stride_ob + h * stride_oh + tok_m[:, None] * stride_os + offs_d[None, :],
             o.to(O.dtype.element_ty), mask=store_ok[:, None] & d_ok)
    if RETURN_LSE:
        lse = tl.where(row_ok, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
        tl.store(LSE + b * stride_lb + h * stride_lh + tok_m * stride_ls, lse, mask=store_ok)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hq", "S", "G", "stride_lb", "stride_lh", "stride_ls", "n_bh",
                               "n_work", "n_programs"])
def _prefill_varlen_fwd(
    Q, K, V, O, LSE, SEQ,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh, stride_ls,
    Hq, S, D, G, qk_scale, n_bh, n_work, n_programs,
    PACKED: tl.constexpr, CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PERSISTENT: tl.constexpr,
):
    if PERSISTENT:  # kernels/_grid.py
        for work in range(tl.program_id(0), n_work, n_programs):
            # Sequences and heads are the fast index: consecutive work items are the same query
            # block of every (sequence, head). Causal takes the last blocks (the most keys) first,
            # so the short ones fill the tail; a block past its sequence's length is cheap (no
            # keys), whatever its place in the order.
            tile_m = work // n_bh
            if CAUSAL:
                pid_m = tile_m * -1 + (n_work // n_bh - 1)
            else:
                pid_m = tile_m
            _varlen_tile(Q, K, V, O, LSE, SEQ, stride_qb, stride_qh, stride_qs, stride_kb,
                         stride_kh, stride_ks, stride_vb, stride_vh, stride_vs, stride_ob,
                         stride_oh, stride_os, stride_lb, stride_lh, stride_ls,
                         Hq, S, D, G, qk_scale, pid_m, work % n_bh, PACKED, CAUSAL, RETURN_LSE,
                         DOT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_D)
    else:
        _varlen_tile(Q, K, V, O, LSE, SEQ, stride_qb, stride_qh, stride_qs, stride_kb,
                     stride_kh, stride_ks, stride_vb, stride_vh, stride_vs, stride_ob,
                     stride_oh, stride_os, stride_lb, stride_lh, stride_ls,
                     Hq, S, D, G, qk_scale, tl.program_id(0), tl.program_id(1), PACKED, CAUSAL,
                     RETURN_LSE, DOT_PRECISION, BLOCK_M, BLOCK_N, BLOCK_D)


def _plan(q, k, v, out, lse, seq, *, packed, B, S, rows, D, Hq, Hkv, causal, scale, interpret,
          strides_qkvo, lse_strides) -> LaunchPlan:
    interpret = is_interpret() if interpret is None else interpret
    if use_fast_path(q) and not persistent(q):
        return _fast_plan(q, k, v, out, lse, seq, packed=packed, B=B, S=S, rows=rows, D=D, Hq=Hq,
                          Hkv=Hkv, causal=causal, scale=scale, interpret=interpret,
                          strides_qkvo=strides_qkvo, lse_strides=lse_strides)
    cfg = prefill_config(max(1, rows), D, q.dtype, interpret, on_ascend(q))
    return_lse = lse is not None
    args = (q, k, v, out, lse if return_lse else out, seq,
            *strides_qkvo, *(lse_strides if return_lse else (0, 0, 0)),
            Hq, S, D, Hq // Hkv, float(scale) * LOG2E)
    g = plan_grid((cdiv(max(1, rows), cfg["BLOCK_M"]), B * Hq), q, vector=False)
    meta = dict(PACKED=packed, CAUSAL=bool(causal), RETURN_LSE=return_lse,
                DOT_PRECISION=DOT_INPUT_PRECISION, PERSISTENT=g.persistent, **cfg)
    return LaunchPlan(kernel=_prefill_varlen_fwd, grid=g.grid,
                      args=args + (B * Hq, g.n_work, g.n_programs), meta=meta)


def _fast_plan(q, k, v, out, lse, seq, *, packed, B, S, rows, D, Hq, Hkv, causal, scale, interpret,
               strides_qkvo, lse_strides) -> LaunchPlan:
    """The CUDA fast path (``kernels/attn_fast.py``): descriptor loads ending at each sequence's
    last token, masks only on the diagonal and last tiles, heaviest causal blocks first; prefill's
    fast tiles for the longest row."""
    cfg = attn_fast.finish_config(attn_fast.fast_candidates(max(1, rows), D, q.dtype)[0],
                                  max(1, rows), D, (q, k, v), interpret)
    if cfg["USE_TMA"] and q.device.type == "cuda":
        attn_fast.ensure_allocator()
    return_lse = lse is not None
    args = (q, k, v, out, lse if return_lse else out, seq,
            *strides_qkvo, *(lse_strides if return_lse else (0, 0, 0)),
            Hq, S, D, Hq // Hkv, float(scale) * LOG2E)
    meta = dict(PACKED=packed, CAUSAL=bool(causal), RETURN_LSE=return_lse,
                DOT_PRECISION=DOT_INPUT_PRECISION, NEG_SCALE=float(scale) < 0, **cfg)
    return LaunchPlan(kernel=attn_fast._varlen_fast, grid=(cdiv(max(1, rows), cfg["BLOCK_M"]), B * Hq),
                      args=args, meta=meta)


def prefill_padded_plan(q, k, v, lengths, out, lse, *, causal: bool, scale: float,
                        interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch for validated padded inputs and allocated outputs (``lse`` None: no LSE)."""
    B, Hq, S, D = q.shape
    strides = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
               v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2))
    lse_strides = (lse.stride(0), lse.stride(1), lse.stride(2)) if lse is not None else None
    return _plan(q, k, v, out, lse, lengths, packed=False, B=B, S=S, rows=S, D=D, Hq=Hq,
                 Hkv=k.shape[1], causal=causal, scale=scale, interpret=interpret,
                 strides_qkvo=strides, lse_strides=lse_strides)


def prefill_packed_plan(q, k, v, cu_seqlens, out, lse, *, causal: bool, scale: float, max_seqlen: int,
                        interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch for validated packed inputs and allocated outputs; ``max_seqlen`` sizes the grid."""
    T, Hq, D = q.shape
    B = cu_seqlens.shape[0] - 1
    # Batch strides are 0: the token index (start + row) carries the sequence.
    strides = (0, q.stride(1), q.stride(0), 0, k.stride(1), k.stride(0),
               0, v.stride(1), v.stride(0), 0, out.stride(1), out.stride(0))
    lse_strides = (0, lse.stride(1), lse.stride(0)) if lse is not None else None
    return _plan(q, k, v, out, lse, cu_seqlens, packed=True, B=B, S=T, rows=int(max_seqlen), D=D,
                 Hq=Hq, Hkv=k.shape[1], causal=causal, scale=scale, interpret=interpret,
                 strides_qkvo=strides, lse_strides=lse_strides)


def _check_qkv(fn, q, k, v, dims_q, dims_kv, rank):
    check_tensor(fn, "q", q, rank=rank, dims=dims_q, dtypes=FLOAT_DTYPES)
    check_nonempty(fn, "q", q, dims_q)
    D = q.shape[-1]
    if D > MAX_HEAD_DIM:
        raise ValueError(f"{fn}: q head dim D must be <= {MAX_HEAD_DIM}, got {D}")
    check_tensor(fn, "k", k, rank=rank, dims=dims_kv, dtypes=(q.dtype,), device=q.device, like="q")
    check_nonempty(fn, "k", k, dims_kv)


def _validate_padded(q, k, v, lengths, causal, scale, return_lse, out, lse, check_indices=True) -> float:
    """Everything but the contents of ``lengths`` (``_check_lengths``)."""
    fn = "prefill_padded"
    _check_qkv(fn, q, k, v, "[B, Hq, S, D]", "[B, Hkv, S, D]", 4)
    B, Hq, S, D = q.shape
    kv_shape = (B, k.shape[1], S, D)
    check_tensor(fn, "k", k, shape=kv_shape, dims="[B, Hkv, S, D]")
    check_tensor(fn, "v", v, rank=4, dims="[B, Hkv, S, D]", dtypes=(q.dtype,), device=q.device,
                 like="q", shape=kv_shape)
    check_gqa(fn, Hq, k.shape[1])
    check_index_tensor(fn, "lengths", lengths, device=q.device, rank=1, shape=(B,), dims="[B]")
    check_flag(fn, "causal", causal)
    check_flag(fn, "return_lse", return_lse)
    check_flag(fn, "check_indices", check_indices)
    scale = check_scale(fn, scale, D)
    inputs = {"q": q, "k": k, "v": v, "lengths": lengths}
    check_out_lse(fn, out, lse, return_lse, o_shape=(B, Hq, S, D), o_dims="[B, Hq, S, D]",
                  lse_shape=(B, Hq, S), lse_dims="[B, Hq, S]", like=q, inputs=inputs)
    check_launchable(fn, "q", q)
    return scale


def _check_lengths(lengths: torch.Tensor, S: int) -> None:
    """Contents (a device sync): 1 <= lengths[b] <= S."""
    check_values_in_range("prefill_padded", "lengths", lengths, 1, S, closed=True)


def _validate_packed(q, k, v, cu_seqlens, causal, max_seqlen, scale, return_lse, out, lse,
                     check_indices=True) -> float:
    """Everything but the contents of ``cu_seqlens`` and ``max_seqlen`` (``_packed_rows``)."""
    fn = "prefill_packed"
    _check_qkv(fn, q, k, v, "[T, Hq, D]", "[T, Hkv, D]", 3)
    T, Hq, D = q.shape
    kv_shape = (T, k.shape[1], D)
    check_tensor(fn, "k", k, shape=kv_shape, dims="[T, Hkv, D]")
    check_tensor(fn, "v", v, rank=3, dims="[T, Hkv, D]", dtypes=(q.dtype,), device=q.device,
                 like="q", shape=kv_shape)
    check_gqa(fn, Hq, k.shape[1])
    check_index_tensor(fn, "cu_seqlens", cu_seqlens, device=q.device, rank=1, dims="[B+1]")
    if cu_seqlens.shape[0] < 2:
        raise ValueError(f"{fn}: cu_seqlens must have shape [B+1] with B >= 1, got "
                         f"[{cu_seqlens.shape[0]}]")
    check_flag(fn, "causal", causal)
    check_flag(fn, "return_lse", return_lse)
    check_flag(fn, "check_indices", check_indices)
    scale = check_scale(fn, scale, D)
    inputs = {"q": q, "k": k, "v": v, "cu_seqlens": cu_seqlens}
    check_out_lse(fn, out, lse, return_lse, o_shape=(T, Hq, D), o_dims="[T, Hq, D]",
                  lse_shape=(T, Hq), lse_dims="[T, Hq]", like=q, inputs=inputs)
    check_launchable(fn, "q", q)
    return scale


#: cu_seqlens up to this length are read whole to find the longest sequence without a max_seqlen.
_READ_WHOLE = 1025


def _packed_rows(cu_seqlens: torch.Tensor, T: int, max_seqlen, check_indices: bool) -> int:
    """The grid's row count: ``max_seqlen``, checked against the contents of ``cu_seqlens``
    with ``check_indices`` (starts at 0, non-decreasing, ends at T; one device sync), or read
    from them when not given (a sync too: pass ``max_seqlen`` for a call without one)."""
    fn = "prefill_packed"
    if not check_indices:
        if max_seqlen is not None:
            return check_int_range(fn, "max_seqlen", max_seqlen, 0, T)
        if cu_seqlens.shape[0] <= _READ_WHOLE:
            # One copy to the host instead of two device ops and a copy of their result.
            cu = cu_seqlens.tolist()
            return max(b - a for a, b in zip(cu, cu[1:]))
        return int((cu_seqlens[1:] - cu_seqlens[:-1]).max())
    # Contents (one device sync): starts at 0, non-decreasing, ends at T.
    first, last = int(cu_seqlens[0]), int(cu_seqlens[-1])
    if first != 0:
        raise ValueError(f"{fn}: cu_seqlens must start at 0, got cu_seqlens[0] = {first}")
    # int64: an int32 difference wraps, and entries past 2**31 would then look non-decreasing.
    steps = cu_seqlens[1:].to(torch.int64) - cu_seqlens[:-1]
    if bool((steps < 0).any()):
        i = int((steps < 0).nonzero()[0, 0])
        raise ValueError(f"{fn}: cu_seqlens must be non-decreasing, got cu_seqlens[{i}] = "
                         f"{int(cu_seqlens[i])} > cu_seqlens[{i + 1}] = {int(cu_seqlens[i + 1])}")
    if last != T:
        raise ValueError(f"{fn}: cu_seqlens must end at T = {T} (q's token count), got "
                         f"cu_seqlens[-1] = {last}")
    longest = int(steps.max())
    if max_seqlen is None:
        max_seqlen = longest
    else:
        check_int_range(fn, "max_seqlen", max_seqlen, 0, T)
        if max_seqlen < longest:
            raise ValueError(f"{fn}: max_seqlen must be >= the longest sequence ({longest}), "
                             f"got {max_seqlen}")
    return int(max_seqlen)


def prefill_padded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor, *,
                   causal: bool, scale: Optional[float] = None, return_lse: bool = False,
                   out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                   check_indices: bool = True,
                   ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Padded varlen attention -> (o [B, Hq, S, D], lse [B, Hq, S] | None).

    Sequence b uses positions [0, lengths[b]) of q/k/v; rows >= lengths[b] of ``o`` are zeros and
    of ``lse`` -inf. Otherwise as ``kernels.prefill.prefill`` (GQA, scale 1/sqrt(D), fp32 LSE).
    ``check_indices`` (default on) verifies 1 <= lengths[b] <= S before launch (a device sync);
    without it the call never waits for the device and can be captured in a graph.
    """
    key = _PADDED.key((q, k, v, lengths), (out, lse), (causal, scale, return_lse, check_indices))
    slot = _PADDED.lookup(key)
    if slot is None:
        _validate_padded(q, k, v, lengths, causal, scale, return_lse, out, lse, check_indices)
        slot = _PADDED.validated(key)
    elif out is not None or lse is not None:
        check_out_lse_aliases("prefill_padded", out, lse, {"q": q, "k": k, "v": v, "lengths": lengths})
    if check_indices:
        _check_lengths(lengths, q.shape[2])
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if return_lse and lse is None:
        lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    if not return_lse:
        lse = None
    tensors = (q, k, v, lengths, out, lse)
    bound = None if slot is None else slot.get(())
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = prefill_padded_plan(q, k, v, lengths, out, lse, causal=causal,
                               scale=check_scale("prefill_padded", scale, q.shape[-1]))
    _PADDED.run(slot, (), plan, tensors, is_live(q), launch)
    return out, lse


def prefill_packed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens: torch.Tensor, *,
                   causal: bool, max_seqlen: Optional[int] = None, scale: Optional[float] = None,
                   return_lse: bool = False, out: Optional[torch.Tensor] = None,
                   lse: Optional[torch.Tensor] = None, check_indices: bool = True,
                   ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Packed varlen attention -> (o [T, Hq, D], lse [T, Hq] | None).

    Sequence b is tokens [cu_seqlens[b], cu_seqlens[b+1]); causal masks key j > query i within it.
    ``max_seqlen`` (>= the longest sequence) sizes the grid; None reads it from cu_seqlens.
    ``check_indices`` (default on) verifies cu_seqlens (0 first, non-decreasing, T last) and
    max_seqlen before launch; without it and with ``max_seqlen`` given the call never waits for
    the device.
    """
    key = _PACKED.key((q, k, v, cu_seqlens), (out, lse),
                      (causal, max_seqlen, scale, return_lse, check_indices))
    slot = _PACKED.lookup(key)
    if slot is None:
        _validate_packed(q, k, v, cu_seqlens, causal, max_seqlen, scale, return_lse, out, lse,
                         check_indices)
        slot = _PACKED.validated(key)
    elif out is not None or lse is not None:
        check_out_lse_aliases("prefill_packed", out, lse,
                              {"q": q, "k": k, "v": v, "cu_seqlens": cu_seqlens})
    rows = _packed_rows(cu_seqlens, q.shape[0], max_seqlen, check_indices)
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    if return_lse and lse is None:
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
    if not return_lse:
        lse = None
    tensors = (q, k, v, cu_seqlens, out, lse)
    bound = None if slot is None else slot.get(rows)
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = prefill_packed_plan(q, k, v, cu_seqlens, out, lse, causal=causal,
                               scale=check_scale("prefill_packed", scale, q.shape[-1]), max_seqlen=rows)
    _PACKED.run(slot, rows, plan, tensors, is_live(q), launch)
    return out, lse


_PADDED = CallCache("prefill_padded")
_PACKED = CallCache("prefill_packed")
