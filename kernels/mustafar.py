"""Mustafar sparse-KV decode (kernels.md section 9) in Triton, over the compressed format of
``kernels.mustafar_format``: the kernels decode bitmaps/offsets/packed tiles themselves, the
dense cache never exists in memory.

* ``mustafar_keys(q, kc)``: fp32 scores ``q . k`` [B, Hq, S_c]. One program per (batch, KV head,
  64-token block): those tokens' key tiles are D consecutive tiles (one per channel), decoded
  BLOCK_C channels at a time into a [channels, 64 tokens] tile and multiplied by the G query heads
  of the group (``tl.dot``, G padded to >= 16 rows).
* ``mustafar_values(p, vc)``: fp32 ``p @ V`` [B, Hq, D]. One program per (batch, KV head, 64-channel
  block): it walks S_c in BLOCK_S-token chunks, decoding the chunk's value tiles (one per token)
  into [BLOCK_S tokens, 64 channels] and accumulating ``p_chunk @ v`` for the G heads.
* ``mustafar_decode(q, kc, vc)``: the two, with an fp32 softmax in torch between them.

Decoding a tile: element j is kept iff bit 63 - j of its int64 bitmap is set; its rank among the
kept elements (the exclusive prefix count of the bits, as a 0/1 ``tl.dot``) addresses
``packed[offsets[tile] + rank]`` (fp16) or code ``rank % 16`` of word ``offsets[tile] + rank // 16``
(2 bits, dequantised as ``(code - zero) * scale`` in fp32). Everything is computed in fp32.
The fp16 read is a per-element gather (2 bits: 4 words per tile): triton-ascend compiles it to
element loads on the scalar unit, a performance hazard the compile report counts.

Portable subset only: no block pointers, no popc/libdevice, no loops over loaded values; every
launch goes through ``_checks.launch`` as a ``LaunchPlan`` built by a ``*_plan`` function.
Validation (types, shapes, buffer sizes, offsets and per-tile popcounts) runs before any launch.
"""
from __future__ import annotations

from typing import Any, Optional

import torch
import triton
import triton.language as tl

from ._callcache import CallCache
from ._checks import (DOT_INPUT_PRECISION, FLOAT_DTYPES, check_flag, check_gqa, check_launchable,
                      check_no_alias, check_nonempty, check_output, check_scale, check_tensor,
                      is_interpret, is_live, launch, LaunchPlan, next_pow2)
from .mustafar_format import CODES_PER_WORD, TILE, Compressed, mask_from_bitmaps, tile_grid

MAX_HEAD_DIM = 256


@triton.jit
def _decode_tiles(BITMAPS, OFFSETS, PACKED, SCALE, ZERO, tiles, tile_ok,
                  BITS: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """fp32 [N, 64]: the 64 elements of each tile in ``tiles`` [N] (int64 global indices); rows
    with ``tile_ok`` False read nothing and decode to zeros."""
    offs_j = tl.arange(0, 64)
    bm = tl.load(BITMAPS + tiles, mask=tile_ok, other=0)
    start = tl.load(OFFSETS + tiles, mask=tile_ok, other=0)
    # Arithmetic shift of the signed int64 is fine: only the lowest bit is kept.
    kept = ((bm[:, None] >> (63 - offs_j[None, :]).to(tl.int64)) & 1).to(tl.int32)
    # Exclusive prefix count as kept @ (strictly upper triangular ones): exact (0/1 operands,
    # sums <= 63). tl.cumsum here fails the Ascend compile on triton-ascend 3.2.0rc2
    # (bishengir: "operation being parsed with an unregistered dialect").
    before = (offs_j[:, None] < offs_j[None, :]).to(tl.float16)
    rank = tl.dot(kept.to(tl.float16), before, input_precision=DOT_PRECISION).to(tl.int32)
    is_kept = kept != 0
    if BITS == 16:
        vals = tl.load(PACKED + start[:, None] + rank, mask=is_kept, other=0.0).to(tl.float32)
    else:
        # A tile's codes fill at most 4 words: load them as a [N, 4] row per tile, then each
        # element picks word rank // 16. (That index inside the pointer expression fails
        # triton-ascend 3.2.0rc2's adapter: "cannot div 0!", or SIGSEGV as a shift or compares;
        # this form also loads 4 words per tile instead of one per element.)
        offs_w = tl.arange(0, 4)
        n_words = (tl.sum(kept, 1) + 15) // 16
        words = tl.load(PACKED + start[:, None] + offs_w[None, :],
                        mask=offs_w[None, :] < n_words[:, None], other=0)
        word_idx = rank // 16
        word = tl.zeros_like(rank)
        for w in tl.static_range(4):
            word_w = tl.sum(tl.where(offs_w[None, :] == w, words, 0), 1)
            word = tl.where(word_idx == w, word_w[:, None], word)
        code = (word >> (2 * (rank % 16))) & 3
        scale = tl.load(SCALE + tiles, mask=tile_ok, other=1.0)
        zero = tl.load(ZERO + tiles, mask=tile_ok, other=0)
        vals = (code - zero[:, None]).to(tl.float32) * scale[:, None]
        vals = tl.where(is_kept, vals, 0.0)
    return vals


@triton.jit
def _mustafar_keys_fwd(
    Q, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, O,
    stride_qb, stride_qh,
    stride_ob, stride_oh,
    Hkv, D, G, n_tblocks,
    BITS: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_C: tl.constexpr,
):
    pid_bk = tl.program_id(0)
    t = tl.program_id(1)
    b = (pid_bk // Hkv).to(tl.int64)
    hk = (pid_bk % Hkv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_c = tl.arange(0, BLOCK_C)
    offs_j = tl.arange(0, 64)
    heads = hk * G + offs_g
    g_ok = offs_g < G
    # Key tile (t, c) has local index t * D + c: this block's tiles are D consecutive ones.
    tile0 = pid_bk.to(tl.int64) * n_tblocks * D + t.to(tl.int64) * D

    acc = tl.zeros([BLOCK_G, 64], dtype=tl.float32)
    for c0 in range(0, D, BLOCK_C):
        chans = c0 + offs_c
        c_ok = chans < D
        # Padding rows (g >= G) load zeros and are never stored.
        q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + chans[None, :],
                    mask=g_ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)
        k = _decode_tiles(BITMAPS, OFFSETS, PACKED, SCALE, ZERO, tile0 + chans, c_ok,
                          BITS, DOT_PRECISION)
        acc += tl.dot(q, k, input_precision=DOT_PRECISION)  # [G, C] x [C channels, 64 tokens]

    toks = t.to(tl.int64) * 64 + offs_j
    tl.store(O + b * stride_ob + heads[:, None] * stride_oh + toks[None, :],
             acc.to(O.dtype.element_ty), mask=g_ok[:, None])


@triton.jit
def _mustafar_values_fwd(
    P, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, O,
    stride_pb, stride_ph,
    stride_ob, stride_oh,
    Hkv, S, G, n_cblocks,
    BITS: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_G: tl.constexpr, BLOCK_S: tl.constexpr,
):
    pid_bk = tl.program_id(0)
    cb = tl.program_id(1)
    b = (pid_bk // Hkv).to(tl.int64)
    hk = (pid_bk % Hkv).to(tl.int64)
    offs_g = tl.arange(0, BLOCK_G)
    offs_s = tl.arange(0, BLOCK_S)
    offs_j = tl.arange(0, 64)
    heads = hk * G + offs_g
    g_ok = offs_g < G
    # Value tile (s, cb) has local index s * (D // 64) + cb: one tile per token, strided.
    tile0 = pid_bk.to(tl.int64) * S * n_cblocks + cb

    acc = tl.zeros([BLOCK_G, 64], dtype=tl.float32)
    for s0 in range(0, S, BLOCK_S):
        toks = s0 + offs_s
        s_ok = toks < S
        p = tl.load(P + b * stride_pb + heads[:, None] * stride_ph + toks[None, :],
                    mask=g_ok[:, None] & s_ok[None, :], other=0.0).to(tl.float32)
        v = _decode_tiles(BITMAPS, OFFSETS, PACKED, SCALE, ZERO,
                          tile0 + toks.to(tl.int64) * n_cblocks, s_ok, BITS, DOT_PRECISION)
        acc += tl.dot(p, v, input_precision=DOT_PRECISION)  # [G, S] x [S tokens, 64 channels]

    chans = cb * 64 + offs_j
    tl.store(O + b * stride_ob + heads[:, None] * stride_oh + chans[None, :],
             acc.to(O.dtype.element_ty), mask=g_ok[:, None])


# --- planning ----------------------------------------------------------------------------------

def _buffers(c: Compressed) -> tuple:
    """(bitmaps, offsets, packed, scale, zero): fp16 caches have no scale/zero, and the kernel
    never reads them (BITS is a constexpr), so bitmaps stands in."""
    if c.bits == 2:
        return c.bitmaps, c.offsets, c.packed, c.scale, c.zero
    return c.bitmaps, c.offsets, c.packed, c.bitmaps, c.bitmaps


def _tiles_per_step(n: int, bits: int, interpret: bool) -> int:
    """Tiles decoded per loop trip (>= 16: the K of tl.dot). The interpreter prefers few big
    steps; on a device the [tiles, 64] decode temporaries must fit Ascend's unified buffer: at 32
    tiles the 2-bit decode made bishengir retry without code motion and multi-buffering."""
    if interpret:
        return max(16, min(next_pow2(n), 128))
    return 32 if bits == 16 else 16


def mustafar_keys_config(D: int, G: int, bits: int, interpret: bool) -> dict:
    """BLOCK_G (query heads, >= 16 for tl.dot), BLOCK_C (channels = key tiles per step), warps."""
    return dict(BLOCK_G=max(16, next_pow2(G)), BLOCK_C=_tiles_per_step(D, bits, interpret),
                num_warps=4, num_stages=1)


def mustafar_values_config(S: int, G: int, bits: int, interpret: bool) -> dict:
    """BLOCK_G (query heads, >= 16 for tl.dot), BLOCK_S (tokens = value tiles per step), warps."""
    return dict(BLOCK_G=max(16, next_pow2(G)), BLOCK_S=_tiles_per_step(S, bits, interpret),
                num_warps=4, num_stages=1)


def mustafar_keys_plan(q: torch.Tensor, kc: Compressed, out: torch.Tensor, *,
                       interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch for validated inputs: q [B, Hq, D], out [B, Hq, S_c]."""
    B, Hkv, S, D = kc.shape
    Hq = q.shape[1]
    G = Hq // Hkv
    interpret = is_interpret() if interpret is None else interpret
    cfg = mustafar_keys_config(D, G, kc.bits, interpret)
    n_tblocks = S // TILE
    args = (q, *_buffers(kc), out,
            q.stride(0), q.stride(1),
            out.stride(0), out.stride(1),
            Hkv, D, G, n_tblocks)
    meta = dict(BITS=kc.bits, DOT_PRECISION=DOT_INPUT_PRECISION, **cfg)
    return LaunchPlan(kernel=_mustafar_keys_fwd, grid=(B * Hkv, n_tblocks), args=args, meta=meta)


def mustafar_values_plan(p: torch.Tensor, vc: Compressed, out: torch.Tensor, *,
                         interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch for validated inputs: p [B, Hq, S_c], out [B, Hq, D] (any float dtype)."""
    B, Hkv, S, D = vc.shape
    Hq = p.shape[1]
    G = Hq // Hkv
    interpret = is_interpret() if interpret is None else interpret
    cfg = mustafar_values_config(S, G, vc.bits, interpret)
    n_cblocks = D // TILE
    args = (p, *_buffers(vc), out,
            p.stride(0), p.stride(1),
            out.stride(0), out.stride(1),
            Hkv, S, G, n_cblocks)
    meta = dict(BITS=vc.bits, DOT_PRECISION=DOT_INPUT_PRECISION, **cfg)
    return LaunchPlan(kernel=_mustafar_values_fwd, grid=(B * Hkv, n_cblocks), args=args, meta=meta)


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
    output, each cache's kind, bits and shape, and ``scalars``."""
    try:
        buffers = tuple(getattr(c, n) for c in caches for n in Compressed.TENSORS)
        meta = tuple((c.kind, c.bits, c.shape) for c in caches)
    except AttributeError:  # not a Compressed: validation says so
        return None
    return cache.key((first,), buffers + (out,), meta + scalars)


def _aliases(fn: str, out: Any, named: dict) -> None:
    if out is not None:
        check_no_alias(fn, "out", out, _inputs(named))


def _run(cache: CallCache, slot, name: str, plan_of, tensors: tuple, live: bool) -> None:
    bound = None if slot is None else slot.get(name)
    if bound is not None:
        bound.launch(tensors, launch)
        return
    cache.run(slot, name, plan_of(), tensors, live, launch)


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
    _run(_KEYS, slot, "keys", lambda: mustafar_keys_plan(q, kc, out), (q, *_buffers(kc)[:3], kc.scale,
                                                                       kc.zero, out), is_live(q))
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
         (p, *_buffers(vc)[:3], vc.scale, vc.zero, out), is_live(p))
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
    live = is_live(q)
    _run(_DECODE, slot, "keys", lambda: mustafar_keys_plan(q, kc, scores),
         (q, *_buffers(kc)[:3], kc.scale, kc.zero, scores), live)
    probs = torch.softmax(scores * scale, dim=-1)
    # The values kernel stores in out's dtype directly (fp32 accumulation, one rounding).
    _run(_DECODE, slot, "values", lambda: mustafar_values_plan(probs, vc, out),
         (probs, *_buffers(vc)[:3], vc.scale, vc.zero, out), live)
    return out


_KEYS = CallCache("mustafar_keys")
_VALUES = CallCache("mustafar_values")
_DECODE = CallCache("mustafar_decode")
