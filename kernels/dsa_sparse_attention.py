"""DeepSeek sparse attention over a paged latent cache (kernels.md section 12).

Every query token t lists ``topk`` flat slot ids (``page * page_size + slot``, -1 = none,
anywhere in the row, repeats counted once per occurrence). All H heads of a token read the same
latent rows, so one program takes a group of BLOCK_H heads as the M dimension of ``tl.dot``
(scores [BLOCK_H, BLOCK_N] = q_nope @ ckv^T + q_pe @ kpe^T, then P @ ckv: the latent rows are
the values). Rows are gathered whole (``off[:, None] + arange(D)[None, :]``, the portable gather
form on Ascend). A flat id is a row number when a page is ``page_size`` slot strides long (a
contiguous pool, and the fused ``[.., Dc + Dr]`` buffer's two views): the address is then
``id * slot_stride`` and no division by the page size happens anywhere. Other pools (pages
longer than ``page_size`` slots) get their row offsets from one vectorized host pass per call
(``row_offsets``), which the kernel loads like the ids: the kernel never divides by the page
size (the vector ``t // PAGE`` is the construct Ascend's adapter rejects, "cannot div 0").

Long lists are split (``SPLIT_LEN`` slots a program) and merged by LSE (kernels/_split.py): a
decode step (T = 1) would otherwise run one program per head group.

FP8 latent caches (``torch.float8_e4m3fn``, kernels.md section 11) are read as the MLA kernel
reads them (kernels/mla_paged.py): Triton's own cast on compiled CUDA sm_89+, the cache's bytes
decoded exactly everywhere else; the tile is converted to q's dtype, ``k_scale`` folded into the
score scale and ``v_scale`` applied to the normalised output.
"""
from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._checks import (DOT_INPUT_PRECISION, FLOAT_DTYPES, LaunchPlan, cdiv, check_flag, check_index_tensor,
                      check_int_range, check_launchable, check_nonempty, check_out_lse, check_out_lse_aliases,
                      check_scale, check_tensor, check_values_in_range, is_interpret, is_live, launch, next_pow2,
                      on_ascend)
from ._fp8 import BITS, FP8_DTYPE, fp8_mode, kernel_view
from ._grid import plan_grid
from .mla_paged import _e4m3_bits, kernel_caches
from ._softmax import online_softmax_fold, softmax_finish
from ._split import merge_plan, scratch_of, split_outputs

LOG2E = 1.4426950408889634
MAX_DC = 512
MAX_DR = 128
#: Row ids are int32 flat slot ids.
INT32_MAX = 2**31 - 1


@triton.jit
def _latent_tile(ptrs, mask, DTYPE: tl.constexpr, FP8_BYTES: tl.constexpr):
    """Latent rows in q's dtype; masked slots read 0 (an fp8 NaN there never reaches the dots)."""
    if FP8_BYTES:
        x = _e4m3_bits(tl.load(ptrs, mask=mask, other=0))
    else:  # a float fill: an fp8 tile (Triton's own cast) takes no int32 constant
        x = tl.load(ptrs, mask=mask, other=0.0)
    return x.to(DTYPE)


@triton.jit
def _dsa_tile(Q_NOPE, Q_PE, CKV, KPE, IDS, COFF, ROFF, O, LSE,
              stride_qt, stride_qh, stride_pt, stride_ph,
              ckv_page, ckv_slot, kpe_page, kpe_slot, stride_it,
              stride_ot, stride_oh, stride_os, stride_lt, stride_lh, stride_ls,
              H, DC, DR, TOPK, SPLIT_LEN, qk_scale, v_scale, t, hg, vg, split,
              RETURN_LSE: tl.constexpr, UNIFORM: tl.constexpr,
              BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DC: tl.constexpr,
              BLOCK_DR: tl.constexpr, SPLIT_D: tl.constexpr, CHUNK_DC: tl.constexpr,
              BLOCK_DV: tl.constexpr, DOT_PRECISION: tl.constexpr, FP8_BYTES: tl.constexpr):
    """FP8_BYTES: the caches are e4m3fn bytes seen as uint8, decoded here. SPLIT_D (Ascend): the scores over Dc in chunks of CHUNK_DC, and this program's output
    columns only (BLOCK_DV of them, group ``vg``), so the unified buffer never holds a whole
    [rows, Dc] tile beside a whole accumulator; otherwise one pass over full rows."""
    t = t.to(tl.int64)
    heads = hg * BLOCK_H + tl.arange(0, BLOCK_H)
    h_ok = heads < H
    offs_n = tl.arange(0, BLOCK_N)
    offs_v = vg * BLOCK_DV + tl.arange(0, BLOCK_DV)
    offs_r = tl.arange(0, BLOCK_DR)
    v_ok = offs_v < DC
    r_ok = offs_r < DR
    q_row = Q_NOPE + t * stride_qt + heads[:, None] * stride_qh
    if not SPLIT_D:
        q_nope = tl.load(q_row + offs_v[None, :], mask=h_ok[:, None] & v_ok[None, :], other=0.0)
    q_pe = tl.load(Q_PE + t * stride_pt + heads[:, None] * stride_ph + offs_r[None, :],
                   mask=h_ok[:, None] & r_ok[None, :], other=0.0)
    start = split * SPLIT_LEN
    end = tl.minimum(start + SPLIT_LEN, TOPK)
    # Base-2 scores (qk_scale has log2(e) folded in); a running max still at -inf is used as 0,
    # so a tile (or a split, or a row) listing nothing never makes NaN.
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], dtype=tl.float32)
    for n in range(start, end, BLOCK_N):
        j = n + offs_n
        listed = j < end
        ids = tl.load(IDS + t * stride_it + j, mask=listed, other=-1)
        ok = ids >= 0
        # Offsets come from the loaded ids (or host offsets) by casts and multiplies only, and
        # their loads are masked by the slot range: a where/maximum on the loaded ids, or a load
        # masked by them, on the way to an address crashes triton-ascend 3.2.0rc2's adapter
        # (porting_notes.md#gathered_index_select). An id of -1 makes a negative offset that the
        # row mask `ok` keeps from being read.
        if UNIFORM:
            row = ids.to(tl.int64)
            c_off = row * ckv_slot
            r_off = row * kpe_slot
        else:  # element offsets made on the host (row_offsets, 0 for -1): pages longer than page_size slots
            c_off = tl.load(COFF + t * stride_it + j, mask=listed, other=0)
            r_off = tl.load(ROFF + t * stride_it + j, mask=listed, other=0)
        kpe = _latent_tile(KPE + r_off[:, None] + offs_r[None, :], ok[:, None] & r_ok[None, :], q_pe.dtype,
                           FP8_BYTES)
        s = tl.dot(q_pe, tl.trans(kpe), input_precision=DOT_PRECISION)
        if SPLIT_D:
            for c0 in tl.static_range(0, BLOCK_DC, CHUNK_DC):
                offs = c0 + tl.arange(0, CHUNK_DC)
                qn = tl.load(q_row + offs[None, :], mask=h_ok[:, None] & (offs < DC)[None, :], other=0.0)
                kc = _latent_tile(CKV + c_off[:, None] + offs[None, :], ok[:, None] & (offs < DC)[None, :],
                                  qn.dtype, FP8_BYTES)
                s += tl.dot(qn, tl.trans(kc), input_precision=DOT_PRECISION)
        ckv = _latent_tile(CKV + c_off[:, None] + offs_v[None, :], ok[:, None] & v_ok[None, :], q_pe.dtype,
                           FP8_BYTES)
        if not SPLIT_D:
            s += tl.dot(q_nope, tl.trans(ckv), input_precision=DOT_PRECISION)
        s = tl.where(ok[None, :], s * qk_scale, float("-inf"))
        m_i, l_i, acc = online_softmax_fold(s, ckv, m_i, l_i, acc, DOT_PRECISION)
    o, lse = softmax_finish(acc, m_i, l_i, v_scale)
    tl.store(O + t * stride_ot + heads[:, None] * stride_oh + split * stride_os + offs_v[None, :],
             o.to(O.dtype.element_ty), mask=h_ok[:, None] & v_ok[None, :])
    if RETURN_LSE:
        tl.store(LSE + t * stride_lt + heads * stride_lh + split * stride_ls, lse, mask=h_ok)


@triton.jit(do_not_specialize=["H", "TOPK", "SPLIT_LEN", "n_groups", "n_vgroups", "n_splits", "n_work",
                               "n_programs"])
def _dsa_fwd(Q_NOPE, Q_PE, CKV, KPE, IDS, COFF, ROFF, O, LSE,
             stride_qt, stride_qh, stride_pt, stride_ph,
             ckv_page, ckv_slot, kpe_page, kpe_slot, stride_it,
             stride_ot, stride_oh, stride_os, stride_lt, stride_lh, stride_ls,
             H, DC, DR, TOPK, SPLIT_LEN, qk_scale, v_scale, n_groups, n_vgroups, n_splits, n_work, n_programs,
             RETURN_LSE: tl.constexpr, UNIFORM: tl.constexpr,
             BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_DC: tl.constexpr,
             BLOCK_DR: tl.constexpr, SPLIT_D: tl.constexpr, CHUNK_DC: tl.constexpr,
             BLOCK_DV: tl.constexpr, DOT_PRECISION: tl.constexpr, FP8_BYTES: tl.constexpr,
             PERSISTENT: tl.constexpr):
    if PERSISTENT:  # kernels/_grid.py: about one program per core, looping over (token, group, split)
        for work in range(tl.program_id(0), n_work, n_programs):
            row = work // n_splits
            _dsa_tile(Q_NOPE, Q_PE, CKV, KPE, IDS, COFF, ROFF, O, LSE, stride_qt, stride_qh, stride_pt, stride_ph,
                      ckv_page, ckv_slot, kpe_page, kpe_slot, stride_it,
                      stride_ot, stride_oh, stride_os, stride_lt, stride_lh, stride_ls,
                      H, DC, DR, TOPK, SPLIT_LEN, qk_scale, v_scale, row // (n_groups * n_vgroups),
                      (row // n_vgroups) % n_groups, row % n_vgroups, work % n_splits, RETURN_LSE, UNIFORM,
                      BLOCK_H, BLOCK_N, BLOCK_DC, BLOCK_DR, SPLIT_D, CHUNK_DC, BLOCK_DV, DOT_PRECISION, FP8_BYTES)
    else:
        row = tl.program_id(0)
        _dsa_tile(Q_NOPE, Q_PE, CKV, KPE, IDS, COFF, ROFF, O, LSE, stride_qt, stride_qh, stride_pt, stride_ph,
                  ckv_page, ckv_slot, kpe_page, kpe_slot, stride_it,
                  stride_ot, stride_oh, stride_os, stride_lt, stride_lh, stride_ls,
                  H, DC, DR, TOPK, SPLIT_LEN, qk_scale, v_scale, row // (n_groups * n_vgroups),
                  (row // n_vgroups) % n_groups, row % n_vgroups, tl.program_id(1), RETURN_LSE, UNIFORM,
                  BLOCK_H, BLOCK_N, BLOCK_DC, BLOCK_DR, SPLIT_D, CHUNK_DC, BLOCK_DV, DOT_PRECISION, FP8_BYTES)


def dsa_config(T: int, H: int, topk: int, Dc: int, Dr: int, dtype: torch.dtype, *, interpret: bool,
               ascend: bool, num_splits: Optional[int] = None) -> dict:
    """Tiles and the split of the list. BLOCK_H heads share a tile of BLOCK_N latent rows; on a
    GPU 64 heads x 512 fp32 accumulators is the most a program holds (as FlashMLA's 64-head
    blocks); on Ascend the tile is kept small enough for the 192 KB unified buffer. Splits
    target about 4 * 132 programs on a GPU (one H100's SMs, several each) and the core count on
    Ascend; at least 64 slots a split."""
    block_dc, block_dr = max(16, next_pow2(Dc)), max(16, next_pow2(Dr))
    if interpret:
        # Lists past 128 slots split (and merge) under the interpreter too.
        block_h, block_n, target = max(16, min(64, next_pow2(H))), 64, T * cdiv(H, 64) * min(4, cdiv(topk, 128))
    elif ascend:
        block_h, block_n, target = 16, 16, 48
    else:
        block_h = max(16, min(64, next_pow2(H)))
        block_n = 32 if dtype.itemsize <= 2 else 16
        target = 528
    groups = cdiv(H, block_h)
    if num_splits is None:
        want = max(1, min(cdiv(target, T * groups), cdiv(max(topk, 1), 64)))
    else:
        want = num_splits
    split_len = max(block_n, cdiv(cdiv(max(topk, 1), want), block_n) * block_n)
    # Ascend: scores over Dc in chunks of 128 and 128 output columns a program. UB (triton-ascend
    # 3.2.0, Ascend910B2, H16 Dc512): full rows 96.5%; chunks/columns 128/256 98.8%, 256/256
    # 96.2%, 512/128 74.6%, 128/128 66.5% (bishengir's plan is not monotonic in the tile).
    split_d = ascend and block_dc > 256
    block_dv = 128 if split_d else block_dc
    return dict(BLOCK_H=block_h, BLOCK_N=block_n, BLOCK_DC=block_dc, BLOCK_DR=block_dr,
                SPLIT_D=split_d, CHUNK_DC=128 if split_d else block_dc, BLOCK_DV=block_dv,
                VGROUPS=cdiv(Dc, block_dv),
                SPLIT_LEN=split_len, NUM_SPLITS=max(1, cdiv(topk, split_len)), GROUPS=groups,
                num_warps=4 if interpret or block_h <= 16 else 8, num_stages=1 if interpret else 2)


def _uniform(cache: torch.Tensor) -> bool:
    """A flat id is a row number: pages are exactly page_size slot strides apart."""
    return cache.shape[0] <= 1 or cache.stride(0) == cache.shape[1] * cache.stride(1)


def validate(fn: str, q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, scale, k_scale, v_scale,
             return_lse, out, lse, num_splits) -> tuple[float, int]:
    """Every check that reads no device data; returns (scale, page_size)."""
    check_tensor(fn, "q_nope", q_nope, rank=3, dims="[T, H, Dc]", dtypes=FLOAT_DTYPES)
    check_nonempty(fn, "q_nope", q_nope, "[T, H, Dc]")
    T, H, Dc = q_nope.shape
    if Dc % 16 or Dc > MAX_DC:
        raise ValueError(f"{fn}: q_nope latent dim Dc must be a multiple of 16 and <= {MAX_DC}, got {Dc}")
    check_tensor(fn, "q_pe", q_pe, rank=3, dims="[T, H, Dr]", dtypes=(q_nope.dtype,), device=q_nope.device,
                 like="q_nope")
    Dr = q_pe.shape[2]
    check_tensor(fn, "q_pe", q_pe, shape=(T, H, Dr), dims="[T, H, Dr]")
    if Dr % 16 or Dr == 0 or Dr > MAX_DR:
        raise ValueError(f"{fn}: q_pe rope dim Dr must be a multiple of 16 in [16, {MAX_DR}], got {Dr}")
    check_tensor(fn, "ckv_cache", ckv_cache, rank=3, dims="[num_pages, page_size, Dc]",
                 dtypes=(q_nope.dtype, FP8_DTYPE), device=q_nope.device, like="q_nope or float8_e4m3fn")
    pages, P = ckv_cache.shape[0], ckv_cache.shape[1]
    check_tensor(fn, "ckv_cache", ckv_cache, shape=(pages, P, Dc), dims="[num_pages, page_size, Dc]")
    if P == 0:
        raise ValueError(f"{fn}: ckv_cache must have page_size >= 1, got {list(ckv_cache.shape)}")
    check_tensor(fn, "kpe_cache", kpe_cache, rank=3, dims="[num_pages, page_size, Dr]", dtypes=(ckv_cache.dtype,),
                 device=q_nope.device, like="ckv_cache", shape=(pages, P, Dr))
    if pages * P > INT32_MAX:
        raise ValueError(f"{fn}: ckv_cache holds {pages * P} slots, more than int32 flat ids address")
    check_index_tensor(fn, "sparse_indices", sparse_indices, device=q_nope.device, rank=2,
                       dims="[T, topk]", like="q_nope")
    check_tensor(fn, "sparse_indices", sparse_indices, shape=(T, None), dims="[T, topk]")
    for name, value in (("k_scale", k_scale), ("v_scale", v_scale)):
        if value is None:  # check_scale reads None as "the default softmax scale"
            raise TypeError(f"{fn}: {name} must be a real number, got NoneType")
        if check_scale(fn, value, 1, name) <= 0:
            raise ValueError(f"{fn}: {name} must be > 0, got {value}")
    check_flag(fn, "return_lse", return_lse)
    if num_splits is not None:
        check_int_range(fn, "num_splits", num_splits, 1, 2**31 - 1)
    scale = check_scale(fn, scale, Dc + Dr)
    # The kernel receives float32(scale * k_scale * log2(e)): each factor may fit and the product not.
    check_scale(fn, scale * float(k_scale), 1, "scale * k_scale")
    inputs = {"q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv_cache, "kpe_cache": kpe_cache,
              "sparse_indices": sparse_indices}
    check_out_lse(fn, out, lse, return_lse, o_shape=(T, H, Dc), o_dims="[T, H, Dc]", lse_shape=(T, H),
                  lse_dims="[T, H]", like=q_nope, inputs=inputs)
    check_launchable(fn, "q_nope", q_nope)
    return scale, P


def row_offsets(cache: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Element offsets (int64) of the rows flat ids name in ``cache`` (0 for -1), laid out with
    the strides of ``ids`` (the kernel reads both with one row stride)."""
    P = cache.shape[1]
    flat = ids.clamp(min=0).to(torch.int64)
    out = torch.empty_strided(ids.shape, ids.stride(), dtype=torch.int64, device=ids.device)
    return out.copy_((flat // P) * cache.stride(0) + (flat % P) * cache.stride(1))


def dsa_sparse_attention_plan(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, out, lse, *, scale: float,
                              k_scale: float = 1.0, v_scale: float = 1.0,
                              num_splits: Optional[int] = None, offsets: Optional[tuple] = None,
                              views: Optional[tuple] = None) -> LaunchPlan:
    """The launch chain for validated inputs and allocated outputs (``lse`` None: no LSE).
    ``offsets``: ``row_offsets`` of both caches, ``views``: ``kernel_caches`` of both, when the
    caller made them already (a cached launch binds the tensors it was planned with)."""
    T, H, Dc = q_nope.shape
    Dr = q_pe.shape[2]
    topk = sparse_indices.shape[1]
    cfg = dsa_config(T, H, topk, Dc, Dr, q_nope.dtype, interpret=is_interpret(), ascend=on_ascend(q_nope),
                     num_splits=num_splits)
    splits, split_len, groups = cfg.pop("NUM_SPLITS"), cfg.pop("SPLIT_LEN"), cfg.pop("GROUPS")
    vgroups = cfg.pop("VGROUPS")
    o_dst, l_dst, write_lse, o_strides, l_strides = split_outputs(out, lse, splits, T, H, Dc)
    uniform = _uniform(ckv_cache) and _uniform(kpe_cache)
    if uniform:
        c_off = r_off = sparse_indices  # never read
    elif offsets is not None:
        c_off, r_off = offsets
    else:
        c_off, r_off = row_offsets(ckv_cache, sparse_indices), row_offsets(kpe_cache, sparse_indices)
    # fp8: the byte view keeps the element strides (one byte an element), so offsets are unchanged.
    mode = fp8_mode(ckv_cache)
    ckv_cache, kpe_cache = views if views is not None else kernel_caches(ckv_cache, kpe_cache)
    args = (q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, c_off, r_off, o_dst, l_dst,
            q_nope.stride(0), q_nope.stride(1), q_pe.stride(0), q_pe.stride(1),
            ckv_cache.stride(0), ckv_cache.stride(1), kpe_cache.stride(0), kpe_cache.stride(1),
            sparse_indices.stride(0), *o_strides, *l_strides,
            H, Dc, Dr, topk, split_len, float(scale) * float(k_scale) * LOG2E, float(v_scale), groups, vgroups,
            splits)
    g = plan_grid((T * groups * vgroups, splits), q_nope, vector=False)
    meta = dict(RETURN_LSE=write_lse, UNIFORM=uniform, FP8_BYTES=mode == BITS,
                DOT_PRECISION=DOT_INPUT_PRECISION, PERSISTENT=g.persistent, **cfg)
    plan = LaunchPlan(kernel=_dsa_fwd, grid=g.grid, args=args + (g.n_work, g.n_programs), meta=meta,
                      workspace=scratch_of(out, o_dst, l_dst))
    if splits > 1:
        plan.then = merge_plan(o_dst, l_dst, out, lse, cfg["BLOCK_DC"])
    return plan


def dsa_sparse_attention(q_nope: torch.Tensor, q_pe: torch.Tensor, ckv_cache: torch.Tensor,
                         kpe_cache: torch.Tensor, sparse_indices: torch.Tensor, *,
                         scale: Optional[float] = None, return_lse: bool = False,
                         out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                         k_scale: float = 1.0, v_scale: float = 1.0, num_splits: Optional[int] = None,
                         check_indices: bool = True) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Sparse MLA attention over listed latent cache slots.

    q_nope [T, H, Dc], q_pe [T, H, Dr] (fp16/bf16/fp32; Dc a multiple of 16 up to 512, Dr a
    multiple of 16 up to 128), ckv_cache [num_pages, page_size, Dc] and kpe_cache [num_pages,
    page_size, Dr] of q's dtype or both float8_e4m3fn (any strides with the last one 1: two
    views of one fused [.., Dc + Dr] buffer are fine), sparse_indices [T, topk] int32 flat slot ids
    ``page * page_size + slot`` in [0, num_pages * page_size), -1 = none anywhere in a row;
    a repeated id counts once per occurrence. Returns (o [T, H, Dc], lse [T, H] fp32 natural log
    or None); a row listing none gives o = 0, lse = -inf. ``scale`` None: 1/sqrt(Dc + Dr).
    ``k_scale``/``v_scale`` multiply the scores / the output (per-tensor dequantisation scales).
    ``check_indices=False`` skips the data-dependent id check (a device sync)."""
    fn = "dsa_sparse_attention"
    tensors_in = (q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices)
    key = _CALLS.key(tensors_in, (out, lse), (scale, k_scale, v_scale, return_lse, num_splits, check_indices))
    slot = _CALLS.lookup(key)
    facts = None if slot is None else slot.get(FACTS)
    if slot is None:
        scale, P = validate(fn, q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, scale, k_scale, v_scale,
                            return_lse, out, lse, num_splits)
        check_flag(fn, "check_indices", check_indices)
    else:
        # Validated before for this key: what the key alone gives as it was found then (the
        # scale converted, the pool's layout, how the caches are read), the address checks anew.
        P = ckv_cache.shape[1]
        scale = facts[0] if facts is not None else check_scale(fn, scale, q_nope.shape[2] + q_pe.shape[2])
        if out is not None or lse is not None:
            check_out_lse_aliases(fn, out, lse, dict(zip(_INPUTS, tensors_in)))
    if check_indices:
        check_values_in_range(fn, "sparse_indices", sparse_indices, -1, ckv_cache.shape[0] * P,
                              what="entries (flat slot ids or -1)")
    if facts is None:
        facts = (scale, _uniform(ckv_cache) and _uniform(kpe_cache), fp8_mode(ckv_cache), fp8_mode(kpe_cache))
    if slot is None:
        slot = _CALLS.validated(key)
        if slot is not None:
            slot[FACTS] = facts
    T, H, Dc = q_nope.shape
    if out is None:
        out = torch.empty((T, H, Dc), dtype=q_nope.dtype, device=q_nope.device)
    if return_lse and lse is None:
        lse = torch.empty((T, H), dtype=torch.float32, device=q_nope.device)
    if not return_lse:
        lse = None
    # Row offsets are read from the ids (data): made per call and passed like the inputs.
    offsets = None
    if not facts[1]:
        offsets = (row_offsets(ckv_cache, sparse_indices), row_offsets(kpe_cache, sparse_indices))
    views = kernel_view(ckv_cache, facts[2]), kernel_view(kpe_cache, facts[3])
    tensors = (q_nope, q_pe, *views, sparse_indices, out, lse) + (offsets or ())
    bound = None if slot is None else slot.get(())
    if bound is not None:
        bound.launch(tensors, launch)
        return out, lse
    plan = dsa_sparse_attention_plan(q_nope, q_pe, ckv_cache, kpe_cache, sparse_indices, out, lse, scale=scale,
                                     k_scale=k_scale, v_scale=v_scale, num_splits=num_splits, offsets=offsets,
                                     views=views)
    _CALLS.run(slot, (), plan, tensors, is_live(q_nope), launch)
    return out, lse


_INPUTS = ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices")
#: Where a validated key's slot keeps (scale, uniform pool, ckv read mode, kpe read mode),
#: beside its bound plan (keyed ``()``).
FACTS = "facts"
_CALLS = CallCache("dsa_sparse_attention")
