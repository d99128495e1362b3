"""Planted-bug implementations of the Mustafar ops (docs/contract.md section 9); the suite must fail each.

Each mutant is a ``cases.mustafar.MustafarOps`` (the project's ops, ``cases.mustafar.TRITON``,
with one part replaced through ``dataclasses.replace``) that introduces one bug:

* format-read bugs of the compute kernels run the project's kernels on transformed buffers
  (``_mustafar_with``), the compressor untouched;
* compressor bugs replace ``compress`` (the format's ``pack`` given the wrong keep-mask, or its
  words re-packed MSB first) and keep the project's ``decompress``, so the round-trip cases see
  them;
* the other compute bugs are vectorized torch ops (float64) on the dense cache the buffers
  describe (``kernels.mustafar_format.decompress``, or a variant of it with the bug).

Nothing here calls references/. The module docstring of kernels/mustafar_format.py is the format.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from cases.mustafar import TRITON, MustafarOps
from kernels.mustafar_format import (Compressed, bitmaps_from_mask, compress, decompress,
                                     mask_from_bitmaps, pack, pack_codes, unpack_codes)

from ._common import (SOFTMAX_BUGS, kv_heads_pow2, online_attention, read_as_contiguous)

FAMILY = "mustafar"
TILE = 64


# --- format-read bugs: the project's kernels on transformed buffers ----------------------------

def _mustafar_with(transform):
    """The project's ops, with ``transform`` applied to every compressed buffer set the compute
    kernels read (the compressor itself is untouched)."""
    def wrap(fn):
        def run(*args, **kw):
            return fn(*(transform(a) if isinstance(a, Compressed) else a for a in args), **kw)
        return run

    return dataclasses.replace(TRITON, keys=wrap(TRITON.keys), values=wrap(TRITON.values),
                               decode=wrap(TRITON.decode))


def _reverse_bits(c):
    return dataclasses.replace(c, bitmaps=bitmaps_from_mask(mask_from_bitmaps(c.bitmaps).flip(-1)))


def _negate_zero(c):
    return c if c.zero is None else dataclasses.replace(c, zero=-c.zero)


def _neighbour_scale(c):
    return c if c.scale is None else dataclasses.replace(c, scale=c.scale.roll(-1))


# --- compressor bugs ----------------------------------------------------------------------------

def _threshold_mask(x: torch.Tensor, sparsity: float) -> torch.Tensor:
    """The origin's threshold form: keep |x| >= the floor(s*D)-th smallest |x| of the token, which
    keeps that entry too (one more than D - floor(s*D))."""
    f = int(sparsity * x.shape[-1])
    if f == 0:
        return torch.ones_like(x, dtype=torch.bool)
    a = x.abs().float()
    thr = a.kthvalue(f, dim=-1, keepdim=True).values
    return a >= thr


def _compress_threshold(x, sparsity, *, kind, bits=16):
    return pack(x, _threshold_mask(x, sparsity), kind=kind, bits=bits)


def _compress_msb_first(x, sparsity, *, kind, bits=16):
    c = compress(x, sparsity, kind=kind, bits=bits)
    if bits != 2 or c.packed.numel() == 0:
        return c
    return dataclasses.replace(c, packed=pack_codes(unpack_codes(c.packed).flip(-1)))


# --- compute bugs: torch ops on the dense cache the buffers describe ---------------------------

def _decompress_shifted(c: Compressed) -> torch.Tensor:
    """``decompress`` reading each tile from one word (2-bit) / value (fp16) past offsets[i]."""
    return decompress(dataclasses.replace(c, offsets=c.offsets + 1,
                                          packed=torch.cat([c.packed, c.packed.new_zeros(1)])))


def _decompress_values_as_keys(c: Compressed) -> torch.Tensor:
    """Value tiles addressed with the key layout: tile n read as key tile (n // D, n % D)."""
    return decompress(dataclasses.replace(c, kind="key"))


def _per_head(dense: torch.Tensor, Hq: int, modulo: bool, pow2: bool = False) -> torch.Tensor:
    """[B, Hkv, S, D] -> [B, Hq, S, D]: head h reads KV head h // G (or h % Hkv when ``modulo``, or
    h >> log2(G) when ``pow2``)."""
    Hkv = dense.shape[1]
    h = torch.arange(Hq, device=dense.device)
    if pow2:
        return dense[:, kv_heads_pow2(Hq, Hkv, dense.device)]
    return dense[:, (h % Hkv) if modulo else (h // (Hq // Hkv))]


def _torch_ops(*, read_k=decompress, read_v=decompress, head_modulo_keys=False, unscaled=False, pow2_heads=False):
    """MustafarOps with torch keys / values / decode (the project's compressor pair)."""
    def keys(q, kc, *, out=None):
        k = _per_head(read_k(kc).double(), q.shape[1], head_modulo_keys, pow2_heads)
        scores = (k @ q.double()[..., None])[..., 0]
        if out is None:
            out = torch.empty(scores.shape, dtype=torch.float32, device=q.device)
        return out.copy_(scores)

    def values(p, vc, *, out=None):
        v = _per_head(read_v(vc).double(), p.shape[1], False, pow2_heads)
        o = (p.double()[..., None, :] @ v)[..., 0, :]
        if out is None:
            out = torch.empty(o.shape, dtype=torch.float32, device=p.device)
        return out.copy_(o)

    def decode(q, kc, vc, *, scale=None, out=None):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        if unscaled:
            scale = 1.0
        probs = torch.softmax(keys(q, kc) * scale, dim=-1)
        o = values(probs, vc)
        if out is None:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        return out.copy_(o)

    return dataclasses.replace(TRITON, keys=keys, values=values, decode=decode)


def _decode_unscaled(q, kc, vc, *, scale=None, out=None):
    return TRITON.decode(q, kc, vc, scale=1.0, out=out)


# --- the mutants ------------------------------------------------------------------------------
# (Their one-line bug statements: the MustafarOps objects carry no docstring of their own.)

#: Reads the bitmap LSB first (element j <-> bit j): tiles decode mirrored.
mustafar_bit_order_reversed = _mustafar_with(_reverse_bits)
#: Dequantises as (code + zero) * scale.
mustafar_zero_point_sign = _mustafar_with(_negate_zero)
#: Tile i uses the scale of tile i + 1.
mustafar_neighbour_scale = _mustafar_with(_neighbour_scale)
#: Compressor's threshold form |x| >= kth smallest: keeps one more entry per token (D - floor(s*D) + 1).
mustafar_compress_keeps_one_more = dataclasses.replace(TRITON, compress=_compress_threshold)
#: Compressor packs the 2-bit codes MSB first (code p at bits 30 - 2p); the format is LSB first.
mustafar_codes_msb_first = dataclasses.replace(TRITON, compress=_compress_msb_first)
#: Values read their tiles with the key layout's tile index (tile n as key tile (n // D, n % D)).
mustafar_values_key_layout = _torch_ops(read_v=_decompress_values_as_keys)
#: Keys: query head h reads KV head h % Hkv instead of h // G.
mustafar_keys_gqa_modulo = _torch_ops(head_modulo_keys=True)
#: Decode's softmax without the 1/sqrt(D) scale.
mustafar_decode_unscaled = dataclasses.replace(TRITON, decode=_decode_unscaled)
#: Each tile's packed data read from one word / value past offsets[i] (off by one).
mustafar_offsets_off_by_one = _torch_ops(read_k=_decompress_shifted, read_v=_decompress_shifted)


# --- a private format on both sides: compressor, decompress and kernels agree with each other only ---

def _private(transform):
    """The project's ops with ``transform`` (an involution on Compressed) applied to what the
    compressor writes and to everything decompress and the kernels read: the round trip is exact,
    the buffers are not the format's."""
    def compress_(x, sparsity, *, kind, bits=16):
        return transform(compress(x, sparsity, kind=kind, bits=bits))

    def decompress_(c):
        return decompress(transform(c))

    reading = _mustafar_with(transform)
    return dataclasses.replace(reading, compress=compress_, decompress=decompress_)


def _codes_msb_first(c):
    if c.bits != 2 or c.packed.numel() == 0:
        return c
    return dataclasses.replace(c, packed=pack_codes(unpack_codes(c.packed).flip(-1)))


#: Bitmaps written and read LSB first (element j <-> bit j) by its compressor, decompress and kernels.
mustafar_private_bit_order = _private(_reverse_bits)
#: 2-bit codes written and read MSB first by its compressor, decompress and kernels.
mustafar_private_code_order = _private(_codes_msb_first)
#: Keys and values: query head h reads KV head h >> log2(G) (a group packing assuming G a power of two).
mustafar_pow2_group_packing = _torch_ops(pow2_heads=True)

# --- bugs only the newer dimensions (S_c, views, value distributions, out=) show ------------------

def _first_multiple_of_256(c: Compressed) -> int:
    return c.shape[2] // 256 * 256


def _keys_256(q, kc, *, out=None):
    """Scores of the tokens in whole groups of 256 (four key tiles per program); the rest unwritten."""
    S = _first_multiple_of_256(kc)
    k = _per_head(decompress(kc).double(), q.shape[1], False)[:, :, :S]
    if out is None:
        out = torch.full((q.shape[0], q.shape[1], kc.shape[2]), float("nan"), device=q.device)
    out[:, :, :S] = (k @ q.double()[..., None])[..., 0]
    return out


def _values_256(p, vc, *, out=None):
    S = _first_multiple_of_256(vc)
    v = _per_head(decompress(vc).double(), p.shape[1], False)[:, :, :S]
    o = (p.double()[:, :, None, :S] @ v)[..., 0, :]
    if out is None:
        out = torch.empty(o.shape, dtype=torch.float32, device=p.device)
    return out.copy_(o)


def _decode_256(q, kc, vc, *, scale=None, out=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    probs = torch.softmax(_keys_256(q, kc)[..., :_first_multiple_of_256(kc)] * scale, dim=-1)
    o = _values_256(torch.nn.functional.pad(probs, (0, kc.shape[2] - probs.shape[-1])), vc)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return out.copy_(o)


def _values_fp16_accumulator(p, vc, *, out=None):
    """p @ V over 64-token tiles, the running sum rounded to fp16 after every tile."""
    v = _per_head(decompress(vc).float(), p.shape[1], False)
    acc = torch.zeros((*p.shape[:2], v.shape[-1]), dtype=torch.float16, device=p.device)
    for start in range(0, v.shape[2], TILE):  # one iteration per tile, each vectorized
        part = p.float()[:, :, None, start:start + TILE] @ v[:, :, start:start + TILE]
        acc = (acc.float() + part[..., 0, :]).half()
    if out is None:
        out = torch.empty(acc.shape, dtype=torch.float32, device=p.device)
    return out.copy_(acc)


def _decode_values_fp16_accumulator(q, kc, vc, *, scale=None, out=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    probs = torch.softmax(TRITON.keys(q, kc) * scale, dim=-1)
    o = _values_fp16_accumulator(probs, vc)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return out.copy_(o)


def _decode_online(**bug):
    """Decode as a tiled online softmax over 64-token tiles of the decompressed cache."""
    def decode(q, kc, vc, *, scale=None, out=None):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        k = _per_head(decompress(kc).float(), q.shape[1], False)
        v = _per_head(decompress(vc).float(), q.shape[1], False)
        o, _ = online_attention(q[:, :, None], k, v, scale, **bug)
        if out is None:
            out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        return out.copy_(o[:, :, 0])
    return decode


def _contiguous_reads(fn):
    def run(first, *rest, **kw):
        return fn(read_as_contiguous(first), *rest, **kw)
    return run


def _no_out(fn):
    def run(*args, **kw):
        kw.pop("out", None)
        return fn(*args, **kw)
    return run


#: Keys, values and decode cover only whole groups of 256 tokens (S_c assumed a multiple of 256).
mustafar_assumes_multiple_of_256 = dataclasses.replace(TRITON, keys=_keys_256, values=_values_256,
                                                       decode=_decode_256)
#: Reads q / p and the compressor's input as if contiguous (strides ignored).
mustafar_reads_views_as_contiguous = dataclasses.replace(
    TRITON, compress=_contiguous_reads(TRITON.compress), keys=_contiguous_reads(TRITON.keys),
    values=_contiguous_reads(TRITON.values), decode=_contiguous_reads(TRITON.decode))
#: Values (and decode's P @ V) accumulate in fp16, rounded after every 64-token tile.
mustafar_values_fp16_accumulator = dataclasses.replace(TRITON, values=_values_fp16_accumulator,
                                                       decode=_decode_values_fp16_accumulator)
#: Decode's softmax as a tiled online softmax whose running max is never updated after the first tile.
mustafar_decode_stale_running_max = dataclasses.replace(TRITON, decode=_decode_online(stale_max=True,
                                                                                      p_dtype=torch.float16))
#: Decode's softmax without subtracting the row max (fp32): exp overflows past ~88.7.
mustafar_decode_exp_without_max = dataclasses.replace(TRITON, decode=_decode_online(exp_without_max=True))
#: Decode's tiled online softmax with the bugs the catalogs' input classes target.
mustafar_decode_max_clamped_at_zero = dataclasses.replace(
    TRITON, decode=_decode_online(**SOFTMAX_BUGS["max_clamped_at_zero"][1]))
mustafar_decode_max_shared_across_rows = dataclasses.replace(
    TRITON, decode=_decode_online(**SOFTMAX_BUGS["max_shared_across_rows"][1]))
mustafar_decode_ignores_scale = dataclasses.replace(TRITON, decode=_decode_online(**SOFTMAX_BUGS["ignores_scale"][1]))
mustafar_decode_max_before_scale = dataclasses.replace(
    TRITON, decode=_decode_online(**SOFTMAX_BUGS["max_before_scale"][1]))
mustafar_decode_zero_scale_as_default = dataclasses.replace(
    TRITON, decode=_decode_online(**SOFTMAX_BUGS["zero_scale_as_default"][1]))
#: Keys, values and decode ignore the caller's out= and return tensors of their own.
mustafar_ignores_out = dataclasses.replace(TRITON, keys=_no_out(TRITON.keys), values=_no_out(TRITON.values),
                                           decode=_no_out(TRITON.decode))

BUGS = {
    "mustafar_assumes_multiple_of_256": "Keys, values and decode cover whole groups of 256 tokens only "
                                        "(S_c assumed a multiple of 256).",
    "mustafar_reads_views_as_contiguous": "Reads q / p and the compressor's input as if contiguous (strides ignored).",
    "mustafar_values_fp16_accumulator": "Values (and decode's P @ V) accumulate in fp16, rounded after every 64-token tile.",
    "mustafar_decode_stale_running_max": "Decode's tiled online softmax never updates its running max after the "
                                         "first tile (fp16 probabilities overflow).",
    "mustafar_decode_exp_without_max": "Decode's softmax without subtracting the row max (fp32): exp overflows past ~88.7.",
    "mustafar_ignores_out": "Keys, values and decode ignore the caller's out= and return tensors of their own.",
    "mustafar_bit_order_reversed": "Reads the bitmap LSB first (element j <-> bit j): tiles decode mirrored.",
    "mustafar_zero_point_sign": "Dequantises as (code + zero) * scale.",
    "mustafar_neighbour_scale": "Tile i uses the scale of tile i + 1.",
    "mustafar_compress_keeps_one_more": "Compressor keeps |x| >= the floor(s*D)-th smallest: one more entry per token.",
    "mustafar_codes_msb_first": "Compressor packs the 2-bit codes MSB first; the format reads them LSB first.",
    "mustafar_values_key_layout": "Values kernel computes its tile index with the key layout.",
    "mustafar_keys_gqa_modulo": "Keys: query head h reads KV head h % Hkv instead of h // G.",
    "mustafar_decode_unscaled": "Decode's softmax without the 1/sqrt(D) scale.",
    "mustafar_offsets_off_by_one": "Each tile's packed data read from one word / value past offsets[i].",
    "mustafar_private_bit_order": "Compressor, decompress and kernels all use bitmaps LSB first (element j <-> "
                                  "bit j): a round trip that agrees only with itself.",
    "mustafar_private_code_order": "Compressor, decompress and kernels all pack the 2-bit codes MSB first: a "
                                   "round trip that agrees only with itself.",
    "mustafar_pow2_group_packing": "Keys and values: query head h reads KV head h >> log2(G) (assumes G a power "
                                   "of two).",
    "mustafar_decode_max_clamped_at_zero": SOFTMAX_BUGS["max_clamped_at_zero"][0],
    "mustafar_decode_max_shared_across_rows": SOFTMAX_BUGS["max_shared_across_rows"][0],
    "mustafar_decode_ignores_scale": "Decode ignores the scale argument: always softmax(q.k / sqrt(D)).",
    "mustafar_decode_max_before_scale": SOFTMAX_BUGS["max_before_scale"][0],
    "mustafar_decode_zero_scale_as_default": SOFTMAX_BUGS["zero_scale_as_default"][0],
}

MUTANTS = {name: globals()[name] for name in BUGS}
for _name, _bug in BUGS.items():  # each mutant's docstring states its bug (frozen: set it directly)
    object.__setattr__(MUTANTS[_name], "__doc__", _bug)


# --- controls: the format written from docs/contract.md section 9, independently of the project's ----------

def _spec_tiles(x: torch.Tensor, kind: str) -> torch.Tensor:
    """[B, H, S, D] -> [n_tiles, 64]: key tiles run over 64 tokens of one channel (tiles ordered
    by token block, then channel), value tiles over 64 channels of one token."""
    B, H, S, D = x.shape
    if kind == "key":
        return x.reshape(B, H, S // TILE, TILE, D).permute(0, 1, 2, 4, 3).reshape(-1, TILE)
    return x.reshape(-1, TILE)


def _spec_untile(tiles: torch.Tensor, kind: str, shape) -> torch.Tensor:
    B, H, S, D = shape
    if kind == "key":
        return tiles.reshape(B, H, S // TILE, D, TILE).permute(0, 1, 2, 4, 3).reshape(B, H, S, D)
    return tiles.reshape(B, H, S, D)


_SPEC_BITS = torch.tensor([-(1 << 63)] + [1 << (63 - j) for j in range(1, TILE)], dtype=torch.int64)


def _spec_pack(x: torch.Tensor, keep: torch.Tensor, kind: str, bits: int) -> Compressed:
    tiles, kept = _spec_tiles(x, kind), _spec_tiles(keep, kind)
    bitmaps = (kept.long() * _SPEC_BITS.to(x.device)).sum(-1)              # bit 63 - j for element j (MSB first)
    count = kept.sum(-1)
    if bits == 16:
        offsets = torch.cat([count.new_zeros(1), count.cumsum(0)]).int()
        return Compressed(kind, 16, tuple(x.shape), bitmaps, offsets, tiles[kept])
    vals = tiles.float()
    lo = torch.where(kept, vals, float("inf")).amin(-1)
    hi = torch.where(kept, vals, float("-inf")).amax(-1)
    lo, hi = torch.where(count > 0, lo, 0.0), torch.where(count > 0, hi, 0.0)
    scale = (hi - lo) / 3
    scale = torch.where(scale == 0, 1.0, scale)
    zero = torch.floor(-lo / scale + 0.5)
    code = (torch.floor(vals / scale[:, None] + 0.5) + zero[:, None]).clamp(0, 3).long()
    words = (count + 15) // 16
    offsets = torch.cat([words.new_zeros(1), words.cumsum(0)])
    place = kept.long().cumsum(-1) - 1                        # p: the element's rank among the kept
    word = (offsets[:-1, None] + place // 16)[kept]
    packed = torch.zeros(int(offsets[-1]), dtype=torch.int64, device=x.device)
    packed.scatter_add_(0, word, (code << (2 * (place % 16)))[kept])
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).int()
    return Compressed(kind, 2, tuple(x.shape), bitmaps, offsets.int(), packed, scale, zero.int())


def _spec_unpack(c: Compressed) -> torch.Tensor:
    """The dense cache (fp32) the buffers describe: zero where nothing is kept."""
    kept = ((c.bitmaps.long()[:, None] >> (63 - torch.arange(TILE, device=c.bitmaps.device))) & 1).bool()
    place = kept.long().cumsum(-1) - 1
    start = c.offsets[:-1].long()[:, None]
    if c.bits == 16:
        where = (start + place).clamp(0, max(c.packed.numel() - 1, 0))
        vals = c.packed.float()[where] if c.packed.numel() else torch.zeros(kept.shape, device=kept.device)
    else:
        where = (start + place // 16).clamp(0, max(c.packed.numel() - 1, 0))
        word = (c.packed.long()[where] & 0xFFFFFFFF) if c.packed.numel() else torch.zeros_like(place)
        code = (word >> (2 * (place % 16))) & 3
        vals = (code - c.zero.long()[:, None]).float() * c.scale.float()[:, None]
    return _spec_untile(torch.where(kept, vals, 0.0), c.kind, c.shape)


def _control(select_kept, dtype):
    """MustafarOps from the spec: ``select_kept(x, keep_count)`` picks each token's kept entries,
    the math runs in ``dtype`` on the decompressed cache."""
    def compress_(x, sparsity, *, kind, bits=16):
        keep_count = x.shape[-1] - int(sparsity * x.shape[-1])
        return _spec_pack(x, select_kept(x, keep_count), kind, bits)

    def decompress_(c):
        dense = _spec_unpack(c)
        return dense.half() if c.bits == 16 else dense

    def heads(c, Hq):
        dense = _spec_unpack(c).to(dtype)
        return dense.repeat_interleave(Hq // dense.shape[1], dim=1)

    def keys_(q, kc, *, out=None):
        scores = (heads(kc, q.shape[1]) @ q.to(dtype)[..., None])[..., 0]
        out = torch.empty(scores.shape, dtype=torch.float32, device=q.device) if out is None else out
        return out.copy_(scores)

    def values_(p, vc, *, out=None):
        o = (p.to(dtype)[:, :, None, :] @ heads(vc, p.shape[1]))[:, :, 0]
        out = torch.empty(o.shape, dtype=torch.float32, device=p.device) if out is None else out
        return out.copy_(o)

    def decode_(q, kc, vc, *, scale=None, out=None):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        s = (heads(kc, q.shape[1]) @ q.to(dtype)[..., None])[..., 0] * scale
        p = torch.exp(s - s.amax(-1, keepdim=True))
        o = ((p / p.sum(-1, keepdim=True))[:, :, None, :] @ heads(vc, q.shape[1]))[:, :, 0]
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
        return out.copy_(o)

    return MustafarOps(compress=compress_, decompress=decompress_, keys=keys_, values=values_, decode=decode_)


def _topk_kept(x, keep_count):
    idx = torch.topk(x.abs().float(), keep_count, dim=-1).indices
    return torch.zeros(x.shape, dtype=torch.bool, device=x.device).scatter_(-1, idx, True)


def _sorted_kept_high_index_first(x, keep_count):
    # Ties broken towards the higher channel: the other way from the format's own compressor.
    flipped = x.abs().float().flip(-1)
    order = torch.argsort(flipped, dim=-1, descending=True, stable=True)[..., :keep_count]
    return torch.zeros(x.shape, dtype=torch.bool, device=x.device).scatter_(-1, x.shape[-1] - 1 - order, True)


CONTROLS = {
    "mustafar_topk_fp32": _control(_topk_kept, torch.float32),
    "mustafar_sorted_ties_high_fp64": _control(_sorted_kept_high_index_first, torch.float64),
}
for _name, _doc in (("mustafar_topk_fp32", "torch.topk compressor, the format packed and read from docs/contract.md, "
                                           "fp32 math on the decompressed cache."),
                    ("mustafar_sorted_ties_high_fp64", "Stable sort compressor breaking ties towards the higher "
                                                       "channel, the format from docs/contract.md, fp64 math.")):
    object.__setattr__(CONTROLS[_name], "__doc__", _doc)
