"""The CUDA fast path of the Mustafar kernels (docs/contract.md section 9): fewer operations
per decoded element, the head contraction on tensor cores, the next step's loads in flight.

Both formulations are one shape of work: a step decodes NT tiles into an fp16 operand
``B [NT, 64]`` (row = tile, column = element j of the tile) and contracts it with
``A [G, NT]`` (keys: ``q[h, c] * scale``, the D channel tiles of one 64-token block; values:
``p[h, s] * scale``, one channel block of NT tokens). ``A`` (fp32) is split into hi + lo fp16
parts (``_split_fp16``), so fp32 precision is kept; ``B`` holds exact small integers (2-bit:
``code - zero``) or the fp16 values themselves. The 2-bit keys kernel fixes the split's power
of two once per program from max |q| * max |scale| over its blocks (``_keys_unit``), so its
steps run no cross-thread reduction (and no barrier for one).

* 2-bit (``_half_decode``): one thread per half tile loads its bitmap word and at most 3 code
  words once and walks its 4 bitmap bytes. Per byte, a row of a 256-row table
  (``prmt_table_rows``) holds the byte-permute selectors that put each element's code (kept:
  its slot among the kept; unkept: a fill byte) in element order; the fill is the tile's zero,
  so fp16 ``(1024 + code) - (1024 + zero)`` (two more permutes and a half2 subtract per 4
  elements) is exactly ``kept ? code - zero : 0`` with no select. A step holding a tile whose
  zero is outside [0, 3] (all-positive or flat tiles, offset values) contracts ``A @ C -
  (A zero) @ K`` instead, C the codes and K the kept mask decoded the same way (``_odd_half``).
* 16-bit (``_octet16_decode``): one thread per bitmap byte, one predicated 2-byte load per
  element at its slot: the load unit does the gather.
* Prefetch: a step issues the next step's metadata loads (bitmaps, offsets, zeros, scales, p)
  before decoding its own; the decode's code-word loads depend on them.

``prmt`` and ``sub.f16x2`` are inline PTX and the popcount is CUDA's; in the interpreter (the
``HW`` constexpr off) exact emulations run instead, which is how CPU CI checks this path. The
portable kernels in ``kernels.mustafar`` stay what Ascend, the interpreter and compile-only
run by default.
"""
from __future__ import annotations

import triton
import triton.language as tl

try:  # CUDA's popcount (one instruction); the interpreter takes the SWAR form
    from triton.language.extra.cuda import libdevice as _libdevice
except ImportError:  # pragma: no cover - a Triton without the CUDA extras
    _libdevice = None


def prmt_table_rows() -> list:
    """The 256 rows of the 2-bit decode's table (int64), indexed by a bitmap byte y (element i
    kept iff bit 7 - i): bits 0-15 the byte-permute selector of elements 0-3 (nibble i: the
    element's slot if kept, else 4, the fill byte), bits 16-31 that of elements 4-7 (slot
    minus the slot of element 4), bits 32-35 twice the slot of element 4, bits 59-63 twice the
    count kept: the code-stream bits each consumes, each read from the high word by one
    operation (a mask, a shift)."""
    rows = []
    for y in range(256):
        kept = [(y >> (7 - i)) & 1 for i in range(8)]
        rank = [sum(kept[:i]) for i in range(8)]
        lo = sum((rank[i] if kept[i] else 4) << (4 * i) for i in range(4))
        hi = sum((rank[i] - rank[4] if kept[i] else 4) << (4 * (i - 4)) for i in range(4, 8))
        row = lo | (hi << 16) | (2 * rank[4] << 32) | (2 * sum(kept) << 59)
        rows.append(row - (1 << 64) if row >= 1 << 63 else row)  # as a signed int64
    return rows


@triton.jit
def _cat8(a0, a1, a2, a3, a4, a5, a6, a7):
    """[..., 8] with [..., i] = a_i: a join tree (new axes in registers), leaves in bit-reversed
    order so that the flattened index is i."""
    z = tl.join(tl.join(tl.join(a0, a4), tl.join(a2, a6)), tl.join(tl.join(a1, a5), tl.join(a3, a7)))
    if len(a0.shape) == 1:
        r = tl.reshape(z, (a0.shape[0], 8))
    else:
        r = tl.reshape(z, (a0.shape[0], a0.shape[1], 8))
    return r


@triton.jit
def _cat4(a0, a1, a2, a3):
    """[..., 4] with [..., i] = a_i (join tree, leaves in bit-reversed order)."""
    z = tl.join(tl.join(a0, a2), tl.join(a1, a3))
    return tl.reshape(z, (a0.shape[0], 4))


@triton.jit
def _spread(y):
    """uint32 byte y -> nibble k holds bit k of y (multiplies without carries)."""
    x = (y * 0x1001) & 0x000F000F
    x = (x * 0x41) & 0x03030303
    return (x * 9) & 0x11111111


@triton.jit
def _popc32(x, HW: tl.constexpr):
    if HW:
        r = _libdevice.popc(x.to(tl.int32, bitcast=True))
    else:
        x = x - ((x >> 1) & 0x55555555)
        x = (x & 0x33333333) + ((x >> 2) & 0x33333333)
        x = (x + (x >> 4)) & 0x0F0F0F0F
        r = ((x * 0x01010101) >> 24).to(tl.int32)
    return r


@triton.jit
def _prmt(a, b, c, HW: tl.constexpr):
    """CUDA's byte permute (uint32): result byte n = byte (c >> 4n) & 7 of {b, a} (a = bytes
    0-3). Selectors never set bit 3 here (no sign replication), which the emulation leaves out."""
    if HW:
        r = tl.inline_asm_elementwise("prmt.b32 $0, $1, $2, $3;", "=r,r,r,r",
                                      [a.to(tl.int32, bitcast=True), b.to(tl.int32, bitcast=True),
                                       c.to(tl.int32, bitcast=True)],
                                      dtype=tl.int32, is_pure=True, pack=1).to(tl.uint32, bitcast=True)
    else:
        ab = (b.to(tl.uint64) << 32) | a.to(tl.uint64)
        r = ((ab >> (8 * (c & 7)).to(tl.uint64)) & 0xFF).to(tl.uint32)
        r |= ((ab >> (8 * ((c >> 4) & 7)).to(tl.uint64)) & 0xFF).to(tl.uint32) << 8
        r |= ((ab >> (8 * ((c >> 8) & 7)).to(tl.uint64)) & 0xFF).to(tl.uint32) << 16
        r |= ((ab >> (8 * ((c >> 12) & 7)).to(tl.uint64)) & 0xFF).to(tl.uint32) << 24
    return r


@triton.jit
def _code_bytes(w):
    """The 4 two-bit codes in the low byte of w (LSB first) as bytes 0-3."""
    x = ((w & 0xFF) * 0x1001) & 0x000F000F
    return (x * 0x41) & 0x03030303


@triton.jit
def _byte_pairs(e, h2, F, HW: tl.constexpr):
    """Bytes 0-3 of e (codes 0..3) as 4 fp16 values byte - F: the halves 0x64NN are 1024 + NN,
    minus 1024 + F (h2 holds it twice, as fp16x2 bits); exact."""
    if HW:
        v0, v1, v2, v3 = tl.inline_asm_elementwise(
            "{ .reg .b32 t, p, q;\n"
            " mov.b32 t, 0x64646464;\n"
            " prmt.b32 p, $4, t, 0x4140;\n"
            " prmt.b32 q, $4, t, 0x4342;\n"
            " sub.f16x2 p, p, $5;\n"
            " sub.f16x2 q, q, $5;\n"
            " mov.b32 {$0, $1}, p;\n"
            " mov.b32 {$2, $3}, q; }",
            "=h,=h,=h,=h,r,r", [e.to(tl.int32, bitcast=True), h2.to(tl.int32, bitcast=True)],
            dtype=(tl.float16, tl.float16, tl.float16, tl.float16), is_pure=True, pack=1)
    else:
        f = (F + 1024).to(tl.float16)
        v0 = ((e & 0xFF) | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - f
        v1 = (((e >> 8) & 0xFF) | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - f
        v2 = (((e >> 16) & 0xFF) | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - f
        v3 = (((e >> 24) & 0xFF) | 0x6400).to(tl.int16).to(tl.float16, bitcast=True) - f
    return v0, v1, v2, v3


@triton.jit
def _prmt_octet(y, win, F4, h2, F, LUT, HW: tl.constexpr):
    """The 8 fp16 values kept ? code - F : 0 of one octet (bitmap byte y, its code stream win,
    LSB first; F4 / h2 the fill byte and 1024 + F as byte and fp16x2 patterns), then the stream
    bits it used (2 * count kept)."""
    e = tl.load(LUT + y).to(tl.uint64, bitcast=True)
    sel = e.to(tl.uint32)
    top = (e >> 32).to(tl.uint32)
    used = top >> 27
    # (The permute reads only the low 16 bits of its selector: no mask for elements 0-3.)
    lo = _prmt(_code_bytes(win), F4, sel, HW)
    hi = _prmt(_code_bytes(win >> (top & 15)), F4, sel >> 16, HW)
    v0, v1, v2, v3 = _byte_pairs(lo, h2, F, HW)
    v4, v5, v6, v7 = _byte_pairs(hi, h2, F, HW)
    return v0, v1, v2, v3, v4, v5, v6, v7, used


@triton.jit
def _half_meta(BITMAPS, OFFSETS, ZERO, tile0, tstride, n_ok, NT: tl.constexpr):
    """Per half tile (u = 2 t + half of NT * 2): the tile's bitmap, packed offset, word count
    and zero (tiles from n_ok on: empty). Split from the decode so a loop can load the next
    step's while it decodes this one."""
    u = tl.arange(0, NT * 2)
    t = u // 2
    ok = t < n_ok
    tile = tile0 + t * tstride
    bm = tl.load(BITMAPS + tile, mask=ok, other=0)
    off = tl.load(OFFSETS + tile, mask=ok, other=0)
    nw = tl.load(OFFSETS + tile + 1, mask=ok, other=0) - off
    F = tl.load(ZERO + tile, mask=ok, other=0)
    return bm, off, nw, F


@triton.jit
def _half_decode(bm, off, nw, F, PACKED, LUT, NT: tl.constexpr, HW: tl.constexpr,
                 KEPT: tl.constexpr = False):
    """fp16 [NT, 64]: kept ? code - F : 0 for 2-bit tiles (F: the tile's zero, in [0, 3]), one
    thread per half tile (u = 2 t + half, 32 elements) from the metadata ``_half_meta`` loaded:
    the thread loads at most 3 code words once and walks its 4 bitmap bytes, consuming the code
    stream as it goes (``_prmt_octet``). KEPT: every code 1 (no code words read), so with F = 0
    the result is the 0/1 kept mask."""
    second = (tl.arange(0, NT * 2) % 2) == 1
    bm = bm.to(tl.uint64, bitcast=True)
    hi = (bm >> 32).to(tl.uint32)
    half = tl.where(second, bm.to(tl.uint32), hi)
    # The second half's codes start after the first half's kept ones.
    start = tl.where(second, _popc32(hi, HW), 0)
    if KEPT:
        x = tl.full(start.shape, 0x5555555555555555, tl.uint64)
    else:
        wi = start >> 4
        w0 = tl.load(PACKED + off + wi, mask=wi < nw, other=0).to(tl.uint32, bitcast=True)
        w1 = tl.load(PACKED + off + wi + 1, mask=wi + 1 < nw, other=0).to(tl.uint32,
                                                                           bitcast=True)
        w2 = tl.load(PACKED + off + wi + 2, mask=wi + 2 < nw, other=0).to(tl.uint32,
                                                                           bitcast=True)
        sh = (2 * (start & 15)).to(tl.uint64)
        lo64 = (w0.to(tl.uint64) | (w1.to(tl.uint64) << 32)) >> sh
        # Bits 64.. of the 96-bit stream, moved down by sh (two shifts: sh may be 0).
        x = lo64 | ((w2.to(tl.uint64) << 31) << (33 - sh))
    F4 = F.to(tl.uint32) * 0x01010101
    h2 = (F.to(tl.uint32) + 0x6400) * 0x00010001
    a0, a1, a2, a3, a4, a5, a6, a7, n = _prmt_octet(half >> 24, x.to(tl.uint32), F4, h2, F, LUT,
                                                    HW)
    x = x >> n.to(tl.uint64)
    b0, b1, b2, b3, b4, b5, b6, b7, n = _prmt_octet((half >> 16) & 0xFF, x.to(tl.uint32), F4, h2,
                                                    F, LUT, HW)
    x = x >> n.to(tl.uint64)
    c0, c1, c2, c3, c4, c5, c6, c7, n = _prmt_octet((half >> 8) & 0xFF, x.to(tl.uint32), F4, h2,
                                                    F, LUT, HW)
    x = x >> n.to(tl.uint64)
    d0, d1, d2, d3, d4, d5, d6, d7, n = _prmt_octet(half & 0xFF, x.to(tl.uint32), F4, h2, F, LUT,
                                                    HW)
    # Octets, then elements as the last joins: registers in element order (vector stores).
    z = _cat8(_cat4(a0, b0, c0, d0), _cat4(a1, b1, c1, d1), _cat4(a2, b2, c2, d2),
              _cat4(a3, b3, c3, d3), _cat4(a4, b4, c4, d4), _cat4(a5, b5, c5, d5),
              _cat4(a6, b6, c6, d6), _cat4(a7, b7, c7, d7))   # [NT * 2, 4 (octet), 8 (element)]
    return tl.reshape(z, (NT, 64))


@triton.jit
def _octet_meta(BITMAPS, OFFSETS, tile0, tstride, n_ok, NT: tl.constexpr):
    """Per (tile, octet) on the flat axis u = 8 t + o: the tile's bitmap and packed offset
    (tiles from n_ok on: empty). Split from the decode so a loop can load the next step's while
    it decodes this one."""
    t = tl.arange(0, NT * 8) // 8
    ok = t < n_ok
    tile = tile0 + t * tstride
    return tl.load(BITMAPS + tile, mask=ok, other=0), tl.load(OFFSETS + tile, mask=ok, other=0)


@triton.jit
def _octet16_decode(bm, off, PACKED, NT: tl.constexpr, HW: tl.constexpr):
    """fp16 [NT, 64]: 16-bit tiles from the metadata ``_octet_meta`` loaded (one thread per
    (tile, octet): a warp's lanes hold 4 tiles), one predicated 2-byte load per element at its
    slot (the octet's first slot by popcount, the slots inside it by nibble prefix sums), so
    the lanes of a load read 4 tiles' contiguous data, about two cache lines."""
    o = tl.arange(0, NT * 8) % 8
    bm = bm.to(tl.uint64, bitcast=True)
    hi = (bm >> 32).to(tl.uint32)
    lo = bm.to(tl.uint32)
    # Octet o is byte 7 - o; the slots before it are the set bits of the bytes above.
    sh = (24 - 8 * (o & 3)).to(tl.uint32)
    y = tl.where(o < 4, hi >> sh, lo >> sh) & 0xFF
    full = tl.full(o.shape, 0xFFFFFFFF, tl.uint32)
    mhi = tl.where(o >= 4, full, ~(full >> (8 * (o & 3)).to(tl.uint32)))
    mlo = tl.where(o > 4, ~(full >> (8 * ((o - 4) & 3)).to(tl.uint32)), 0)
    r0 = _popc32(hi & mhi, HW) + _popc32(lo & mlo, HW)
    X = _spread(y)
    P = X * 0x11111111
    R = (P >> 28) * 0x11111111 - P          # nibble k: slot of element 7 - k in the octet
    base = PACKED + (off + r0)
    v7 = tl.load(base + (R & 15).to(tl.int32), mask=(X & 1) != 0, other=0.0)
    v6 = tl.load(base + ((R >> 4) & 15).to(tl.int32), mask=((X >> 4) & 1) != 0, other=0.0)
    v5 = tl.load(base + ((R >> 8) & 15).to(tl.int32), mask=((X >> 8) & 1) != 0, other=0.0)
    v4 = tl.load(base + ((R >> 12) & 15).to(tl.int32), mask=((X >> 12) & 1) != 0, other=0.0)
    v3 = tl.load(base + ((R >> 16) & 15).to(tl.int32), mask=((X >> 16) & 1) != 0, other=0.0)
    v2 = tl.load(base + ((R >> 20) & 15).to(tl.int32), mask=((X >> 20) & 1) != 0, other=0.0)
    v1 = tl.load(base + ((R >> 24) & 15).to(tl.int32), mask=((X >> 24) & 1) != 0, other=0.0)
    v0 = tl.load(base + (R >> 28).to(tl.int32), mask=((X >> 28) & 1) != 0, other=0.0)
    z = _cat8(v0, v1, v2, v3, v4, v5, v6, v7)          # [NT * 8, 8]: row u, element i
    return tl.reshape(z, (NT, 64))


@triton.jit
def _split_fp16(a):
    """a (fp32 [M, K]) as hi + lo fp16 parts times a power of two (returned), so that a dot of
    both parts with exact fp16 operands keeps ~22 bits of a over fp32's whole range. The max is
    taken over M (in registers) first, then over K (one cross-thread reduction)."""
    m = tl.max(tl.max(tl.abs(a), 0), 0)
    e = tl.maximum((m.to(tl.int32, bitcast=True) >> 23) & 0xFF, 15)
    a = a * ((268 - e) << 23).to(tl.float32, bitcast=True)  # max |a| now below 2^15
    hi = a.to(tl.float16)
    lo = (a - hi.to(tl.float32)).to(tl.float16)
    return hi, lo, ((e - 14) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _dot2(hi, lo, b, TRANS: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """(hi + lo) @ b, fp32 [M, N]. TRANS 1 computes it as (b^T @ (hi + lo)^T)^T, which puts the
    decoded tiles on the side whose shared-memory layout takes their rows as vector stores; TRANS
    2 returns b^T @ (hi + lo)^T itself ([N, M]: no layout change before a store)."""
    if TRANS > 0:
        bt = tl.trans(b)
        acc = tl.dot(bt, tl.trans(hi), input_precision=DOT_PRECISION)
        acc = tl.dot(bt, tl.trans(lo), acc, input_precision=DOT_PRECISION)
        if TRANS == 1:
            acc = tl.trans(acc)
    else:
        acc = tl.dot(hi, b, input_precision=DOT_PRECISION)
        acc = tl.dot(lo, b, acc, input_precision=DOT_PRECISION)
    return acc


@triton.jit
def _contract2(a, bm, off, nw, F, PACKED, ZERO, LUT, tile0, tstride, n_ok,
                   NT: tl.constexpr, HW: tl.constexpr, DOT_PRECISION: tl.constexpr,
                   TRANS: tl.constexpr):
    """[BLOCK_G, 64] fp32 ([64, BLOCK_G] for TRANS 2): sum over tiles t of a[:, t] * (value of
    element j of tile t) for 2-bit tiles tile0 + t * tstride (t < n_ok) whose metadata
    ``_half_meta`` loaded; a = (q or p) * scale [BLOCK_G, NT] fp32."""
    odd = tl.max(((F < 0) | (F > 3)).to(tl.int32), 0)
    hi, lo, unit = _split_fp16(a)
    if odd == 0:
        b = _half_decode(bm, off, nw, F, PACKED, LUT, NT, HW)
        acc = _dot2(hi, lo, b, TRANS, DOT_PRECISION) * unit
    else:
        acc = _odd_half(a, hi, lo, unit, bm, off, nw, F, PACKED, ZERO, LUT, tile0, tstride, n_ok,
                        NT, HW, DOT_PRECISION, TRANS)
    return acc


@triton.jit
def _odd_half(a, hi, lo, unit, bm, off, nw, F, PACKED, ZERO, LUT, tile0, tstride, n_ok,
              NT: tl.constexpr, HW: tl.constexpr, DOT_PRECISION: tl.constexpr,
              TRANS: tl.constexpr):
    """A step holding a tile whose zero is outside [0, 3] (all-positive or flat tiles, offset
    values): sum_t a (code - zero) kept = a @ C - (a zero) @ K with C the codes (unkept 0) and
    K the kept mask, both decoded like the fast path (exact fp16), a zero split hi + lo."""
    none = tl.zeros_like(F)
    c = _half_decode(bm, off, nw, none, PACKED, LUT, NT, HW)
    acc = _dot2(hi, lo, c, TRANS, DOT_PRECISION) * unit
    t = tl.arange(0, NT)
    zero = tl.load(ZERO + tile0 + t * tstride, mask=t < n_ok, other=0)
    hz, lz, uz = _split_fp16(a * zero.to(tl.float32)[None, :])
    k = _half_decode(bm, off, nw, none, PACKED, LUT, NT, HW, True)
    return acc - _dot2(hz, lz, k, TRANS, DOT_PRECISION) * uz


@triton.jit
def _keys_unit(q, SCALE, ZERO, first, n_blocks, D: tl.constexpr, BLOCK_C: tl.constexpr):
    """One program's 2-bit split of ``q * scale`` (``_split_fp16`` on a unit fixed for all its
    blocks): the power of two ``mult`` that puts max |q| * max |scale| over the program's
    tiles below 2^15, its inverse ``unit``, and whether any tile's zero is outside [0, 3].
    Read once before the block loop, so a step needs no cross-thread reduction. hi + lo keep
    ~22 bits of each product down to an absolute floor of max |q * scale| * 2^-39."""
    # KB blocks a load: one round trip for the usual program (a loop step waits on its loads).
    KB: tl.constexpr = 4
    chans = tl.arange(0, BLOCK_C)
    rows = tl.arange(0, KB)
    m = tl.zeros([KB, BLOCK_C], dtype=tl.float32)
    bad = tl.zeros([KB, BLOCK_C], dtype=tl.int32)
    for i in range(0, n_blocks, KB):
        at = first + (i + rows)[:, None] * D + chans[None, :]
        ok = ((i + rows) < n_blocks)[:, None] & (chans < D)[None, :]
        m = tl.maximum(m, tl.abs(tl.load(SCALE + at, mask=ok, other=0.0)))
        F = tl.load(ZERO + at, mask=ok, other=0)
        bad = bad | ((F < 0) | (F > 3)).to(tl.int32)
    # max |q| raised to 2^-100 at least, so that scale * mult stays finite for q of zeros.
    mq = tl.maximum(tl.max(tl.max(tl.abs(q), 0), 0), 7.888609052210118e-31)
    e = tl.maximum(((mq * tl.max(tl.max(m, 0), 0)).to(tl.int32, bitcast=True) >> 23) & 0xFF, 15)
    mult = ((268 - e) << 23).to(tl.float32, bitcast=True)
    unit = ((e - 14) << 23).to(tl.float32, bitcast=True)
    return mult, unit, tl.max(tl.max(bad, 0), 0)


# sizes unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hkv", "n_tblocks", "blocks_per_prog"])
def _keys_fast(
    Q, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, LUT, O,
    stride_qb, stride_qh, stride_ob, stride_oh, Hkv, n_tblocks, blocks_per_prog,
    D: tl.constexpr, G: tl.constexpr, BITS: tl.constexpr, BLOCK_C: tl.constexpr,
    BLOCK_G: tl.constexpr, HW: tl.constexpr, DOT_PRECISION: tl.constexpr, TRANS: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """scores [B, Hq, S_c]: program (b * Hkv + hk, chunk) runs blocks_per_prog 64-token blocks;
    per block its D key tiles (consecutive) are one step's operand. With PREFETCH a step loads
    the next block's tile metadata (and scales) before it decodes its own, so their latency
    hides behind the decode."""
    bk = tl.program_id(0)
    tb0 = tl.program_id(1) * blocks_per_prog
    b = (bk // Hkv).to(tl.int64)
    hk = (bk % Hkv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    g_ok = offs_g < G
    chans = tl.arange(0, BLOCK_C)
    heads = hk * G + offs_g
    q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + chans[None, :],
                mask=g_ok[:, None] & (chans < D)[None, :], other=0.0).to(tl.float32)
    qs = _split_fp16(q)    # q is fixed per program: 16-bit tiles reuse its split
    tok = tl.arange(0, 64)
    tb_end = tl.minimum(tb0 + blocks_per_prog, n_tblocks)
    if PREFETCH:
        first = (bk.to(tl.int64) * n_tblocks + tb0) * D
        n0 = tl.where(tb0 < tb_end, D, 0)
        if BITS == 2:
            p_bm, p_off, p_nw, p_F = _half_meta(BITMAPS, OFFSETS, ZERO, first, 1, n0, BLOCK_C)
            p_sc = tl.load(SCALE + first + chans, mask=chans < n0, other=0.0)
        else:
            p_bm, p_off = _octet_meta(BITMAPS, OFFSETS, first, 1, n0, BLOCK_C)
    # (After the first step's loads, so that both are in flight together.)
    if BITS == 2:
        mult, unit, odd = _keys_unit(q, SCALE, ZERO, (bk.to(tl.int64) * n_tblocks + tb0) * D,
                                     tb_end - tb0, D, BLOCK_C)
    for tb in range(tb0, tb_end):
        tile0 = (bk.to(tl.int64) * n_tblocks + tb) * D
        n1 = tl.where(tb + 1 < tb_end, D, 0)
        if BITS == 2:
            if PREFETCH:
                c_bm, c_off, c_nw, c_F, c_sc = p_bm, p_off, p_nw, p_F, p_sc
                p_bm, p_off, p_nw, p_F = _half_meta(BITMAPS, OFFSETS, ZERO, tile0 + D, 1, n1,
                                                    BLOCK_C)
                p_sc = tl.load(SCALE + tile0 + D + chans, mask=chans < n1, other=0.0)
            else:
                c_bm, c_off, c_nw, c_F = _half_meta(BITMAPS, OFFSETS, ZERO, tile0, 1, D, BLOCK_C)
                c_sc = tl.load(SCALE + tile0 + chans, mask=chans < D, other=0.0)
            # q * scale on the program's fixed unit: no reduction (and no barrier) per step.
            a = q * (c_sc * mult)[None, :]
            hi = a.to(tl.float16)
            lo = (a - hi.to(tl.float32)).to(tl.float16)
            if odd == 0:
                b2 = _half_decode(c_bm, c_off, c_nw, c_F, PACKED, LUT, BLOCK_C, HW)
                acc = _dot2(hi, lo, b2, TRANS, DOT_PRECISION) * unit
            else:
                acc = _odd_half(q * c_sc[None, :], hi, lo, unit, c_bm, c_off, c_nw, c_F, PACKED,
                                ZERO, LUT, tile0, 1, D, BLOCK_C, HW, DOT_PRECISION, TRANS)
        else:
            if PREFETCH:
                c_bm, c_off = p_bm, p_off
                p_bm, p_off = _octet_meta(BITMAPS, OFFSETS, tile0 + D, 1, n1, BLOCK_C)
            else:
                c_bm, c_off = _octet_meta(BITMAPS, OFFSETS, tile0, 1, D, BLOCK_C)
            b16 = _octet16_decode(c_bm, c_off, PACKED, BLOCK_C, HW)
            acc = _dot2(qs[0], qs[1], b16, TRANS, DOT_PRECISION) * qs[2]
        if TRANS == 2:  # acc is [64 tokens, BLOCK_G]
            tl.store(O + b * stride_ob + heads[None, :] * stride_oh + tb * 64 + tok[:, None],
                     acc, mask=g_ok[None, :])
        else:
            tl.store(O + b * stride_ob + heads[:, None] * stride_oh + tb * 64 + tok[None, :],
                     acc, mask=g_ok[:, None])


# sizes unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hkv", "S", "chunk"])
def _values_fast(
    P, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, LUT, O,
    stride_pb, stride_ph, stride_os, stride_ob, stride_oh, Hkv, S, chunk,
    NC: tl.constexpr, G: tl.constexpr, BITS: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_G: tl.constexpr, HW: tl.constexpr, DOT_PRECISION: tl.constexpr, TRANS: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    """out partials [n_chunks, B, Hq, D]: program (b * Hkv + hk, channel block cb, chunk) sums
    p @ V over the chunk's tokens for channels 64 cb .. 64 cb + 63; a step's operand is the
    value tiles (s, cb) of BLOCK_S tokens. With PREFETCH a step loads the next step's p, scales
    and tile metadata before it decodes its own."""
    bk = tl.program_id(0)
    cb = tl.program_id(1)
    ch = tl.program_id(2)
    b = (bk // Hkv).to(tl.int64)
    hk = (bk % Hkv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    g_ok = offs_g < G
    heads = hk * G + offs_g
    ss = tl.arange(0, BLOCK_S)
    if TRANS == 2:
        acc = tl.zeros([64, BLOCK_G], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_G, 64], dtype=tl.float32)
    s_begin = ch * chunk
    s_end = tl.minimum(s_begin + chunk, S)
    P_row = P + b * stride_pb + heads[:, None] * stride_ph
    if PREFETCH:
        first = (bk.to(tl.int64) * S + s_begin) * NC + cb
        s_ok = s_begin + ss < s_end
        p_p = tl.load(P_row + (s_begin + ss)[None, :], mask=g_ok[:, None] & s_ok[None, :],
                      other=0.0).to(tl.float32)
        if BITS == 2:
            p_sc = tl.load(SCALE + first + ss * NC, mask=s_ok, other=0.0)
            p_bm, p_off, p_nw, p_F = _half_meta(BITMAPS, OFFSETS, ZERO, first, NC,
                                                s_end - s_begin, BLOCK_S)
        else:
            p_bm, p_off = _octet_meta(BITMAPS, OFFSETS, first, NC, s_end - s_begin, BLOCK_S)
    for s0 in range(s_begin, s_end, BLOCK_S):
        tile0 = (bk.to(tl.int64) * S + s0) * NC + cb
        nxt = tile0 + BLOCK_S * NC
        n_next = s_end - s0 - BLOCK_S
        if PREFETCH:
            c_p = p_p
            s_ok = s0 + BLOCK_S + ss < s_end
            p_p = tl.load(P_row + (s0 + BLOCK_S + ss)[None, :],
                          mask=g_ok[:, None] & s_ok[None, :], other=0.0).to(tl.float32)
        else:
            s_ok = s0 + ss < s_end
            c_p = tl.load(P_row + (s0 + ss)[None, :], mask=g_ok[:, None] & s_ok[None, :],
                          other=0.0).to(tl.float32)
        if BITS == 2:
            if PREFETCH:
                c_sc, c_bm, c_off, c_nw, c_F = p_sc, p_bm, p_off, p_nw, p_F
                p_sc = tl.load(SCALE + nxt + ss * NC, mask=s_ok, other=0.0)
                p_bm, p_off, p_nw, p_F = _half_meta(BITMAPS, OFFSETS, ZERO, nxt, NC, n_next,
                                                    BLOCK_S)
            else:
                c_sc = tl.load(SCALE + tile0 + ss * NC, mask=s_ok, other=0.0)
                c_bm, c_off, c_nw, c_F = _half_meta(BITMAPS, OFFSETS, ZERO, tile0, NC, s_end - s0,
                                                    BLOCK_S)
            acc += _contract2(c_p * c_sc[None, :], c_bm, c_off, c_nw, c_F, PACKED, ZERO, LUT,
                                  tile0, NC, s_end - s0, BLOCK_S, HW, DOT_PRECISION, TRANS)
        else:
            if PREFETCH:
                c_bm, c_off = p_bm, p_off
                p_bm, p_off = _octet_meta(BITMAPS, OFFSETS, nxt, NC, n_next, BLOCK_S)
            else:
                c_bm, c_off = _octet_meta(BITMAPS, OFFSETS, tile0, NC, s_end - s0, BLOCK_S)
            b16 = _octet16_decode(c_bm, c_off, PACKED, BLOCK_S, HW)
            hi, lo, unit = _split_fp16(c_p)
            acc += _dot2(hi, lo, b16, TRANS, DOT_PRECISION) * unit
    dst = O + ch * stride_os + b * stride_ob + cb * 64
    if TRANS == 2:
        tl.store(dst + heads[None, :] * stride_oh + tl.arange(0, 64)[:, None],
                 acc.to(O.dtype.element_ty), mask=g_ok[None, :])
    else:
        tl.store(dst + heads[:, None] * stride_oh + tl.arange(0, 64)[None, :],
                 acc.to(O.dtype.element_ty), mask=g_ok[:, None])


# sizes unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["n_chunks", "Hq"])
def _merge_chunks(W, O, n_chunks, stride_wc, stride_wb, stride_wh, stride_ob, stride_oh, Hq,
                  CB: tl.constexpr):
    """O[b, h, 64 j .. 64 j + 63] = the sum over chunks c of W[c, b, h, ...] (W fp32
    [n_chunks, B, Hq, D]): program (b * Hq + h, j) reads CB chunks per load, so a long split is
    one or two loads per program rather than n_chunks dependent ones."""
    b = (tl.program_id(0) // Hq).to(tl.int64)
    h = (tl.program_id(0) % Hq).to(tl.int64)
    d = tl.program_id(1) * 64 + tl.arange(0, 64)
    c = tl.arange(0, CB)
    acc = tl.zeros([64], dtype=tl.float32)
    for c0 in range(0, n_chunks, CB):
        cc = c0 + c
        w = tl.load(W + cc[:, None].to(tl.int64) * stride_wc + b * stride_wb + h * stride_wh
                    + d[None, :], mask=(cc < n_chunks)[:, None], other=0.0)
        acc += tl.sum(w, 0)
    tl.store(O + b * stride_ob + h * stride_oh + d, acc.to(O.dtype.element_ty))
