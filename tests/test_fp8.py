"""fp8 (e4m3fn) KV caches (kernels/_fp8.py, docs/fp8.md): the bit decode is exact for every
pattern, scales are validated before any launch, the lean call path sees a changed scale, and
the cases' caches hold e4m3's NaN encodings where no token is."""
import math

import pytest
import torch
import triton
import triton.language as tl

import kernels._checks
import kernels.paged_decode as PD
from cases import _paged
from kernels._fp8 import BITS, NATIVE, NOT_FP8, e4m3_to_f16, e4m3_to_f32, kernel_view, kv_read_mode
from references.paged import paged_decode_reference

FP8 = torch.float8_e4m3fn
ALL_BITS = torch.arange(256, dtype=torch.int32).to(torch.uint8)


@triton.jit
def _decode16(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, e4m3_to_f16(tl.load(X + offs)))


@triton.jit
def _decode32(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, e4m3_to_f32(tl.load(X + offs)))


@pytest.mark.parametrize("kernel, dtype", [(_decode16, torch.float16), (_decode32, torch.float32)])
def test_bit_decode_is_exact_for_every_pattern(kernel, dtype):
    out = torch.empty(256, dtype=dtype)
    kernel[(1,)](ALL_BITS, out, N=256)
    want = ALL_BITS.view(FP8).to(dtype)
    same = (out == want) | (out.isnan() & want.isnan())
    assert bool(same.all()), [(hex(i), float(out[i]), float(want[i])) for i in torch.nonzero(~same).flatten()]
    assert torch.signbit(out[0x80]) and float(out[0x7E]) == 448.0 and float(out[0x01]) == 2.0**-9
    assert out[0x7F].isnan() and out[0xFF].isnan()


def _inputs(dtype=FP8, P=4):
    g = torch.Generator().manual_seed(1)
    indptr, indices, last, n = _paged.page_table(g, (6, 3), P, "shuffled")
    cache = _paged.paged_cache(g, (6, 3), P, 2, 16, dtype, "HND", indptr, indices, n)
    q = torch.randn(2, 4, 16, generator=g).half()
    return q, cache, indptr, indices, last


def test_cases_fill_unused_slots_with_both_nan_encodings():
    _, cache, *_ = _inputs(P=16)
    raw = cache.view(torch.uint8)
    nan = (raw & 0x7F) == 0x7F
    assert {int(b) for b in raw[nan].unique()} == {0x7F, 0xFF}
    assert not cache.float()[~nan].isnan().any()
    assert nan.any(-1).any() and (~nan).any()


@pytest.mark.parametrize("name, value, error, words", [
    ("k_scale", math.inf, ValueError, "finite"),
    ("v_scale", math.nan, ValueError, "finite"),
    ("k_scale", 1e39, ValueError, "overflows float32"),
    ("v_scale", torch.ones(2), ValueError, "single per-tensor scale"),
    ("k_scale", torch.ones(1, dtype=torch.float16), TypeError, "float32"),
    ("v_scale", "2", TypeError, "float"),
    ("k_scale", torch.tensor([math.inf]), ValueError, "finite"),
])
def test_bad_scales_raise_naming_the_argument_before_any_launch(monkeypatch, name, value, error, words):
    def refuse(plan):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr(kernels._checks, "launch", refuse)
    monkeypatch.setattr(PD, "launch", refuse)
    q, cache, indptr, indices, last = _inputs()
    with pytest.raises(error, match=name) as info:
        PD.paged_decode(q, cache, indptr, indices, last, **{name: value})
    assert words in str(info.value)


def test_scales_with_a_16_bit_cache_are_refused(monkeypatch):
    monkeypatch.setattr(PD, "launch", lambda plan: (_ for _ in ()).throw(AssertionError("launched")))
    q, cache, indptr, indices, last = _inputs(torch.float16)
    with pytest.raises(ValueError, match="float8_e4m3fn cache only"):
        PD.paged_decode(q, cache, indptr, indices, last, k_scale=0.5)


def test_fp8_cache_of_the_wrong_dtype_is_named():
    q, cache, indptr, indices, last = _inputs()
    with pytest.raises(TypeError, match="kv_cache"):
        PD.paged_decode(q, cache.view(torch.float8_e5m2), indptr, indices, last)


def test_read_mode_and_kernel_view():
    _, cache, *_ = _inputs()
    assert kv_read_mode(cache, native_ok=False) == BITS and kv_read_mode(cache, native_ok=True) == NATIVE
    assert kv_read_mode(cache.float().half(), native_ok=True) == NOT_FP8
    assert PD.fp8_mode(cache) == BITS  # host tensors: never Triton's own fp8 cast
    view = kernel_view(cache, BITS)
    assert view.dtype == torch.uint8 and view.data_ptr() == cache.data_ptr()


def test_scales_are_applied_and_a_changed_scale_is_seen_on_the_lean_path():
    q, cache, indptr, indices, last = _inputs()
    for ks, vs in ((1.0, 1.0), (1 / 64, 8.0), (1 / 64, 8.0), (0.37, torch.tensor([3.3]))):
        o, lse = PD.paged_decode(q, cache, indptr, indices, last, return_lse=True, k_scale=ks, v_scale=vs)
        ro, rl = paged_decode_reference(q, cache, indptr, indices, last, k_scale=ks,
                                        v_scale=float(vs))
        assert torch.allclose(o.double(), ro, atol=2e-3 * max(1.0, float(ro.abs().max())), rtol=0)
        assert torch.allclose(lse.double(), rl, atol=1e-4, rtol=0)
