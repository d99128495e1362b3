"""cases/_attention.randn: large tensors are drawn in fixed chunks on several threads. The values
must be a function of the generator alone (not of the thread count), look standard normal, and
leave the generator in a state that depends only on what was drawn."""
from __future__ import annotations

import torch

import cases._attention as attention


def _small_chunks(monkeypatch, threads: int) -> None:
    monkeypatch.setattr(attention, "CHUNKED_FROM", 1000)
    monkeypatch.setattr(attention, "CHUNK", 256)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)


def _draw(seed: int, shape, dtype=torch.float16):
    gen = torch.Generator().manual_seed(seed)
    x = attention.randn(gen, shape, dtype)
    return x, torch.randint(0, 2**31, (4,), generator=gen)


def test_chunked_values_do_not_depend_on_threads(monkeypatch):
    _small_chunks(monkeypatch, 1)
    one, after_one = _draw(7, (3, 5, 211))
    _small_chunks(monkeypatch, 6)
    six, after_six = _draw(7, (3, 5, 211))
    assert torch.equal(one.view(torch.int16), six.view(torch.int16))
    assert torch.equal(after_one, after_six)
    assert one.shape == (3, 5, 211) and one.dtype == torch.float16 and one.is_contiguous()


def test_chunked_values_look_standard_normal(monkeypatch):
    _small_chunks(monkeypatch, 4)
    x, _ = _draw(11, (200_000,), torch.float32)
    assert abs(float(x.mean())) < 0.01 and abs(float(x.std()) - 1) < 0.01
    # No chunk repeats another (each has its own seed), and the tail chunk is filled.
    chunks = x[: 256 * 10].view(10, 256)
    assert len({tuple(c[:8].tolist()) for c in chunks}) == 10
    assert torch.isfinite(x).all() and float(x[-100:].abs().sum()) > 0


def test_seeds_give_different_values_and_small_tensors_keep_the_plain_draw(monkeypatch):
    _small_chunks(monkeypatch, 2)
    a, _ = _draw(1, (4000,))
    b, _ = _draw(2, (4000,))
    assert not torch.equal(a, b)
    small, _ = _draw(3, (10, 99), torch.float32)  # below CHUNKED_FROM: torch.randn as before
    assert torch.equal(small, torch.randn((10, 99), generator=torch.Generator().manual_seed(3)))


class _Device:
    torch_device = torch.device("cpu")

    def place(self, t):
        return t


def test_inputs_on_passes_the_device_only_to_families_that_take_it():
    from attnsuite.family import inputs_on
    from attnsuite.case import Case

    seen = {}

    class Plain:
        def make_inputs(self, case, gen):
            return {"x": torch.randn(3, generator=gen)}

    class Aware:
        def make_inputs(self, case, gen, device=None):
            seen["device"] = device
            return {"x": torch.randn(3, generator=gen, device=device)}

    case = Case("toy", "a", {})
    plain, aware = inputs_on(Plain(), case, _Device()), inputs_on(Aware(), case, _Device())
    assert seen["device"] == torch.device("cpu")
    assert torch.equal(plain["x"], aware["x"])  # the case's generator, either way


def test_large_paged_caches_share_values_by_geometry(monkeypatch):
    """Above SHARED_FROM a cache's values depend on its shape and dtype only: two cases of one
    geometry get equal values (NaN where each one's own sequences leave slots unused), each in
    its own tensor, and another dtype or shape gets other values."""
    import cases._paged as paged

    monkeypatch.setattr(paged, "SHARED_FROM", 1000)
    monkeypatch.setattr(paged, "_SHARED", {})

    def cache(seed, lengths, dtype=torch.float16, pages=6):
        gen = torch.Generator().manual_seed(seed)
        indptr, indices, _, num_pages = paged.page_table(gen, lengths, 16, "scattered", pages)
        return paged.paged_cache(gen, lengths, 16, 2, 32, dtype, "HND", indptr, indices, num_pages)

    a, b = cache(1, [40, 7]), cache(2, [20])
    assert a.data_ptr() != b.data_ptr()
    both = ~torch.isnan(a) & ~torch.isnan(b)
    assert both.any() and torch.equal(a[both], b[both])
    assert torch.isnan(a).sum() != torch.isnan(b).sum()  # each case's own unused slots
    c = cache(1, [40, 7], torch.bfloat16)
    assert not torch.equal(c[~torch.isnan(c)].float(), a[~torch.isnan(a)].float())

    def small(seed):  # 256 elements, below the threshold: drawn from the case's generator
        return paged.paged_cache(torch.Generator().manual_seed(seed), [16], 16, 1, 8, torch.float16, "HND",
                                 torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0], dtype=torch.int32), 1)
    assert not torch.equal(small(1), small(2)) and torch.equal(small(1), small(1))
