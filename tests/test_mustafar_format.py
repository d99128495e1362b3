"""The Mustafar format (kernels/mustafar_format.py): bit and word order as documented, exact
round trip, the 2-bit dequantisation, byte accounting, the planted edge tiles, bad input."""
import pytest
import torch

from cases.mustafar import FAMILY, plant_edge_tiles
from kernels.mustafar_format import (Compressed, TILE, compress, decompress, prune)
from references.mustafar import compressed_reference, keep_mask


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def cache(B=1, H=2, S=128, D=64, seed=0):
    return torch.randn((B, H, S, D), generator=gen(seed)).half()


def one_value_tile(kept):
    """A value cache [1, 1, 1, 64] whose single tile keeps exactly the elements ``kept``."""
    x = torch.zeros((1, 1, 1, TILE), dtype=torch.float16)
    x[..., kept] = torch.arange(1, len(kept) + 1, dtype=torch.float16)
    return x


@pytest.mark.parametrize("kept,bitmap", [([0], -(2**63)), ([63], 1), ([1, 62], 2**62 + 2)])
def test_bitmap_is_msb_first(kept, bitmap):
    # s such that exactly len(kept) of 64 entries survive: the others are zeros (ties broken low,
    # and a zero never beats a non-zero).
    c = compress(one_value_tile(kept), 1 - len(kept) / TILE, kind="value", bits=16)
    assert c.bitmaps.tolist() == [bitmap]
    assert c.packed.tolist() == list(range(1, len(kept) + 1))  # ascending element order


def test_codes_are_lsb_first_16_per_word():
    x = torch.zeros((1, 1, 1, TILE), dtype=torch.float16)
    x[..., :17] = torch.tensor([0, 1, 2, 3] * 4 + [3], dtype=torch.float16)  # min 0, max 3: scale 1
    c = compress(x, 1 - 17 / TILE, kind="value", bits=2)
    assert c.scale.tolist() == [1.0] and c.zero.tolist() == [0]
    assert c.offsets.tolist() == [0, 2]  # 17 codes: two words
    w0, w1 = (int(w) & 0xFFFFFFFF for w in c.packed)
    assert [(w0 >> (2 * i)) & 3 for i in range(16)] == [0, 1, 2, 3] * 4
    assert w1 == 3


@pytest.mark.parametrize("kind", ["key", "value"])
@pytest.mark.parametrize("s", [0.0, 0.5, 0.7])
def test_fp16_round_trip_is_bit_exact(kind, s):
    x = cache(D=128)
    x[0, 0, 0, :6] = 0.5  # ties in |x|
    assert torch.equal(decompress(compress(x, s, kind=kind, bits=16)), prune(x, s))
    assert torch.equal(prune(x, s) != 0, keep_mask(x, s) & (x != 0))


@pytest.mark.parametrize("kind", ["key", "value"])
@pytest.mark.parametrize("s", [0.0, 0.5, 0.7])
def test_two_bit_decode_is_the_documented_dequantisation(kind, s):
    x = cache(D=128, seed=1)
    got = decompress(compress(x, s, kind=kind, bits=2))
    assert got.dtype == torch.float32
    assert torch.equal(got, compressed_reference(x, s, kind, 2))


def test_byte_accounting_at_the_origin_shape():
    B, H, S, D = 2, 4, 256, 128
    k = torch.randn((B, H, S, D), generator=gen(2)).half()
    c = compress(k, 0.7, kind="key", bits=2)
    n_tiles = B * H * (S // TILE) * D
    words = int(c.offsets[-1])
    assert c.nbytes() == 8 * n_tiles + 4 * (n_tiles + 1) + 4 * words + 4 * n_tiles + 4 * n_tiles
    # Each tile holds 64 * 0.3 kept on average (at most 64): 1 or 2 words per tile.
    assert n_tiles <= words <= 2 * n_tiles
    assert c.nbytes() < 0.3 * k.numel() * 2


def test_edge_cases_hold_empty_full_and_flat_tiles():
    c = next(c for c in FAMILY.cases if c["op"] == "decode" and c["init"] == "edge" and c["bits"] == 2)
    inputs = FAMILY.make_inputs(c, c.generator())
    for prefix in ("kc_", "vc_"):
        bm, scale = inputs[prefix + "bitmaps"], inputs[prefix + "scale"]
        assert (bm == 0).any(), prefix            # keeps nothing
        assert (bm == -1).any(), prefix           # keeps all 64
        assert ((scale == 1.0) & (bm == -1)).any(), prefix  # full and flat (min == max)


def test_plant_edge_tiles_leaves_other_tokens():
    k, v = cache(S=128, D=128), cache(S=128, D=128, seed=3)
    k0, v0 = k.clone(), v.clone()
    plant_edge_tiles(k, v)
    assert torch.equal(k[:, :, 64:], k0[:, :, 64:]) and torch.equal(v[:, :, 2:], v0[:, :, 2:])


@pytest.mark.parametrize("kw,exc,msg", [
    (dict(x=cache(S=100), kind="key"), ValueError, "compress: S_c must be a multiple of 64"),
    (dict(x=cache(D=48), kind="value"), ValueError, "compress: D must be a multiple of 64"),
    (dict(x=cache().float(), kind="key"), TypeError, "compress: x must have dtype float16"),
    (dict(x=cache(), kind="query"), ValueError, "compress: kind must be one of"),
    (dict(x=cache(), kind="key", bits=4), ValueError, "compress: bits must be one of"),
    (dict(x=cache(), kind="key", sparsity=1.0), ValueError, "compress: sparsity must be in"),
])
def test_compress_bad_input(kw, exc, msg):
    kw = {"sparsity": 0.5, **kw}
    with pytest.raises(exc, match=msg):
        compress(kw.pop("x"), kw.pop("sparsity"), **kw)


def test_from_tensors_round_trips_the_buffers():
    c = compress(cache(), 0.5, kind="key", bits=2)
    again = Compressed.from_tensors("key", 2, c.shape, c.tensors("kc_"), prefix="kc_")
    assert again.nbytes() == c.nbytes() and torch.equal(decompress(again), decompress(c))


@pytest.mark.parametrize("bits", [16, 2])
def test_from_tensors_makes_what_the_constructor_makes(bits):
    """``from_tensors`` fills the frozen dataclass's fields directly (it runs on every kernel
    call): the same object as the constructor's, every field, absent buffers None, the shape a
    tuple of ints, still frozen."""
    import dataclasses

    c = compress(cache(), 0.5, kind="value", bits=bits)
    made = Compressed.from_tensors("value", bits, torch.Size(c.shape), c.tensors("vc_"), prefix="vc_")
    assert made == Compressed("value", bits, tuple(c.shape), *[getattr(c, n) for n in Compressed.TENSORS])
    assert [f.name for f in dataclasses.fields(Compressed)][3:] == list(Compressed.TENSORS)
    assert not hasattr(Compressed, "__post_init__")
    assert type(made.shape) is tuple and all(type(s) is int for s in made.shape)
    assert (made.scale is None) == (bits == 16)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.bits = 2


@pytest.mark.parametrize("kind", ["key", "value"])
@pytest.mark.parametrize("bits", [16, 2])
def test_the_reference_decoder_written_from_the_spec_agrees_with_the_format_module(kind, bits):
    """references/mustafar.py decodes the buffers with its own code (it shares nothing with
    kernels/mustafar_format.py); on planted edge tiles and S_c = 192 (a multiple of 64, not 256)
    the two agree exactly."""
    from cases.mustafar import plant_edge_tiles
    from references.mustafar import decode_buffers

    g = torch.Generator().manual_seed(7)
    k = torch.randn(2, 2, 192, 128, generator=g).half()
    v = torch.randn(2, 2, 192, 128, generator=g).half()
    plant_edge_tiles(k, v)
    x = k if kind == "key" else v
    c = compress(x, 0.5, kind=kind, bits=bits)
    assert torch.equal(decode_buffers(kind, bits, c.shape, **c.tensors()), decompress(c).float())


@pytest.mark.parametrize("kind", ["key", "value"])
@pytest.mark.parametrize("bits", [16, 2])
def test_reference_compressor_writes_the_project_compressors_bytes(kind, bits):
    """docs/contract.md, "Compressed formats are interchange formats": the reference compressor
    (references/mustafar.py, written from the spec) and the project's write the same buffers,
    and the reference decoder reads them back to the pruned (and quantised) tensor."""
    from references.mustafar import decode_buffers, encode_buffers

    g = torch.Generator().manual_seed(26)
    x = torch.randn((2, 3, 192, 128), generator=g).half()
    x[:, :, :64, :4] = 0                     # tiles that keep nothing
    x[:, :, 64:128, 5] = 2.0                 # flat tiles
    for s in (0.0, 0.5, 0.9):
        ref = encode_buffers(x, s, kind, bits)
        ours = compress(x, s, kind=kind, bits=bits).tensors()
        assert ref.keys() == ours.keys()
        for name in ref:
            assert ref[name].dtype == ours[name].dtype and torch.equal(ref[name], ours[name]), (s, name)
        assert torch.equal(decode_buffers(kind, bits, x.shape, **ref),
                           compressed_reference(x, s, kind, bits).float())
