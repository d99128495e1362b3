"""Planted-bug implementations of the Mustafar ops (kernels.md section 9); the suite must fail each.

Each mutant is a ``cases.mustafar.MustafarOps`` (the project's ops, ``cases.mustafar.TRITON``,
with one part replaced through ``dataclasses.replace``) that introduces one bug:

* format-read bugs of the compute kernels run the project's kernels on transformed buffers
  (``_mustafar_with``), the compressor untouched;
* compressor bugs replace ``compress`` (``_compress``: the format's packing written out, with
  the bug) and keep the project's ``decompress``, so the round-trip cases see them;
* the other compute bugs are vectorized torch ops (float64) on the dense cache the buffers
  describe (``kernels.mustafar_format.decompress``, or a variant of it with the bug).

Nothing here calls references/. The module docstring of kernels/mustafar_format.py is the format.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from cases.mustafar import TRITON
from kernels.mustafar_format import (CODES_PER_WORD, TILE, Compressed, _offsets, bitmaps_from_mask,
                                     decompress, dequantize, from_tiles, mask_from_bitmaps,
                                     quant_params, quantize, to_tiles)


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


def _topk_mask(x: torch.Tensor, sparsity: float) -> torch.Tensor:
    D = x.shape[-1]
    keep = D - int(sparsity * D)
    idx = (-x.abs()).argsort(dim=-1, stable=True)[..., :keep]
    return torch.zeros_like(x, dtype=torch.bool).scatter_(-1, idx, True)


def _compress(x, sparsity, *, kind, bits=16, mask_fn=_topk_mask, msb_first=False):
    """The format's compressor written out (kernels/mustafar_format.py), with switchable bugs."""
    mask = to_tiles(mask_fn(x, sparsity), kind)
    tiles = to_tiles(x, kind)
    bitmaps = bitmaps_from_mask(mask)
    counts = mask.sum(-1)
    order = (~mask).to(torch.int8).argsort(dim=-1, stable=True)
    slot = torch.arange(TILE, device=x.device)[None, :]
    if bits == 16:
        packed = tiles.gather(-1, order)[slot < counts[:, None]]
        return Compressed(kind, 16, tuple(x.shape), bitmaps, _offsets(counts), packed)
    scale, zero = quant_params(tiles, mask)
    codes = quantize(tiles, scale, zero).gather(-1, order)
    codes = torch.where(slot < counts[:, None], codes, torch.zeros_like(codes))
    pos = torch.arange(CODES_PER_WORD, device=x.device)
    if msb_first:
        pos = CODES_PER_WORD - 1 - pos
    shifts = (2 * pos).to(torch.int64)
    words64 = (codes.view(-1, TILE // CODES_PER_WORD, CODES_PER_WORD).to(torch.int64) << shifts).sum(-1)
    words = (words64 - ((words64 >= 2**31).to(torch.int64) << 32)).to(torch.int32)
    n_words = (counts + CODES_PER_WORD - 1) // CODES_PER_WORD
    packed = words[torch.arange(TILE // CODES_PER_WORD, device=x.device)[None, :] < n_words[:, None]]
    return Compressed(kind, 2, tuple(x.shape), bitmaps, _offsets(n_words), packed, scale, zero)


def _compress_threshold(x, sparsity, *, kind, bits=16):
    return _compress(x, sparsity, kind=kind, bits=bits, mask_fn=_threshold_mask)


def _compress_msb_first(x, sparsity, *, kind, bits=16):
    return _compress(x, sparsity, kind=kind, bits=bits, msb_first=True)


# --- compute bugs: torch ops on the dense cache the buffers describe ---------------------------

def _decompress_shifted(c: Compressed) -> torch.Tensor:
    """``decompress`` reading each tile from one word (2-bit) / value (fp16) past offsets[i]."""
    mask = mask_from_bitmaps(c.bitmaps)
    rank = mask.to(torch.int64).cumsum(-1) - 1
    start = c.offsets[:-1].to(torch.int64)[:, None] + 1
    packed = torch.cat([c.packed, c.packed.new_zeros(2)])
    spare = packed.numel() - 1
    if c.bits == 16:
        vals = packed[torch.where(mask, start + rank, spare)]
        return from_tiles(torch.where(mask, vals, torch.zeros_like(vals)), c.kind, c.shape)
    words = packed[torch.where(mask, start + rank.div(CODES_PER_WORD, rounding_mode="floor"), spare)]
    codes = ((words.to(torch.int64) >> (2 * (rank % CODES_PER_WORD))) & 3).to(torch.int32)
    vals = dequantize(codes, c.scale, c.zero)
    return from_tiles(torch.where(mask, vals, torch.zeros_like(vals)), c.kind, c.shape)


def _decompress_values_as_keys(c: Compressed) -> torch.Tensor:
    """Value tiles addressed with the key layout: tile n read as key tile (n // D, n % D)."""
    return decompress(dataclasses.replace(c, kind="key"))


def _per_head(dense: torch.Tensor, Hq: int, modulo: bool) -> torch.Tensor:
    """[B, Hkv, S, D] -> [B, Hq, S, D]: head h reads KV head h // G (or h % Hkv when ``modulo``)."""
    Hkv = dense.shape[1]
    h = torch.arange(Hq, device=dense.device)
    return dense[:, (h % Hkv) if modulo else (h // (Hq // Hkv))]


def _torch_ops(*, read_k=decompress, read_v=decompress, head_modulo_keys=False, unscaled=False):
    """MustafarOps with torch keys / values / decode (the project's compressor pair)."""
    def keys(q, kc, *, out=None):
        k = _per_head(read_k(kc).double(), q.shape[1], head_modulo_keys)
        scores = (k @ q.double()[..., None])[..., 0]
        if out is None:
            out = torch.empty(scores.shape, dtype=torch.float32, device=q.device)
        return out.copy_(scores)

    def values(p, vc, *, out=None):
        v = _per_head(read_v(vc).double(), p.shape[1], False)
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

BUGS = {
    "mustafar_bit_order_reversed": "Reads the bitmap LSB first (element j <-> bit j): tiles decode mirrored.",
    "mustafar_zero_point_sign": "Dequantises as (code + zero) * scale.",
    "mustafar_neighbour_scale": "Tile i uses the scale of tile i + 1.",
    "mustafar_compress_keeps_one_more": "Compressor keeps |x| >= the floor(s*D)-th smallest: one more entry per token.",
    "mustafar_codes_msb_first": "Compressor packs the 2-bit codes MSB first; the format reads them LSB first.",
    "mustafar_values_key_layout": "Values kernel computes its tile index with the key layout.",
    "mustafar_keys_gqa_modulo": "Keys: query head h reads KV head h % Hkv instead of h // G.",
    "mustafar_decode_unscaled": "Decode's softmax without the 1/sqrt(D) scale.",
    "mustafar_offsets_off_by_one": "Each tile's packed data read from one word / value past offsets[i].",
}

MUTANTS = {name: globals()[name] for name in BUGS}
for _name, _bug in BUGS.items():  # each mutant's docstring states its bug (frozen: set it directly)
    object.__setattr__(MUTANTS[_name], "__doc__", _bug)
