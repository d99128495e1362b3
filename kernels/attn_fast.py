"""The dense attention core's CUDA fast path (prefill and block-sparse), behind ``use_fast_path``.

What it does that the portable kernels (``prefill._prefill_tile``, ``block_sparse``) cannot, or
should not, on Ascend:

* K/V (and Q) tiles through tensor descriptors (``USE_TMA``; TMA on Hopper): the copy engine
  computes the addresses and fills out-of-range rows with zeros, so no load carries a mask and
  no per-element address arithmetic runs in the loop. The portable kernels keep pointer loads
  (triton-ascend 3.2 has no descriptors). ``USE_TMA=False`` is the same loop with unmasked
  pointer loads, for strides or addresses a descriptor cannot take (16-byte alignment).
* The scale folded into the exponent: ``p = exp2(qk * c - m)`` is one FMA per score where the
  portable step multiplies, then subtracts. The running max is taken of the unscaled scores
  (``max(qk) * c``, or ``min(qk) * c`` for a negative scale).
* Block-sparse: one flat loop over (listed block, tile of it), the block index read in the loop
  (the pipeliner issues it a stage ahead of the tile it addresses), so the listed blocks stream
  like one dense row; only a partial last block (where S ends) is visited by a masked loop.

Every row still sees a key in the first tile it visits (the causal row's key 0, a block-sparse
row's first listed block), so the running max is finite after one step, as in ``_softmax``.
"""
from __future__ import annotations

import triton
import triton.language as tl

from ._block_index import listed_blocks
from ._prefill_tiles import prefill_candidates


@triton.jit
def _step(q, k, v, m_i, l_i, acc, qk_scale, visible, DOT_PRECISION: tl.constexpr,
          MASKED: tl.constexpr, NEG_SCALE: tl.constexpr):
    """Fold a [BLOCK_N, D] K/V tile into the running (max, sum, acc); scores in base 2."""
    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
    if MASKED:  # the diagonal or last tiles only: scale first, so no scale meets an infinity
        qk = tl.where(visible, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp2(qk - m_new[:, None])
    else:
        if NEG_SCALE:
            m_new = tl.maximum(m_i, tl.min(qk, 1) * qk_scale)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.exp2(qk * qk_scale - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc, input_precision=DOT_PRECISION)
    return m_new, l_i, acc


@triton.jit
def _kv_source(K, V, k_off, v_off, S, D, stride_ks, stride_vs,
               BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, USE_TMA: tl.constexpr):
    """Descriptors for one head's K and V ([S, D] row-major views), or their base pointers."""
    if USE_TMA:
        k_src = tl.make_tensor_descriptor(K + k_off, shape=[S, D], strides=[stride_ks, 1],
                                          block_shape=[BLOCK_N, BLOCK_D])
        v_src = tl.make_tensor_descriptor(V + v_off, shape=[S, D], strides=[stride_vs, 1],
                                          block_shape=[BLOCK_N, BLOCK_D])
    else:
        k_src = K + k_off
        v_src = V + v_off
    return k_src, v_src


@triton.jit
def _load_kv(k_src, v_src, start, stride_ks, stride_vs, S, D,
             BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, USE_TMA: tl.constexpr,
             EVEN_D: tl.constexpr, ROW_MASK: tl.constexpr):
    """The K and V tiles of keys [start, start + BLOCK_N): rows past S read as zeros."""
    if USE_TMA:
        k = k_src.load([start, 0])
        v = v_src.load([start, 0])
    else:
        rows = tl.arange(0, BLOCK_N)
        cols = tl.arange(0, BLOCK_D)
        # A scalar offset per tile on top of a loop-invariant tile of offsets: no per-element
        # 64-bit arithmetic in the loop.
        kp = k_src + tl.cast(start, tl.int64) * stride_ks + (rows[:, None] * stride_ks + cols[None, :])
        vp = v_src + tl.cast(start, tl.int64) * stride_vs + (rows[:, None] * stride_vs + cols[None, :])
        if ROW_MASK:
            ok = ((start + rows)[:, None] < S) & (cols[None, :] < D)
            k = tl.load(kp, mask=ok, other=0.0)
            v = tl.load(vp, mask=ok, other=0.0)
        elif EVEN_D:
            k = tl.load(kp)
            v = tl.load(vp)
        else:
            ok = cols[None, :] < D
            k = tl.load(kp, mask=ok, other=0.0)
            v = tl.load(vp, mask=ok, other=0.0)
    return k, v


@triton.jit
def _load_q(Q, q_off, stride_qs, row0, S, D,
            BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, USE_TMA: tl.constexpr):
    if USE_TMA:
        q_desc = tl.make_tensor_descriptor(Q + q_off, shape=[S, D], strides=[stride_qs, 1],
                                           block_shape=[BLOCK_M, BLOCK_D])
        q = q_desc.load([row0, 0])
    else:
        rows = row0 + tl.arange(0, BLOCK_M)
        cols = tl.arange(0, BLOCK_D)
        q = tl.load(Q + q_off + rows[:, None].to(tl.int64) * stride_qs + cols[None, :],
                    mask=(rows[:, None] < S) & (cols[None, :] < D), other=0.0)
    return q


@triton.jit
def _store_out(O, LSE, o_off, lse_off, stride_os, row0, S, D, acc, m_i, l_i,
               RETURN_LSE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = row0 + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_D)
    o = acc / l_i[:, None]
    tl.store(O + o_off + rows[:, None].to(tl.int64) * stride_os + cols[None, :],
             o.to(O.dtype.element_ty), mask=(rows[:, None] < S) & (cols[None, :] < D))
    if RETURN_LSE:
        tl.store(LSE + lse_off + rows, (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=rows < S)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hq", "S", "G", "stride_lb", "stride_lh"])
def _prefill_fast(
    Q, K, V, O, LSE,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    Hq, S, D, G, qk_scale,
    CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_TMA: tl.constexpr, NEG_SCALE: tl.constexpr, EVEN_D: tl.constexpr,
):
    """Grid (query blocks, B * Hq); causal launches the heaviest query blocks first."""
    tile_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - tile_m
    else:
        pid_m = tile_m
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    row0 = pid_m * BLOCK_M
    q = _load_q(Q, b * stride_qb + h * stride_qh, stride_qs, row0, S, D, BLOCK_M, BLOCK_D, USE_TMA)
    k_src, v_src = _kv_source(K, V, b * stride_kb + hk * stride_kh, b * stride_vb + hk * stride_vh,
                              S, D, stride_ks, stride_vs, BLOCK_N, BLOCK_D, USE_TMA)
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    if CAUSAL:
        kv_end = tl.minimum(offs_m + 1, S)
        lo = row0 // BLOCK_N * BLOCK_N
        hi = tl.minimum(row0 + BLOCK_M, S)
    else:
        kv_end = tl.zeros([BLOCK_M], dtype=tl.int32) + S
        lo = S // BLOCK_N * BLOCK_N
        hi = S
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start in range(0, lo, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        k, v = _load_kv(k_src, v_src, start, stride_ks, stride_vs, S, D, BLOCK_N, BLOCK_D,
                        USE_TMA, EVEN_D, False)
        m_i, l_i, acc = _step(q, k, v, m_i, l_i, acc, qk_scale, None, DOT_PRECISION, False,
                              NEG_SCALE)
    for start in range(lo, hi, BLOCK_N):
        k, v = _load_kv(k_src, v_src, start, stride_ks, stride_vs, S, D, BLOCK_N, BLOCK_D,
                        USE_TMA, EVEN_D, True)
        visible = (start + offs_n)[None, :] < kv_end[:, None]
        m_i, l_i, acc = _step(q, k, v, m_i, l_i, acc, qk_scale, visible, DOT_PRECISION, True,
                              NEG_SCALE)
    _store_out(O, LSE, b * stride_ob + h * stride_oh, b * stride_lb + h * stride_lh, stride_os,
               row0, S, D, acc, m_i, l_i, RETURN_LSE, BLOCK_M, BLOCK_D)


# sizes and LSE/index strides unspecialized (see kernels/__init__.py) but the sabi entry stride,
# 1 for any sabi with contiguous rows: the row count (kernels/_block_index.py) loads vectors.
@triton.jit(do_not_specialize=["H", "S", "n_cols", "stride_lb", "stride_lh", "stride_ib",
                               "stride_ih", "stride_ir"])
def _block_sparse_fast(
    Q, K, V, O, LSE, SABI,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    stride_ib, stride_ih, stride_ir, stride_ic,
    H, S, D, BQ, BKV, n_cols, qk_scale,
    RETURN_LSE: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_TMA: tl.constexpr, NEG_SCALE: tl.constexpr, EVEN_D: tl.constexpr,
):
    """Grid (query tiles, B * H): tile pid_m of batch pid_bh // H, head pid_bh % H."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = (pid_bh // H).to(tl.int64)
    h = (pid_bh % H).to(tl.int64)
    row0 = pid_m * BLOCK_M
    brow = row0 // BQ  # BLOCK_M divides BQ: a tile lies in one block-row
    q = _load_q(Q, b * stride_qb + h * stride_qh, stride_qs, row0, S, D, BLOCK_M, BLOCK_D, USE_TMA)
    k_src, v_src = _kv_source(K, V, b * stride_kb + h * stride_kh, b * stride_vb + h * stride_vh,
                              S, D, stride_ks, stride_vs, BLOCK_N, BLOCK_D, USE_TMA)
    row_ptr = SABI + b * stride_ib + h * stride_ih + brow.to(tl.int64) * stride_ir
    n_listed = listed_blocks(row_ptr, stride_ic, n_cols)
    # Only the block that holds key S - 1 can be partial, and a row lists blocks ascending: if it
    # is listed, it is the last one. Every other listed block is BKV whole keys.
    last = tl.load(row_ptr + (n_listed - 1) * stride_ic)
    partial = (last + 1) * BKV > S
    n_whole = n_listed - partial.to(tl.int32)
    per_block = BKV // BLOCK_N
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    blk = tl.load(row_ptr)
    for it in range(0, n_whole * per_block):
        j = it // per_block
        start = blk * BKV + (it - j * per_block) * BLOCK_N
        start = tl.multiple_of(start, BLOCK_N)
        # The next tile's block, read a step ahead (clamped: the row has no entry past its last).
        blk = tl.load(row_ptr + tl.minimum((it + 1) // per_block, n_listed - 1) * stride_ic)
        k, v = _load_kv(k_src, v_src, start, stride_ks, stride_vs, S, D, BLOCK_N, BLOCK_D,
                        USE_TMA, EVEN_D, False)
        m_i, l_i, acc = _step(q, k, v, m_i, l_i, acc, qk_scale, None, DOT_PRECISION, False,
                              NEG_SCALE)
    if partial:
        offs_n = tl.arange(0, BLOCK_N)
        for start in range(last * BKV, S, BLOCK_N):
            k, v = _load_kv(k_src, v_src, start, stride_ks, stride_vs, S, D, BLOCK_N, BLOCK_D,
                            USE_TMA, EVEN_D, True)
            m_i, l_i, acc = _step(q, k, v, m_i, l_i, acc, qk_scale, (start + offs_n)[None, :] < S,
                                  DOT_PRECISION, True, NEG_SCALE)
    _store_out(O, LSE, b * stride_ob + h * stride_oh, b * stride_lb + h * stride_lh, stride_os,
               row0, S, D, acc, m_i, l_i, RETURN_LSE, BLOCK_M, BLOCK_D)


# --- Planning ------------------------------------------------------------------------------

#: Fast-path tiles (BLOCK_M, BLOCK_N, num_warps, num_stages, USE_TMA) for 16-bit inputs with
#: BLOCK_D = 128, the default first. From an H100 sweep (docs/hardware-log.md, the dense core; device time,
#: do_bench medians): causal S=16384 Hq32 Hkv8: 128x128 w8 s3 TMA 532-553 TFLOP/s (the portable
#: kernel's 128x128 pointer tiles: 484-494); non-causal S=32768 H3: 569 (pointer loads 478);
#: 128x64 and two stages lose 4-15%, four warps lose half.
_TILES_D128 = [(128, 128, 8, 3, True), (128, 64, 8, 3, True), (128, 128, 8, 3, False)]
#: D=64, S up to 2048 (the prefill bench shape, S=1024 causal): descriptors cost more than they
#: save on such short rows (64x64 w4 s3: 271 us with TMA, 232 with pointer loads).
_TILES_D64_SHORT = [(64, 64, 4, 3, False), (128, 64, 8, 3, False), (64, 64, 4, 3, True)]
_SHORT = 2048


def tma_ok(*tensors) -> bool:
    """Tensor descriptors need 16-byte aligned bases and strides and a unit last stride."""
    for t in tensors:
        size = t.element_size()
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any((s * size) % 16 for s in t.stride()[:-1]):
            return False
    return True


class DescriptorScratch:
    """Triton's allocator for the scratch where a launch builds its device-side descriptors
    (a few hundred bytes per program), asked for on every launch of a kernel that makes them.

    One buffer per (device, stream), kept and grown to the largest request: launches on one
    stream run in order, so a launch never meets the previous one's descriptors still in use,
    the same reuse the caching allocator makes of a block freed on that stream, without the
    allocation on every call. While a graph is being captured each launch gets a buffer of its
    own from the graph's pool (a replay may run beside eager launches on another stream)."""

    def __init__(self, device_type: str = "cuda"):
        self.device_type = device_type
        self.buffers: dict = {}

    def __call__(self, size: int, alignment: int, stream):
        import torch

        if torch.cuda.is_current_stream_capturing():
            return torch.empty(size, dtype=torch.int8, device=self.device_type)
        key = (torch.cuda.current_device(), stream)
        buf = self.buffers.get(key)
        if buf is None or buf.numel() < size or buf.data_ptr() % max(1, alignment):
            buf = self.buffers[key] = torch.empty(size, dtype=torch.int8, device=self.device_type)
        return buf


def ensure_allocator() -> None:
    """Device-side descriptors live in a small per-launch scratch buffer that Triton asks an
    allocator for; install ``DescriptorScratch`` unless the user has set their own."""
    from triton.runtime import _allocation

    if isinstance(_allocation._allocator.get(), _allocation.NullAllocator):
        triton.set_allocator(DescriptorScratch())


def fast_candidates(S: int, D: int, dtype) -> list[dict]:
    """Fast-path configs the tuner may choose from on a GPU; the first is the default. Shapes
    the sweep did not cover take the portable kernel's tiles, through descriptors past short
    rows."""
    block_d = max(16, triton.next_power_of_2(D))
    if dtype.itemsize == 2 and block_d == 128:
        tiles = _TILES_D128
    elif dtype.itemsize == 2 and block_d == 64 and S <= _SHORT:
        tiles = _TILES_D64_SHORT
    else:
        tiles = [(c["BLOCK_M"], c["BLOCK_N"], c["num_warps"], c["num_stages"], S > _SHORT)
                 for c in prefill_candidates(D, dtype)]
    return [dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d, num_warps=w, num_stages=st, USE_TMA=tma)
            for bm, bn, w, st, tma in tiles]


def finish_config(cfg: dict, S: int, D: int, tensors: tuple, interpret: bool) -> dict:
    """Descriptors only where every tensor can take one; the interpreter's tiles are its own."""
    cfg = dict(cfg)
    if interpret:
        bm = min(128, max(16, triton.next_power_of_2(S)))
        cfg.update(BLOCK_M=bm, BLOCK_N=bm, num_warps=4, num_stages=1)
    cfg["USE_TMA"] = bool(cfg.get("USE_TMA")) and tma_ok(*tensors)
    cfg["EVEN_D"] = cfg["BLOCK_D"] == D
    return cfg


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hq", "S", "G", "stride_lb", "stride_lh", "stride_ls"])
def _varlen_fast(
    Q, K, V, O, LSE, SEQ,
    stride_qb, stride_qh, stride_qs,
    stride_kb, stride_kh, stride_ks,
    stride_vb, stride_vh, stride_vs,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh, stride_ls,
    Hq, S, D, G, qk_scale,
    PACKED: tl.constexpr, CAUSAL: tl.constexpr, RETURN_LSE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    USE_TMA: tl.constexpr, NEG_SCALE: tl.constexpr, EVEN_D: tl.constexpr,
):
    """``prefill_varlen``'s kernel on the fast path: grid (query blocks, B * Hq), causal blocks with
    the most keys first. A sequence is tokens [start, end) of its (batch, head) rows: descriptors
    end at ``end``, so keys and queries past it read as zeros, whichever layout."""
    tile_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - tile_m
    else:
        pid_m = tile_m
    b = (pid_bh // Hq).to(tl.int64)
    h = (pid_bh % Hq).to(tl.int64)
    hk = h // G
    if PACKED:  # SEQ = cu_seqlens; batch strides are 0, the token carries the sequence
        start = tl.load(SEQ + b)
        seq_len = tl.load(SEQ + b + 1) - start
        rows = seq_len
    else:  # SEQ = lengths; rows [len, S) are written as zeros
        start = tl.load(SEQ + b) * 0
        seq_len = tl.load(SEQ + b)
        rows = S
    end = start + seq_len
    row0 = pid_m * BLOCK_M
    offs_m = row0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    row_ok = offs_m < seq_len
    q = _load_q(Q, b * stride_qb + h * stride_qh, stride_qs, start + row0, end, D, BLOCK_M, BLOCK_D,
                USE_TMA)
    k_src, v_src = _kv_source(K, V, b * stride_kb + hk * stride_kh, b * stride_vb + hk * stride_vh,
                              end, D, stride_ks, stride_vs, BLOCK_N, BLOCK_D, USE_TMA)
    # Keys [0, lo) are visible to every row of the block; [lo, hi) get the per-row mask. A block
    # with no valid row visits nothing; one with a valid row sees key 0 in its first tile.
    if CAUSAL:
        kv_end = tl.minimum(offs_m + 1, seq_len)
        lo = tl.minimum(row0, seq_len) // BLOCK_N * BLOCK_N
        hi = tl.minimum(row0 + BLOCK_M, seq_len)
    else:
        kv_end = tl.zeros([BLOCK_M], dtype=tl.int32) + seq_len
        lo = seq_len // BLOCK_N * BLOCK_N
        hi = seq_len
    live = row0 < seq_len
    lo = tl.where(live, lo, 0)
    hi = tl.where(live, hi, 0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for kv in range(0, lo, BLOCK_N):
        k, v = _load_kv(k_src, v_src, start + kv, stride_ks, stride_vs, end, D, BLOCK_N, BLOCK_D,
                        USE_TMA, EVEN_D, False)
        m_i, l_i, acc = _step(q, k, v, m_i, l_i, acc, qk_scale, None, DOT_PRECISION, False,
                              NEG_SCALE)
    for kv in range(lo, hi, BLOCK_N):
        k, v = _load_kv(k_src, v_src, start + kv, stride_ks, stride_vs, end, D, BLOCK_N, BLOCK_D,
                        USE_TMA, EVEN_D, True)
        visible = (kv + offs_n)[None, :] < kv_end[:, None]
        m_i, l_i, acc = _step(q, k, v, m_i, l_i, acc, qk_scale, visible, DOT_PRECISION, True,
                              NEG_SCALE)
    l_safe = tl.where(row_ok, l_i, 1.0)
    o = tl.where(row_ok[:, None], acc / l_safe[:, None], 0.0)
    cols = tl.arange(0, BLOCK_D)
    tok = start.to(tl.int64) + offs_m
    tl.store(O + b * stride_ob + h * stride_oh + tok[:, None] * stride_os + cols[None, :],
             o.to(O.dtype.element_ty), mask=(offs_m[:, None] < rows) & (cols[None, :] < D))
    if RETURN_LSE:
        lse = tl.where(row_ok, (m_i + tl.log2(l_safe)) * 0.6931471805599453, float("-inf"))
        tl.store(LSE + b * stride_lb + h * stride_lh + tok * stride_ls, lse, mask=offs_m < rows)
