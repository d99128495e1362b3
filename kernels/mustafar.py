"""Mustafar sparse-KV decode (docs/contract.md section 9) in Triton, over the compressed format of
``kernels.mustafar_format``: the kernels decode bitmaps/offsets/packed tiles themselves, the
dense cache never exists in memory.

* ``mustafar_keys(q, kc)``: fp32 scores ``q . k`` [B, Hq, S_c]. A work item is (batch, KV head,
  64-token block): its D key tiles (one per channel) are consecutive, decoded BLOCK_C at a time
  and contracted with the G query heads of the group.
* ``mustafar_values(p, vc)``: ``p @ V`` [B, Hq, D]. A work item is (batch, KV head, token chunk):
  the chunk's value tiles (D / 64 per token) are consecutive too; long caches give several chunks,
  whose fp32 partials ``_sum_chunks`` adds into ``out``.
* ``mustafar_decode(q, kc, vc)``: the two, with an fp32 softmax in torch between them.

Decoding a run of consecutive tiles (``_decode_tiles``) reads each buffer as one contiguous
vector: bitmaps, offsets, scale/zero, and the packed data as one window
``[offsets[first tile], offsets[last tile + 1])``. Element j of a tile is kept iff bit 63 - j of
its bitmap is set; its slot among the kept values comes from SWAR arithmetic on the bitmap's
bytes (per 8-element octet: a bit-reversed spread into nibbles, one multiply for the prefix
counts inside the octet, byte popcounts for the octet's first slot), constant masks and
shifts only. The value is then a 1-D ``tl.gather`` from the window: fp16 values directly; 2-bit
words (seen as fp32, the only gather dtype Ascend's A2/A3 take) two per octet, giving the
octet's 16 code bits. No address depends on an element, so Ascend compiles no scalar loads.

Paths: the portable kernels (``_mustafar_keys_fwd``, ``_mustafar_values_fwd``) run everywhere
(interpreter, Ascend, compile-only); on Ascend their grid is one program per vector core, each
looping over work items (a program is bound to a physical core there), and the element axis is
the inner one (UB use). The CUDA fast path (``kernel_path`` fast / auto on CUDA) is
``kernels/mustafar_fast.py``: a cheaper decode per element, the head contraction on
tensor cores.

Every launch goes through ``_checks.launch`` as a ``LaunchPlan`` built by a ``*_plan``
function. Validation (types, shapes, buffer sizes, offsets and per-tile popcounts) runs before
any launch.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._checks import (DOT_INPUT_PRECISION, on_ascend, FLOAT_DTYPES, cdiv, check_flag, check_gqa,
                      check_launchable, check_nonempty, check_output, check_scale,
                      check_tensor, is_interpret, is_live, launch, LaunchPlan, memory_span,
                      next_pow2, use_fast_path)
from ._grid import plan_grid
from .mustafar_format import CODES_PER_WORD, TILE, Compressed, mask_from_bitmaps, tile_grid
from . import mustafar_fast as _fast

MAX_HEAD_DIM = 256


@triton.jit
def _octets(v, NT: tl.constexpr):
    """[NT] per tile -> [NT * 8] per octet (octet m belongs to tile m // 8)."""
    return tl.reshape(tl.broadcast_to(v[:, None], (NT, 8)), (NT * 8,))


@triton.jit
def _el(v, I_OUTER: tl.constexpr):
    """A per-octet [M] vector as the octet axis of the per-element tensors."""
    if I_OUTER:
        r = v[None, :]
    else:
        r = v[:, None]
    return r


@triton.jit
def _decode_tiles(BITMAPS, OFFSETS, PACKED, ZERO, tile0, n_tiles,
                  NT: tl.constexpr, BITS: tl.constexpr, I_OUTER: tl.constexpr):
    """fp32 [8, NT * 8] (I_OUTER) or [NT * 8, 8]: tiles tile0 .. tile0 + NT - 1 (those past n_tiles
    decode to zeros); element j of tile t is at element index j % 8 and octet index 8 t + j // 8.
    16 bits: the kept values; 2 bits: code - zero. I_OUTER suits a GPU (a thread then holds whole
    octets, so per-octet work is done once); Ascend's UB prefers the element axis last."""
    M: tl.constexpr = NT * 8
    t = tl.arange(0, NT)
    o = tl.arange(0, M) & 7
    i = _el(tl.arange(0, 8), not I_OUTER)
    ok = t < n_tiles
    bm = tl.load(BITMAPS + tile0 + t, mask=ok, other=0)
    start = tl.load(OFFSETS + tile0 + t, mask=ok, other=0)
    end = tl.load(OFFSETS + tile0 + 1 + t, mask=ok, other=0)
    # The tiles' data is one contiguous range of PACKED: one window load and gathers from it,
    # never per-element addresses (Ascend turns those into scalar loads).
    lo = tl.min(tl.where(ok, start, 2147483647), 0)
    hi = tl.max(end, 0)
    WMAX: tl.constexpr = NT * (64 if BITS == 16 else 4)
    w = tl.arange(0, WMAX)
    win = tl.load(PACKED + lo + w, mask=w < hi - lo, other=0)
    rel = _octets(tl.where(ok, start - lo, 0), NT)

    # Octet o of a tile is bitmap byte 7 - o; its element i is bit 7 - i of that byte.
    hi32 = _octets((bm >> 32).to(tl.int32), NT)
    half = tl.where(o < 4, hi32, _octets(bm.to(tl.int32), NT))
    y = (half >> (24 - 8 * (o & 3))) & 0xFF
    # Bit-reversed spread: nibble i of x holds element i, so a multiply gives prefix counts.
    x = ((y & 0x0F) << 16) | (y >> 4)
    x = ((x & 0x00030003) << 8) | ((x >> 2) & 0x00030003)
    x = ((x & 0x01010101) << 4) | ((x >> 1) & 0x01010101)
    # The octet's first slot in the tile: kept elements of the bytes above it, from byte
    # popcounts (byte k of bc * 0x01010101 sums bytes 0..k).
    bc = half - ((half >> 1) & 0x55555555)
    bc = (bc & 0x33333333) + ((bc >> 2) & 0x33333333)
    bc = ((bc + (bc >> 4)) & 0x0F0F0F0F) * 0x01010101
    hc = hi32 - ((hi32 >> 1) & 0x55555555)
    hc = (hc & 0x33333333) + ((hc >> 2) & 0x33333333)
    hc = (((hc + (hc >> 4)) & 0x0F0F0F0F) * 0x01010101) >> 24
    first = ((bc >> 24) & 0xFF) - ((bc >> (24 - 8 * (o & 3))) & 0xFF) + tl.where(o < 4, 0, hc)
    kept = ((_el(x, I_OUTER) >> (4 * i)) & 1) != 0
    if BITS == 16:
        # Nibble i: kept elements before i (<= 7, so no carry between nibbles).
        before = (_el(x * 0x11111110, I_OUTER) >> (4 * i)) & 15
        idx = tl.where(kept, _el(rel + first, I_OUTER) + before, 0)
        vals = tl.gather(win, tl.reshape(idx, (8 * M,)), 0)
        out = tl.where(kept, tl.reshape(vals, kept.shape).to(tl.float32), 0.0)
    else:
        # The octet's <= 8 codes: 16 bits at 2 * first in the tile's stream (word first // 16
        # and the next), fetched by 1-D gathers from the window seen as fp32.
        wf = win.to(tl.float32, bitcast=True)
        widx = rel + (first >> 4)
        w0 = tl.gather(wf, tl.minimum(widx, WMAX - 1), 0).to(tl.uint32, bitcast=True)
        w1 = tl.gather(wf, tl.minimum(widx + 1, WMAX - 1), 0).to(tl.uint32, bitcast=True)
        sh = ((first & 15) * 2).to(tl.uint32)
        codes = (((w0 >> sh) | ((w1 << 1) << (31 - sh))) & 0xFFFF).to(tl.int32)
        # Nibble i: twice the kept elements before i (<= 14), the shift of element i's code.
        csh = (_el(x * 0x22222220, I_OUTER) >> (4 * i)) & 15
        code = (_el(codes, I_OUTER) >> csh) & 3
        zero = tl.load(ZERO + tile0 + t, mask=ok, other=0).to(tl.float32) + 8388608.0
        # 2^23 + code as fp32 bits, minus 2^23 + zero: exact, and no int-to-float conversion.
        val = (code | 0x4B000000).to(tl.float32, bitcast=True) - _el(_octets(zero, NT), I_OUTER)
        out = tl.where(kept, val, 0.0)
    return out


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hkv", "n_tblocks", "n_work", "n_programs"])
def _mustafar_keys_fwd(
    Q, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, O,
    stride_qb, stride_qh, stride_ob, stride_oh,
    Hkv, D, n_tblocks, n_work, n_programs,
    G: tl.constexpr, BITS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr,
    I_OUTER: tl.constexpr,
):
    offs_c = tl.arange(0, BLOCK_C)
    offs_g = tl.arange(0, BLOCK_G)
    r8 = tl.arange(0, 8)
    tok = _el(r8, I_OUTER) * 8 + _el(r8, not I_OUTER)  # element i of octet o is token 8 o + i
    # A persistent loop (one trip on CUDA): Ascend binds a program to a core.
    for work in range(tl.program_id(0), n_work, n_programs):
        bk = work // n_tblocks
        t = work % n_tblocks
        b = (bk // Hkv).to(tl.int64)
        hk = (bk % Hkv).to(tl.int64)
        # Key tile (t, c) is local index t * D + c: the block's D tiles are consecutive.
        tile0 = (bk.to(tl.int64) * n_tblocks + t) * D
        acc = tl.zeros([BLOCK_G, 8, 8], dtype=tl.float32)
        for c0 in range(0, D, BLOCK_C):
            k = _decode_tiles(BITMAPS, OFFSETS, PACKED, ZERO, tile0 + c0, D - c0, BLOCK_C, BITS,
                              I_OUTER)
            chans = c0 + offs_c
            c_ok = chans < D
            if BITS == 2:
                scale = tl.load(SCALE + tile0 + chans, mask=c_ok, other=0.0)
            for g in range(G):  # not unrolled: one head's temporaries at a time (Ascend UB)
                q = tl.load(Q + b * stride_qb + (hk * G + g) * stride_qh + chans, mask=c_ok,
                            other=0.0).to(tl.float32)
                if BITS == 2:
                    q = q * scale  # folded into q: k = (code - zero) * scale
                part = k * _el(_octets(q, BLOCK_C), I_OUTER)
                if I_OUTER:
                    part = tl.sum(tl.reshape(part, (8, BLOCK_C, 8)), 1)
                else:
                    part = tl.sum(tl.reshape(part, (BLOCK_C, 8, 8)), 0)
                acc += tl.where(offs_g[:, None, None] == g, part[None, :, :], 0.0)
        heads = hk * G + offs_g
        tl.store(O + b * stride_ob + heads[:, None, None] * stride_oh + t.to(tl.int64) * 64
                 + tok[None, :, :], acc, mask=(offs_g < G)[:, None, None])


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hkv", "S", "chunk", "n_chunks", "n_work", "n_programs"])
def _mustafar_values_fwd(
    P, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, O,
    stride_pb, stride_ph, stride_os, stride_ob, stride_oh,
    Hkv, S, chunk, n_chunks, n_work, n_programs,
    G: tl.constexpr, BITS: tl.constexpr, NC: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_G: tl.constexpr, I_OUTER: tl.constexpr,
):
    NT: tl.constexpr = BLOCK_S * NC
    offs_s = tl.arange(0, BLOCK_S)
    offs_t = tl.arange(0, NT)
    offs_g = tl.arange(0, BLOCK_G)
    # Element i of octet m = 8 cb + o of a token is channel 64 cb + 8 o + i = 8 m + i.
    chan = _el(tl.arange(0, NC * 8), I_OUTER) * 8 + _el(tl.arange(0, 8), not I_OUTER)
    for work in range(tl.program_id(0), n_work, n_programs):
        bk = work // n_chunks
        ch = work % n_chunks
        b = (bk // Hkv).to(tl.int64)
        hk = (bk % Hkv).to(tl.int64)
        acc = tl.zeros([BLOCK_G, chan.shape[0], chan.shape[1]], dtype=tl.float32)
        s_end = tl.minimum(ch * chunk + chunk, S)
        for s0 in range(ch * chunk, s_end, BLOCK_S):
            # Value tile (s, cb) is local index s * NC + cb: the step's tiles are consecutive.
            tile0 = (bk.to(tl.int64) * S + s0) * NC
            n_ok = (s_end - s0) * NC
            v = _decode_tiles(BITMAPS, OFFSETS, PACKED, ZERO, tile0, n_ok, NT, BITS, I_OUTER)
            if BITS == 2:
                v = v * _el(_octets(tl.load(SCALE + tile0 + offs_t, mask=offs_t < n_ok,
                                            other=0.0), NT), I_OUTER)
            toks = s0 + offs_s
            for g in range(G):  # not unrolled: one head's temporaries at a time (Ascend UB)
                p = tl.load(P + b * stride_pb + (hk * G + g) * stride_ph + toks, mask=toks < s_end,
                            other=0.0).to(tl.float32)
                pm = tl.reshape(tl.broadcast_to(p[:, None], (BLOCK_S, NC * 8)), (NT * 8,))
                part = v * _el(pm, I_OUTER)
                if I_OUTER:
                    part = tl.sum(tl.reshape(part, (8, BLOCK_S, NC * 8)), 1)
                else:
                    part = tl.sum(tl.reshape(part, (BLOCK_S, NC * 8, 8)), 0)
                acc += tl.where(offs_g[:, None, None] == g, part[None, :, :], 0.0)
        heads = hk * G + offs_g
        tl.store(O + ch * stride_os + b * stride_ob + heads[:, None, None] * stride_oh
                 + chan[None, :, :], acc.to(O.dtype.element_ty), mask=(offs_g < G)[:, None, None])


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["n_chunks", "Hq"])
def _sum_chunks(W, O, n_chunks, stride_wc, stride_wb, stride_ob, stride_oh, Hq,
                D: tl.constexpr, BLOCK_H: tl.constexpr):
    """O[b, h, :] = the sum over chunks c of W[c, b, h, :] (W fp32, [n_chunks, B, Hq, D])."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    d = tl.arange(0, D)
    h_ok = (h < Hq)[:, None]
    acc = tl.zeros([BLOCK_H, D], dtype=tl.float32)
    for c in range(0, n_chunks):
        acc += tl.load(W + c * stride_wc + b * stride_wb + h[:, None] * D + d[None, :], mask=h_ok,
                       other=0.0)
    tl.store(O + b * stride_ob + h[:, None] * stride_oh + d[None, :], acc.to(O.dtype.element_ty),
             mask=h_ok)


# --- planning ----------------------------------------------------------------------------------

def _buffers(c: Compressed) -> tuple:
    """(bitmaps, offsets, packed, scale, zero): fp16 caches have no scale/zero, and the kernel
    never reads them (BITS is a constexpr), so bitmaps stands in."""
    if c.bits == 2:
        return c.bitmaps, c.offsets, c.packed, c.scale, c.zero
    return c.bitmaps, c.offsets, c.packed, c.bitmaps, c.bitmaps


def _programs(n_work: int, t: torch.Tensor) -> int:
    """Programs for n_work items: one each on CUDA and in the interpreter; on Ascend at most one
    per vector core, each looping over its share (kernels/_grid.py). The kernels always loop."""
    return plan_grid((n_work,), t, vector=True).n_programs


def mustafar_keys_config(D: int, G: int, bits: int, interpret: bool, ascend: bool = False) -> dict:
    """BLOCK_C: key tiles (channels) decoded per step, BLOCK_G: query heads (G padded to a power
    of two). Ascend keeps a step's [C, 64] temporaries well inside its unified buffer."""
    if ascend:
        block_c = 16
    else:
        block_c = min(next_pow2(D), 128 if bits == 2 else 64)
    return dict(BLOCK_C=block_c, BLOCK_G=next_pow2(G), num_warps=4 if interpret else 8, num_stages=1)


def mustafar_values_config(S: int, D: int, G: int, bits: int, interpret: bool,
                           ascend: bool = False) -> dict:
    """BLOCK_S: tokens per step (NC = D / 64 value tiles each), BLOCK_G as for keys."""
    nc = D // TILE
    if ascend:
        block_s = max(1, 16 // nc)
    elif interpret:
        # The interpreter's cost is per operation, not per element: fewer, longer steps (still
        # two over the quick profile's 512-token caches, so the step loop is exercised).
        block_s = max(1, 256 // nc)
    else:
        block_s = max(1, (64 if bits == 16 else 128) // nc)
    block_s = min(block_s, next_pow2(S))
    return dict(BLOCK_S=block_s, BLOCK_G=next_pow2(G), num_warps=4 if interpret else 8, num_stages=1)


def mustafar_keys_plan(q: torch.Tensor, kc: Compressed, out: torch.Tensor, *,
                       interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch for validated inputs: q [B, Hq, D], out [B, Hq, S_c]."""
    B, Hkv, S, D = kc.shape
    Hq = q.shape[1]
    G = Hq // Hkv
    interpret = is_interpret() if interpret is None else interpret
    n_tblocks = S // TILE
    n_work = B * Hkv * n_tblocks
    if use_fast_path(q):
        return mustafar_keys_fast_plan(q, kc, out)
    cfg = mustafar_keys_config(D, G, kc.bits, interpret, on_ascend(q))
    n_programs = _programs(n_work, q)
    args = (q, *_buffers(kc), out,
            q.stride(0), q.stride(1), out.stride(0), out.stride(1),
            Hkv, D, n_tblocks, n_work, n_programs)
    meta = dict(G=G, BITS=kc.bits, I_OUTER=not on_ascend(q), **cfg)
    return LaunchPlan(kernel=_mustafar_keys_fwd, grid=(n_programs,), args=args, meta=meta)


#: Tokens per program of the values kernel on CUDA: partial sums per chunk, then one merge.
VALUES_CHUNK = 512


def mustafar_values_plan(p: torch.Tensor, vc: Compressed, out: torch.Tensor, *,
                         interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch chain for validated inputs: p [B, Hq, S_c], out [B, Hq, D] (any float dtype).
    Long caches are split into token chunks whose fp32 partials a second launch sums."""
    B, Hkv, S, D = vc.shape
    Hq = p.shape[1]
    G = Hq // Hkv
    interpret = is_interpret() if interpret is None else interpret
    ascend = on_ascend(p)
    if use_fast_path(p):
        return mustafar_values_fast_plan(p, vc, out)
    cfg = mustafar_values_config(S, D, G, vc.bits, interpret, ascend)
    step = cfg["BLOCK_S"]
    if ascend:
        # Enough chunks to give every core work, each a multiple of the step.
        cores = _programs(B * Hkv * S, p)
        chunk = cdiv(cdiv(B * Hkv * S, cores), step) * step
        chunk = min(cdiv(S, step) * step, chunk)
    else:
        chunk = cdiv(min(S, VALUES_CHUNK), step) * step
    n_chunks = cdiv(S, chunk)
    n_work = B * Hkv * n_chunks
    n_programs = _programs(n_work, p)
    if n_chunks == 1:
        dst, strides = out, (0, out.stride(0), out.stride(1))
    else:
        dst = torch.empty((n_chunks, B, Hq, D), dtype=torch.float32, device=p.device)
        strides = dst.stride()[:3]
    kernel = _mustafar_values_fwd
    args = (p, *_buffers(vc), dst, p.stride(0), p.stride(1), *strides,
            Hkv, S, chunk, n_chunks, n_work, n_programs)
    meta = dict(G=G, BITS=vc.bits, NC=D // TILE, I_OUTER=not ascend, **cfg)
    then = None
    if n_chunks > 1:
        block_h = min(next_pow2(Hq), 16)
        then = LaunchPlan(kernel=_sum_chunks, grid=(B, cdiv(Hq, block_h)),
                          args=(dst, out, n_chunks, dst.stride(0), dst.stride(1), out.stride(0),
                                out.stride(1), Hq),
                          meta=dict(D=D, BLOCK_H=block_h))
    # The chunk partials carry nothing between calls: a repeat call may reuse them.
    return LaunchPlan(kernel=kernel, grid=(n_programs,), args=args, meta=meta, then=then,
                      workspace=((dst, False),) if then is not None else ())


# --- CUDA fast path (kernels/mustafar_fast.py) ---------------------------------------------------

#: The fast path's config. TRANS: 0 the decoded tiles are the dot's second operand, 1 its first,
#: 2 the first with the result kept transposed (``mustafar_fast._dot2``); PREFETCH: a step loads
#: the next step's metadata before it decodes; maxnreg: a register cap (more programs per SM);
#: gmin: heads a dot pads to (see ``_gmin``); programs_per_sm: programs to aim for per SM.
#: FAST_BY: the H100 figures' best per (op, bits) (November 2026); 2-bit keys re-measured on an
#: H200 after the per-program split bound (docs/hardware-log.md): heads padded to 16 under the
#: 128-register cap 41.2 us, to 8 57.3, uncapped 43.2 / 50.5, the kernel before 45.9.
FAST = dict(TRANS=2, PREFETCH=True, gmin=16, keys_warps=4, values_warps=4, values_block_s=128,
            programs_per_sm=8, num_stages=1, maxnreg=None)
FAST_BY = {("keys", 2): dict(maxnreg=128), ("values", 2): dict(maxnreg=128),
           ("keys", 16): dict(programs_per_sm=4), ("values", 16): dict(gmin=8)}


_LUTS: dict = {}


def _prmt_lut(device: torch.device) -> torch.Tensor:
    """The 2-bit decode's byte-permute table (``mustafar_fast.prmt_table_rows``), once per
    device."""
    lut = _LUTS.get(device)
    if lut is None:
        lut = _LUTS[device] = torch.tensor(_fast.prmt_table_rows(), dtype=torch.int64, device=device)
    return lut


def _sms(t: torch.Tensor) -> int:
    """Streaming multiprocessors of t's device (an H100's 132 off a GPU)."""
    if t.device.type == "cuda":
        return torch.cuda.get_device_properties(t.device).multi_processor_count
    return 132


def _fast_cfg(op: str, bits: int, overrides: Optional[dict]) -> dict:
    cfg = dict(FAST, **FAST_BY.get((op, bits), {}))
    cfg.update(overrides or {})
    return cfg


def _regs(cfg: dict) -> dict:
    """The launch's register cap, if the config has one (off a GPU it means nothing)."""
    return {} if cfg["maxnreg"] is None or is_interpret() else {"maxnreg": int(cfg["maxnreg"])}


def _gmin(cfg: dict) -> int:
    """Query heads a dot pads to: 16, or 8 where the tiles are the first operand (Hopper's
    wgmma takes N = 8)."""
    return 8 if int(cfg["TRANS"]) > 0 and cfg["gmin"] <= 8 else 16


def mustafar_keys_fast_plan(q: torch.Tensor, kc: Compressed, out: torch.Tensor,
                            cfg: Optional[dict] = None) -> LaunchPlan:
    """The CUDA fast path's launch (also runs in the interpreter): grid (B * Hkv, chunks of
    64-token blocks), one step per block. ``cfg`` overrides ``FAST`` / ``FAST_BY``."""
    cfg = _fast_cfg("keys", kc.bits, cfg)
    B, Hkv, S, D = kc.shape
    G = q.shape[1] // Hkv
    n_tblocks = S // TILE
    want = max(1, cfg["programs_per_sm"] * _sms(q))
    per = max(1, cdiv(B * Hkv * n_tblocks, want))
    hw = not is_interpret()
    args = (q, *_buffers(kc), _prmt_lut(q.device), out, q.stride(0), q.stride(1), out.stride(0),
            out.stride(1), Hkv, n_tblocks, per)
    meta = dict(D=D, G=G, BITS=kc.bits, BLOCK_C=max(16, next_pow2(D)),
                BLOCK_G=max(_gmin(cfg), next_pow2(G)), PREFETCH=bool(cfg["PREFETCH"]),
                TRANS=int(cfg["TRANS"]), HW=hw, DOT_PRECISION=DOT_INPUT_PRECISION, num_warps=cfg["keys_warps"],
                num_stages=cfg["num_stages"], **_regs(cfg))
    return LaunchPlan(kernel=_fast._keys_fast, grid=(B * Hkv, cdiv(n_tblocks, per)), args=args,
                      meta=meta, constants=(_prmt_lut(q.device),))


def mustafar_values_fast_plan(p: torch.Tensor, vc: Compressed, out: torch.Tensor,
                              cfg: Optional[dict] = None) -> LaunchPlan:
    """The CUDA fast path's launch: grid (B * Hkv, D / 64 channel blocks, token chunks); with
    more than one chunk the fp32 partials are summed by ``mustafar_fast._merge_chunks``."""
    cfg = _fast_cfg("values", vc.bits, cfg)
    B, Hkv, S, D = vc.shape
    Hq = p.shape[1]
    G = Hq // Hkv
    nc = D // TILE
    step = max(16, min(cfg["values_block_s"], next_pow2(S)))  # a dot needs K >= 16
    want = max(1, cfg["programs_per_sm"] * _sms(p))
    n_chunks = max(1, min(cdiv(S, step), want // max(1, B * Hkv * nc)))
    chunk = cdiv(cdiv(S, n_chunks), step) * step
    n_chunks = cdiv(S, chunk)
    if n_chunks == 1:
        dst, strides = out, (0, out.stride(0), out.stride(1))
    else:
        dst = torch.empty((n_chunks, B, Hq, D), dtype=torch.float32, device=p.device)
        strides = dst.stride()[:3]
    hw = not is_interpret()
    args = (p, *_buffers(vc), _prmt_lut(p.device), dst, p.stride(0), p.stride(1), *strides, Hkv, S,
            chunk)
    meta = dict(NC=nc, G=G, BITS=vc.bits, BLOCK_S=step, BLOCK_G=max(_gmin(cfg), next_pow2(G)),
                PREFETCH=bool(cfg["PREFETCH"]), TRANS=int(cfg["TRANS"]), HW=hw, DOT_PRECISION=DOT_INPUT_PRECISION, num_warps=cfg["values_warps"],
                num_stages=cfg["num_stages"], **_regs(cfg))
    then = None
    if n_chunks > 1:
        then = LaunchPlan(kernel=_fast._merge_chunks, grid=(B * Hq, nc),
                          args=(dst, out, n_chunks, dst.stride(0), dst.stride(1), dst.stride(2),
                                out.stride(0), out.stride(1), Hq),
                          meta=dict(CB=min(64, next_pow2(n_chunks))))
    return LaunchPlan(kernel=_fast._values_fast, grid=(B * Hkv, nc, n_chunks), args=args,
                      meta=meta, then=then, workspace=((dst, False),) if then is not None else (),
                      constants=(_prmt_lut(p.device),))


# --- validation --------------------------------------------------------------------------------

def check_compressed(fn: str, name: str, c: Any, kind: str, device: torch.device,
                     contents: bool = True) -> Compressed:
    """Structure and (with ``contents``) contents of a compressed cache (the contents check is a
    device sync): kind, bits, shape, buffer dtypes/sizes/devices, then offsets from 0,
    non-decreasing and within ``packed``, and per-tile popcounts that match the offsets."""
    if not isinstance(c, Compressed):
        raise TypeError(f"{fn}: {name} must be a kernels.mustafar_format.Compressed, "
                        f"got {type(c).__name__}")
    if c.kind != kind:
        raise ValueError(f"{fn}: {name}.kind must be {kind!r}, got {c.kind!r}")
    if isinstance(c.bits, bool) or not isinstance(c.bits, int):
        raise TypeError(f"{fn}: {name}.bits must be an int, got {type(c.bits).__name__}")
    if c.bits not in (16, 2):
        raise ValueError(f"{fn}: {name}.bits must be 16 or 2, got {c.bits}")
    shape = c.shape
    if (not isinstance(shape, (tuple, list)) or len(shape) != 4
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape)):
        raise TypeError(f"{fn}: {name}.shape must be a tuple of 4 ints (B, Hkv, S_c, D), got {shape!r}")
    B, Hkv, S, D = shape
    if min(shape) < 1:
        raise ValueError(f"{fn}: {name}.shape (B, Hkv, S_c, D) must be all >= 1, got {tuple(shape)}")
    if kind == "key" and S % TILE:
        raise ValueError(f"{fn}: {name}.shape S_c must be a multiple of {TILE} (key tiles are 64 "
                         f"tokens of one channel), got S_c={S}")
    if kind == "value" and D % TILE:
        raise ValueError(f"{fn}: {name}.shape D must be a multiple of {TILE} (value tiles are 64 "
                         f"channels of one token), got D={D}")
    if D > MAX_HEAD_DIM:
        raise ValueError(f"{fn}: {name}.shape D must be <= {MAX_HEAD_DIM}, got {D}")
    n_tiles = B * Hkv * tile_grid(kind, S, D)[0]
    packed_dtype = torch.float16 if c.bits == 16 else torch.int32
    specs = [("bitmaps", torch.int64, n_tiles), ("offsets", torch.int32, n_tiles + 1),
             ("packed", packed_dtype, None)]
    if c.bits == 2:
        specs += [("scale", torch.float32, n_tiles), ("zero", torch.int32, n_tiles)]
    for field, dtype, numel in specs:
        t = getattr(c, field)
        if t is None:
            raise TypeError(f"{fn}: {name}.{field} must be a torch.Tensor (required for "
                            f"bits={c.bits}), got None")
        check_tensor(fn, f"{name}.{field}", t, rank=1, dtypes=(dtype,), device=device,
                     shape=(numel,) if numel is not None else None,
                     dims="[n_tiles + 1]" if field == "offsets" else "[n_tiles]" if numel else None)
    if contents:
        check_contents(fn, name, c)
    return c


def check_contents(fn: str, name: str, c: Compressed) -> None:
    """The data checks of ``check_compressed`` (one device sync per condition)."""
    offsets, packed = c.offsets, c.packed
    if int(offsets[0]) != 0:
        raise ValueError(f"{fn}: {name}.offsets must start at 0, got offsets[0]={int(offsets[0])}")
    count = offsets[1:].to(torch.int64) - offsets[:-1].to(torch.int64)
    if bool((count < 0).any()):
        i = int((count < 0).nonzero()[0])
        raise ValueError(f"{fn}: {name}.offsets must be non-decreasing, got offsets[{i}]="
                         f"{int(offsets[i])} > offsets[{i + 1}]={int(offsets[i + 1])}")
    if int(offsets[-1]) > packed.numel():
        raise ValueError(f"{fn}: {name}.offsets end at {int(offsets[-1])}, past the packed buffer "
                         f"({name}.packed has {packed.numel()} elements)")
    pop = mask_from_bitmaps(c.bitmaps).sum(-1)
    want = pop if c.bits == 16 else (pop + CODES_PER_WORD - 1) // CODES_PER_WORD
    bad = want != count
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        unit = "values" if c.bits == 16 else "words (ceil(popcount / 16))"
        raise ValueError(f"{fn}: {name}.bitmaps popcount must match {name}.offsets: tile {i} has "
                         f"popcount {int(pop[i])}, so {int(want[i])} {unit}, but offsets give "
                         f"{int(count[i])}")


def _check_query(fn: str, name: str, t: Any, dims: str) -> torch.Tensor:
    check_tensor(fn, name, t, rank=3, dims=dims, dtypes=FLOAT_DTYPES)
    check_nonempty(fn, name, t, dims)
    return t


def _check_against(fn: str, name: str, t: torch.Tensor, c: Compressed, c_name: str, last: int,
                   dims: str) -> int:
    """t [B, Hq, last] against c's (B, Hkv, ...): B and the last axis equal, Hq % Hkv == 0."""
    B, Hkv = c.shape[0], c.shape[1]
    check_tensor(fn, name, t, shape=(B, None, last), dims=dims)
    return check_gqa(fn, t.shape[1], Hkv, q_name=name, kv_name=c_name)


def _inputs(named: dict) -> dict:
    """Tensors an output must not alias: plain ones and every buffer of each Compressed."""
    out = {}
    for name, x in named.items():
        if isinstance(x, Compressed):
            out.update(x.tensors(prefix=f"{name}."))
        else:
            out[name] = x
    return out


# --- public API --------------------------------------------------------------------------------

def _key(cache: CallCache, first: Any, caches: tuple, out: Any, scalars: tuple):
    """A call's key: the query-side tensor, every buffer of each cache (None where absent), the
    output, each cache's type, kind, bits and shape, and ``scalars``."""
    try:
        buffers = [t for c in caches for t in (c.bitmaps, c.offsets, c.packed, c.scale, c.zero)]
        meta = tuple([(type(c), c.kind, c.bits, c.shape) for c in caches])
    except AttributeError:  # not a Compressed: validation says so
        return None
    buffers.append(out)
    return cache.key((first,), buffers, meta + scalars)


def _overlaps(t: torch.Tensor, lo: int, hi: int, device: torch.device) -> bool:
    """Whether ``t``'s memory meets the non-empty span ``[lo, hi)`` on ``device``
    (``_checks.check_no_alias``'s test)."""
    start = t.data_ptr()
    end = start + t.nbytes if t.is_contiguous() else memory_span(t)[1]
    return start < hi and lo < end and start < end and t.device == device


def _aliases(fn: str, out: Optional[torch.Tensor], named: dict) -> None:
    """The address-dependent part of ``check_output`` for a call validated before: ``out``
    overlaps no plain input and no buffer of a Compressed one, tested in ``_inputs`` order with
    its messages (runs on every repeat call, so the names are made only for the error)."""
    if out is None:
        return
    lo, hi = memory_span(out)
    if lo >= hi:
        return
    device = out.device
    for name, x in named.items():
        if isinstance(x, Compressed):
            for field in Compressed.TENSORS:
                t = getattr(x, field)
                if isinstance(t, torch.Tensor) and _overlaps(t, lo, hi, device):
                    raise ValueError(f"{fn}: out must not share memory with {name}.{field}")
        elif isinstance(x, torch.Tensor) and _overlaps(x, lo, hi, device):
            raise ValueError(f"{fn}: out must not share memory with {name}")


def _run(cache: CallCache, slot, name: str, plan_of, tensors: tuple) -> None:
    """Relaunch the bound plan ``name`` of ``slot``, or plan (``plan_of()``), launch and bind."""
    bound = None if slot is None else slot.get(name)
    if bound is not None:
        bound.launch(tensors, launch)
        return
    cache.run(slot, name, plan_of(), tensors, is_live(tensors[0]), launch)


def mustafar_keys(q: torch.Tensor, kc: Compressed, *, out: Optional[torch.Tensor] = None,
                  check_indices: bool = True) -> torch.Tensor:
    """Unscaled scores q . k over the compressed keys: q [B, Hq, D] (fp16/bf16/fp32), kc of kind
    "key" with shape (B, Hkv, S_c, D) -> fp32 [B, Hq, S_c]. Query head h reads KV head h // G.
    ``check_indices`` (default on) checks kc's offsets and popcounts (device syncs); without it
    the call never waits for the device."""
    fn = "mustafar_keys"
    key = _key(_KEYS, q, (kc,), out, (check_indices,))
    slot = _KEYS.lookup(key)
    if slot is None:
        _check_query(fn, "q", q, "[B, Hq, D]")
        check_flag(fn, "check_indices", check_indices)
        check_compressed(fn, "kc", kc, "key", q.device, contents=check_indices)
        B, Hkv, S, D = kc.shape
        _check_against(fn, "q", q, kc, "kc", D, "[B, Hq, D]")
        if out is not None:
            check_output(fn, "out", out, shape=(B, q.shape[1], S), dtype=torch.float32, device=q.device,
                         dims="[B, Hq, S_c]", inputs=_inputs({"q": q, "kc": kc}))
        check_launchable(fn, "q", q)
        slot = _KEYS.validated(key)
    else:
        _aliases(fn, out, {"q": q, "kc": kc})
        if check_indices:
            check_contents(fn, "kc", kc)
    if out is None:
        out = torch.empty((kc.shape[0], q.shape[1], kc.shape[2]), dtype=torch.float32, device=q.device)
    _run(_KEYS, slot, "keys", lambda: mustafar_keys_plan(q, kc, out),
         (q, kc.bitmaps, kc.offsets, kc.packed, kc.scale, kc.zero, out))
    return out


def mustafar_values(p: torch.Tensor, vc: Compressed, *, out: Optional[torch.Tensor] = None,
                    check_indices: bool = True) -> torch.Tensor:
    """p @ V over the compressed values: p [B, Hq, S_c] (fp32/fp16/bf16), vc of kind "value" with
    shape (B, Hkv, S_c, D) -> fp32 [B, Hq, D]. Query head h reads KV head h // G.
    ``check_indices`` as in ``mustafar_keys``."""
    fn = "mustafar_values"
    key = _key(_VALUES, p, (vc,), out, (check_indices,))
    slot = _VALUES.lookup(key)
    if slot is None:
        _check_query(fn, "p", p, "[B, Hq, S_c]")
        check_flag(fn, "check_indices", check_indices)
        check_compressed(fn, "vc", vc, "value", p.device, contents=check_indices)
        B, Hkv, S, D = vc.shape
        _check_against(fn, "p", p, vc, "vc", S, "[B, Hq, S_c]")
        if out is not None:
            check_output(fn, "out", out, shape=(B, p.shape[1], D), dtype=torch.float32, device=p.device,
                         dims="[B, Hq, D]", inputs=_inputs({"p": p, "vc": vc}))
        check_launchable(fn, "p", p)
        slot = _VALUES.validated(key)
    else:
        _aliases(fn, out, {"p": p, "vc": vc})
        if check_indices:
            check_contents(fn, "vc", vc)
    if out is None:
        out = torch.empty((vc.shape[0], p.shape[1], vc.shape[3]), dtype=torch.float32, device=p.device)
    _run(_VALUES, slot, "values", lambda: mustafar_values_plan(p, vc, out),
         (p, vc.bitmaps, vc.offsets, vc.packed, vc.scale, vc.zero, out))
    return out


def mustafar_decode(q: torch.Tensor, kc: Compressed, vc: Compressed, *, scale: Optional[float] = None,
                    out: Optional[torch.Tensor] = None, check_indices: bool = True) -> torch.Tensor:
    """One-token attention over a compressed cache: softmax(scale * q . k) @ V -> [B, Hq, D] in
    q's dtype. q [B, Hq, D]; kc/vc of kinds "key"/"value" with the same shape (B, Hkv, S_c, D)
    (so S_c and D are multiples of 64); scale defaults to 1/sqrt(D). Scores and softmax are fp32.
    ``check_indices`` as in ``mustafar_keys``, for both caches."""
    fn = "mustafar_decode"
    key = _key(_DECODE, q, (kc, vc), out, (scale, check_indices))
    slot = _DECODE.lookup(key)
    if slot is None:
        _check_query(fn, "q", q, "[B, Hq, D]")
        check_flag(fn, "check_indices", check_indices)
        check_compressed(fn, "kc", kc, "key", q.device, contents=check_indices)
        check_compressed(fn, "vc", vc, "value", q.device, contents=check_indices)
        if tuple(vc.shape) != tuple(kc.shape):
            raise ValueError(f"{fn}: vc.shape must equal kc.shape (B, Hkv, S_c, D) = {tuple(kc.shape)}, "
                             f"got {tuple(vc.shape)}")
        B, Hkv, S, D = kc.shape
        _check_against(fn, "q", q, kc, "kc", D, "[B, Hq, D]")
        check_scale(fn, scale, D)
        if out is not None:
            check_output(fn, "out", out, shape=tuple(q.shape), dtype=q.dtype, device=q.device,
                         dims="[B, Hq, D]", inputs=_inputs({"q": q, "kc": kc, "vc": vc}))
        check_launchable(fn, "q", q)
        slot = _DECODE.validated(key)
    else:
        _aliases(fn, out, {"q": q, "kc": kc, "vc": vc})
        if check_indices:
            check_contents(fn, "kc", kc)
            check_contents(fn, "vc", vc)
    B, Hkv, S, D = kc.shape
    scale = check_scale(fn, scale, D)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    scores = torch.empty((B, q.shape[1], S), dtype=torch.float32, device=q.device)
    _run(_DECODE, slot, "keys", lambda: mustafar_keys_plan(q, kc, scores),
         (q, kc.bitmaps, kc.offsets, kc.packed, kc.scale, kc.zero, scores))
    probs = torch.softmax(scores.mul_(scale), dim=-1)  # scores is this call's own: scaled in place
    # The values kernel stores in out's dtype directly (fp32 accumulation, one rounding).
    _run(_DECODE, slot, "values", lambda: mustafar_values_plan(probs, vc, out),
         (probs, vc.bitmaps, vc.offsets, vc.packed, vc.scale, vc.zero, out))
    return out


_KEYS = CallCache("mustafar_keys")
_VALUES = CallCache("mustafar_values")
_DECODE = CallCache("mustafar_decode")
