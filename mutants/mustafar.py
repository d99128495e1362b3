"""Planted-bug implementations of the Mustafar ops (kernels.md section 9); the suite must fail each.

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

from cases.mustafar import TRITON
from kernels.mustafar_format import (Compressed, bitmaps_from_mask, compress, decompress,
                                     mask_from_bitmaps, pack, pack_codes, unpack_codes)


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
