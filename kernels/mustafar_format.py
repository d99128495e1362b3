"""The Mustafar compressed KV format (docs/contract.md section 9): pruning, tiling, bitmaps, packing, and
the 2-bit quantisation, in vectorized PyTorch. ``compress`` builds the buffers, ``decompress`` is
their exact inverse (fp16) or the documented dequantisation (2-bit).

A cache ``x [B, Hkv, S_c, D]`` (fp16) is pruned per token: each row of ``D`` keeps its
``D - floor(s * D)`` largest-magnitude entries (ties: the lower channel), the rest become zero. Each
(batch, KV head) slice ``i = b * Hkv + h`` is cut into 64-element tiles:

* ``kind="key"``: tile ``(t, c)`` holds ``x[t*64 + j, c]``, j = 0..63 (64 tokens of one channel);
  local index ``t * D + c``;
* ``kind="value"``: tile ``(s, cb)`` holds ``x[s, cb*64 + j]`` (64 channels of one token); local
  index ``s * (D // 64) + cb``.

Global tile index ``i * tiles_per_slice + local``. Buffers, all flat over the global tiles:

* ``bitmaps`` int64 ``[n_tiles]``: bit ``63 - j`` set iff element ``j`` is kept (MSB first; bit 63
  is the sign bit of the int64);
* ``offsets`` int32 ``[n_tiles + 1]``: tile ``i`` occupies ``packed[offsets[i]:offsets[i+1]]``;
* fp16 (``bits=16``): ``packed`` fp16, the kept values in tile order, ascending element order;
* 2-bit (``bits=2``): ``packed`` int32 words; tile ``i`` has ``ceil(nnz_i / 16)`` words starting on
  a word; its ``p``-th kept value's code sits in word ``offsets[i] + p // 16`` at bits
  ``2 * (p % 16)`` and up (LSB first). ``scale`` fp32 and ``zero`` int32 ``[n_tiles]``:
  over the tile's kept values (in fp32) ``scale = (max - min) / 3`` (1.0 if that is 0, or if
  nothing is kept), ``zero = floor(-min / scale + 0.5)``; ``code = clamp(floor(x / scale + 0.5)
  + zero, 0, 3)``; dequantised value ``(code - zero) * scale`` (fp32).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Optional

import torch

TILE = 64
CODES_PER_WORD = 16
KINDS = ("key", "value")
BITS = (16, 2)


@dataclass(frozen=True)
class Compressed:
    """One compressed cache (keys or values) of logical shape ``shape = (B, Hkv, S_c, D)``."""
    kind: str
    bits: int
    shape: tuple
    bitmaps: torch.Tensor
    offsets: torch.Tensor
    packed: torch.Tensor
    scale: Optional[torch.Tensor] = None
    zero: Optional[torch.Tensor] = None

    TENSORS = ("bitmaps", "offsets", "packed", "scale", "zero")

    def tensors(self, prefix: str = "") -> dict:
        """The buffers by name (``prefix`` + field), the 2-bit ones only when present."""
        return {prefix + n: getattr(self, n) for n in self.TENSORS if getattr(self, n) is not None}

    @classmethod
    def from_tensors(cls, kind: str, bits: int, shape, tensors: dict, prefix: str = "") -> "Compressed":
        """The cache over ``tensors[prefix + name]`` for each buffer name (None where absent).

        A caller that keeps the buffers in a dict makes one per kernel call, so the fields are
        set in one step rather than through the frozen dataclass's ``__init__`` (a guarded
        ``object.__setattr__`` per field; there is no ``__post_init__`` to skip)."""
        get = tensors.get
        obj = object.__new__(cls)
        obj.__dict__.update(zip(_FIELDS, (kind, bits, tuple([int(s) for s in shape]),
                                          *[get(prefix + n) for n in cls.TENSORS])))
        return obj

    def to(self, device) -> "Compressed":
        return replace(self, **{n: t.to(device) for n, t in self.tensors().items()})

    @property
    def n_tiles(self) -> int:
        return self.bitmaps.numel()

    def nbytes(self) -> int:
        """Bytes of every buffer (what the compression ratio counts)."""
        return sum(t.numel() * t.element_size() for t in self.tensors().values())


#: Compressed's fields in order: the meta, then ``Compressed.TENSORS``
#: (tests/test_mustafar_format.py holds ``from_tensors`` to the constructor).
_FIELDS = tuple(f.name for f in fields(Compressed))


def tile_grid(kind: str, S_c: int, D: int) -> tuple[int, int]:
    """(tiles per slice, elements per tile) for a slice of S_c tokens x D channels."""
    if kind == "key":
        return (S_c // TILE) * D, TILE
    return S_c * (D // TILE), TILE


def kept_per_token(D: int, sparsity: float) -> int:
    """Entries each token keeps along D: D - floor(s * D)."""
    return D - int(sparsity * D)


def prune_mask(x: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Per-token magnitude pruning along the last axis: True for the top D - floor(s*D) by |x|,
    ties to the lower index."""
    keep = kept_per_token(x.shape[-1], sparsity)
    # Ties in |x| go to the lower channel index (a stable sort), so the result is defined.
    idx = (-x.abs()).argsort(dim=-1, stable=True)[..., :keep]
    return torch.zeros_like(x, dtype=torch.bool).scatter_(-1, idx, True)


def prune(x: torch.Tensor, sparsity: float) -> torch.Tensor:
    """``x`` with every entry outside its token's top D - floor(s*D) set to zero."""
    return torch.where(prune_mask(x, sparsity), x, torch.zeros_like(x))


def to_tiles(x: torch.Tensor, kind: str) -> torch.Tensor:
    """[B, Hkv, S_c, D] -> [n_tiles, 64] in global tile order."""
    B, H, S, D = x.shape
    if kind == "key":
        # tile (t, c): x[t*64 + j, c] -> [B, H, S/64, 64, D] -> [B, H, S/64, D, 64]
        return x.reshape(B, H, S // TILE, TILE, D).transpose(-1, -2).reshape(-1, TILE)
    return x.reshape(B, H, S, D // TILE, TILE).reshape(-1, TILE)


def from_tiles(tiles: torch.Tensor, kind: str, shape) -> torch.Tensor:
    """The inverse of ``to_tiles``."""
    B, H, S, D = shape
    if kind == "key":
        return tiles.reshape(B, H, S // TILE, D, TILE).transpose(-1, -2).reshape(B, H, S, D)
    return tiles.reshape(B, H, S, D)


# MSB first: element j <-> bit 63 - j. 1 << 63 is the int64 sign bit, fine for OR/AND.
_BIT = torch.tensor([1 << (63 - j) if j else -(1 << 63) for j in range(TILE)], dtype=torch.int64)


def bitmaps_from_mask(mask: torch.Tensor) -> torch.Tensor:
    """Bool [n, 64] -> int64 [n] with bit 63 - j set iff mask[:, j]."""
    return (mask.to(torch.int64) * _BIT.to(mask.device)).sum(-1)


def mask_from_bitmaps(bitmaps: torch.Tensor) -> torch.Tensor:
    """int64 [n] -> bool [n, 64]: element j kept iff bit 63 - j is set."""
    return (bitmaps[:, None] & _BIT.to(bitmaps.device)) != 0


def quant_params(tiles: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-tile (scale fp32, zero int32) over the kept values (min-max, 2 bits)."""
    x = tiles.float()
    inf = torch.tensor(float("inf"), device=x.device)
    lo = torch.where(mask, x, inf).amin(-1)
    hi = torch.where(mask, x, -inf).amax(-1)
    empty = ~mask.any(-1)
    lo, hi = torch.where(empty, 0.0, lo), torch.where(empty, 0.0, hi)
    scale = (hi - lo) / 3
    scale = torch.where(scale == 0, torch.ones_like(scale), scale)
    zero = torch.floor(-lo / scale + 0.5)
    return scale, zero.to(torch.int32)


def quantize(tiles: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """int32 codes in [0, 3] for every element of [n, 64] tiles (kept or not)."""
    q = torch.floor(tiles.float() / scale[:, None] + 0.5) + zero[:, None].float()
    return q.clamp(0, 3).to(torch.int32)


def dequantize(codes: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    return (codes - zero[:, None]).float() * scale[:, None]


def _offsets(counts: torch.Tensor) -> torch.Tensor:
    return torch.cat([counts.new_zeros(1), counts.cumsum(0)]).to(torch.int32)


def _check_shape(fn: str, x: torch.Tensor, kind: str, bits: int) -> None:
    if kind not in KINDS:
        raise ValueError(f"{fn}: kind must be one of {KINDS}, got {kind!r}")
    if bits not in BITS:
        raise ValueError(f"{fn}: bits must be one of {BITS}, got {bits!r}")
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"{fn}: x must be a [B, Hkv, S_c, D] tensor")
    if x.device.type == "meta":
        raise ValueError(f"{fn}: x is on the meta device, which holds no data")
    if x.dtype != torch.float16:
        raise TypeError(f"{fn}: x must have dtype float16, got {x.dtype}")
    _, _, S, D = x.shape
    if kind == "key" and S % TILE:
        raise ValueError(f"{fn}: S_c must be a multiple of {TILE} for key tiles (64 tokens of one "
                         f"channel), got S_c={S}")
    if kind == "value" and D % TILE:
        raise ValueError(f"{fn}: D must be a multiple of {TILE} for value tiles (64 channels of one "
                         f"token), got D={D}")


def compress(x: torch.Tensor, sparsity: float, *, kind: str, bits: int = 16) -> Compressed:
    """Prune ``x [B, Hkv, S_c, D]`` (fp16) per token to ``sparsity`` and pack it in 64-element
    tiles (see the module docstring)."""
    _check_shape("compress", x, kind, bits)
    if not 0.0 <= float(sparsity) < 1.0:
        raise ValueError(f"compress: sparsity must be in [0, 1), got {sparsity}")
    return pack(x, prune_mask(x, sparsity), kind=kind, bits=bits)


def pack(x: torch.Tensor, keep: torch.Tensor, *, kind: str, bits: int) -> Compressed:
    """The buffers of ``x`` keeping the entries where ``keep`` (same shape) is True, whatever
    their value (a kept 0.0 stays in the bitmap)."""
    mask = to_tiles(keep, kind)
    tiles = to_tiles(x, kind)
    bitmaps = bitmaps_from_mask(mask)
    counts = mask.sum(-1)
    # Ascending element order within a tile, tiles in order: a stable sort of "not kept" puts
    # each tile's kept elements first, in order.
    order = (~mask).to(torch.int8).argsort(dim=-1, stable=True)
    slot = torch.arange(TILE, device=x.device)[None, :]
    if bits == 16:
        packed = tiles.gather(-1, order)[slot < counts[:, None]]
        return Compressed(kind, 16, tuple(x.shape), bitmaps, _offsets(counts), packed)
    scale, zero = quant_params(tiles, mask)
    codes = quantize(tiles, scale, zero).gather(-1, order)
    codes = torch.where(slot < counts[:, None], codes, torch.zeros_like(codes))
    words = pack_codes(codes.view(-1, CODES_PER_WORD)).view(-1, TILE // CODES_PER_WORD)
    # A tile uses ceil(count / 16) of its 4 possible words.
    n_words = (counts + CODES_PER_WORD - 1) // CODES_PER_WORD
    packed = words[torch.arange(TILE // CODES_PER_WORD, device=x.device)[None, :] < n_words[:, None]]
    return Compressed(kind, 2, tuple(x.shape), bitmaps, _offsets(n_words), packed, scale, zero)


_SHIFTS = 2 * torch.arange(CODES_PER_WORD, dtype=torch.int64)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """[n, 16] codes in [0, 3] -> int32 [n] words, code p at bits 2p and 2p + 1 (LSB first)."""
    words64 = (codes.to(torch.int64) << _SHIFTS.to(codes.device)).sum(-1)
    return (words64 - ((words64 >= 2**31).to(torch.int64) << 32)).to(torch.int32)  # int32 bits


def unpack_codes(words: torch.Tensor) -> torch.Tensor:
    """The inverse of ``pack_codes``: int32 [n] -> int32 [n, 16]."""
    return ((words.to(torch.int64)[:, None] >> _SHIFTS.to(words.device)) & 3).to(torch.int32)


def decompress(c: Compressed) -> torch.Tensor:
    """The dense cache the buffers describe: fp16 (exact inverse of ``compress``) or, for 2 bits,
    fp32 dequantised values; zero where the bitmap has no bit."""
    mask = mask_from_bitmaps(c.bitmaps)
    rank = mask.to(torch.int64).cumsum(-1) - 1          # p: the element's place among the kept
    start = c.offsets[:-1].to(torch.int64)[:, None]
    # One trailing element so that unkept slots (and an all-empty cache) index something.
    packed = torch.cat([c.packed, c.packed.new_zeros(1)])
    spare = packed.numel() - 1
    if c.bits == 16:
        vals = packed[torch.where(mask, start + rank, spare)]
        return from_tiles(torch.where(mask, vals, torch.zeros_like(vals)), c.kind, c.shape)
    words = packed[torch.where(mask, start + rank.div(CODES_PER_WORD, rounding_mode="floor"), spare)]
    codes = ((words.to(torch.int64) >> (2 * (rank % CODES_PER_WORD))) & 3).to(torch.int32)
    vals = dequantize(codes, c.scale, c.zero)
    return from_tiles(torch.where(mask, vals, torch.zeros_like(vals)), c.kind, c.shape)
