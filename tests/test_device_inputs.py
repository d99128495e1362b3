"""Bulk inputs drawn on the run's device (cases/_attention.randn, cases/_paged.shared_values):
every family that takes ``device`` puts its bulk tensors there and builds the rest of its inputs
around them without mixing devices; the small tensors, and the case generator's state, do not
depend on the device.

On CPU the "device" is ``meta``: its tensors have shapes and no values, and torch refuses an op
that mixes them with host tensors just as it refuses CPU and CUDA ones, so a helper that makes a
host buffer for a device tensor fails here. The tests marked ``cuda`` compare values on a GPU."""
from __future__ import annotations

import importlib
import inspect
import math

import pytest
import torch

import cases._attention as attention
import cases._paged as paged
from attnsuite.case import select
from attnsuite.scheduling import SIZES
from cases import FAMILIES

META = torch.device("meta")
#: What torch says when an op mixes devices (a host buffer for a device tensor included).
MIXED = ("is not on the expected device", "Expected all tensors to be on the same device",
         "Cannot copy out of meta tensor")


def _shapes_only(seed, shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


def _families_taking_device():
    for name in FAMILIES:
        family = importlib.import_module(f"cases.{name}").FAMILY
        if "device" in inspect.signature(family.make_inputs).parameters:
            yield name, family


def _one_case_per_input_class(family):
    """The full profile's cases with a bulk draw, one per combination of non-size parameters
    (value distribution, view, layout, placement, pattern, ...): what selects the helpers."""
    chosen = {}
    for case in select(family.cases, "full"):
        if family.skip_reason(case):
            continue
        key = tuple(sorted((k, str(v)) for k, v in case.params.items() if k not in SIZES and k != "dtype"))
        chosen.setdefault(key, case)
    return list(chosen.values())


@pytest.mark.parametrize("name,family", list(_families_taking_device()), ids=lambda x: x if isinstance(x, str) else "")
def test_bulk_tensors_go_to_the_device_and_nothing_mixes_devices(name, family, monkeypatch):
    monkeypatch.setattr(attention, "device_randn", _shapes_only)
    monkeypatch.setattr(paged, "device_randn", _shapes_only)
    on_device = needs_values = 0
    for case in _one_case_per_input_class(family):
        try:
            inputs = family.make_inputs(case, case.generator(), device=META)
        except (RuntimeError, NotImplementedError) as exc:
            if any(m in str(exc) for m in MIXED):
                pytest.fail(f"{case.id}: the inputs mix the device and the host: {exc}")
            needs_values += 1  # an op that reads values (nonzero, item): legal on a real device
            continue
        devices = {t.device.type for t in inputs.values() if isinstance(t, torch.Tensor)}
        assert devices <= {"cpu", "meta"}, (case.id, devices)
        on_device += "meta" in devices
    # Mustafar compresses its keys and values on the device (value-dependent): checked on CUDA.
    assert on_device or needs_values, f"{name}: no full-profile case drew a bulk tensor on the device"


def test_a_bulk_draw_takes_the_same_draws_from_the_generator_on_any_device(monkeypatch):
    monkeypatch.setattr(attention, "device_randn", _shapes_only)
    n = attention.CHUNKED_FROM
    host, dev = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    a = attention.randn(host, (n,), torch.float16)
    b = attention.randn(dev, (n,), torch.float16, META)
    assert a.device.type == "cpu" and b.device == META and b.shape == a.shape and b.dtype == a.dtype
    # What the case draws next (its small tensors) is the same either way.
    assert torch.equal(attention.randn(host, (7, 3), torch.float32), attention.randn(dev, (7, 3), torch.float32, META))


def test_small_tensors_stay_on_the_host_with_the_host_values():
    small = attention.randn(torch.Generator().manual_seed(9), (4, 5), torch.bfloat16, META)
    assert small.device.type == "cpu"
    assert torch.equal(small, attention.randn(torch.Generator().manual_seed(9), (4, 5), torch.bfloat16))


def test_device_randn_is_a_seeded_standard_normal_in_the_dtype():
    x = attention.device_randn(3, (64, 1024), torch.float16, "cpu")
    assert x.shape == (64, 1024) and x.dtype == torch.float16 and x.is_contiguous()
    assert torch.equal(x, attention.device_randn(3, (64, 1024), torch.float16, "cpu"))
    assert not torch.equal(x, attention.device_randn(4, (64, 1024), torch.float16, "cpu"))
    assert abs(float(x.float().mean())) < 0.02 and abs(float(x.float().std()) - 1) < 0.02


def test_a_device_without_a_generator_of_its_own_gets_the_host_draw():
    # torch has no generator for meta tensors: the host's values are drawn and copied there.
    assert attention.device_randn(1, (4,), torch.float16, META) is None
    n = attention.CHUNKED_FROM
    moved = attention.randn(torch.Generator().manual_seed(2), (n,), torch.float16, META)
    assert moved.device == META and moved.shape == (n,) and moved.dtype == torch.float16


@pytest.mark.parametrize("device", [None, torch.device("cpu")])
def test_a_shared_host_cache_is_handed_out_as_a_copy(device, monkeypatch):
    monkeypatch.setattr(paged, "_SHARED", {})
    first = paged.shared_values((3, 5), torch.float16, device)
    first.fill_(float("nan"))  # what paged_cache does to the slots no sequence owns
    second = paged.shared_values((3, 5), torch.float16, device)
    assert not torch.isnan(second).any() and second.device.type == "cpu"


def test_device_caches_are_not_kept_between_cases(monkeypatch):
    monkeypatch.setattr(paged, "device_randn", _shapes_only)
    monkeypatch.setattr(paged, "_SHARED", {})
    cache = paged.shared_values((2, 3), torch.float16, META)
    assert cache.device == META and paged._SHARED == {}


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("case_id", [
    "sparse_paged_decode[fp16-HND-P256-scattered-L68927_89366_81975-Hq32-Hkv8-D256-keep0.02-shuffled]",
    "block_sparse[bf16-B1-H16-S10000-D128-blk128x512-s0.5-lse]",
    "mustafar[values-2bit-s0.7-B1-Hq32-Hkv8-S32768-D128]",
])
def test_on_cuda_the_device_inputs_match_the_host_ones_but_for_the_bulk_values(case_id):
    """Bulk tensors on the device with the host build's shape, dtype, strides and NaN slots; what
    stays on the host bit for bit the host build's; a second build the same values."""
    from attnsuite import registry

    family = registry.family(case_id.split("[", 1)[0])
    case = next(c for c in family.cases if c.id == case_id)
    host = family.make_inputs(case, case.generator())
    dev = family.make_inputs(case, case.generator(), device=torch.device("cuda"))
    again = family.make_inputs(case, case.generator(), device=torch.device("cuda"))
    assert host.keys() == dev.keys()
    assert any(math.prod(t.shape) >= attention.CHUNKED_FROM for t in host.values())
    for name, h in host.items():
        d = dev[name]
        assert d.dtype == h.dtype and _same(d, again[name]), name
        if math.prod(h.shape) >= attention.CHUNKED_FROM:
            assert d.is_cuda and (d.shape, d.stride()) == (h.shape, h.stride()), name
            assert torch.equal(_nans(d).cpu(), _nans(h)), name
        elif not d.is_cuda:
            assert _same(d, h), name
        # else computed on the device from bulk values (mustafar's compressed buffers, whose
        # sizes follow the values): compared above only with a second build


def _nans(t):
    return torch.isnan(t) if t.is_floating_point() else torch.zeros_like(t, dtype=torch.bool)


def _same(a, b) -> bool:
    """Bit for bit, NaN in the same places counting as equal."""
    return torch.equal(_nans(a), _nans(b)) and torch.equal(a.nan_to_num(0) if a.is_floating_point() else a,
                                                           b.nan_to_num(0) if b.is_floating_point() else b)
