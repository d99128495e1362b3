"""The inputs of fuzz draws of every family (1,800 in all: 200 a family; ATTNSUITE_DEVICE_DRAWS
sets another count), built on a device other than the host (``meta``) under CUDA's rules for
mixing devices (tests/strict_devices.py): a helper that combines a bulk tensor drawn on the
device with a small one drawn on the host fails here, on a CPU, not only in a GPU fuzz run.

Which tensors a build puts on the device depends on their size alone (cases/_attention.py,
CHUNKED_FROM; cases/_paged.py, SHARED_FROM). Fuzz draws are smaller than device-sized cases, so
each draw is built with the bulk threshold lowered to one of THRESHOLDS (by its index): the same
helpers meet the same splits of small host tensors and bulk device tensors that larger inputs of
the same class meet on a GPU. Values are never drawn (a meta tensor has none), which keeps a
build in milliseconds; a build that reaches an op reading values (nonzero, item: legal on a real
device) stops there."""
from __future__ import annotations

import inspect
import os
import random

import pytest
import torch

import cases._attention as attention
import cases._paged as paged
from attnsuite import registry
from attnsuite.fuzz import fuzz_cases
from tests.strict_devices import MixedDevices, NeedsValues, StrictDevices

META = torch.device("meta")
FUZZED = [name for name in registry.names() if registry.family(name).fuzz(random.Random(0)) is not None]
#: The fuzzed families that draw their bulk tensors on the run's device (``make_inputs`` takes
#: ``device``); the others draw everything on the host and the harness copies it over whole.
ON_DEVICE = [name for name in FUZZED if "device" in inspect.signature(registry.family(name).make_inputs).parameters]
#: Draws per family (ATTNSUITE_DEVICE_DRAWS sets another count), and the fuzz seed they come
#: from. A build costs 3-8 ms of CPU on meta, most of it torch's meta kernels (Python
#: decompositions of each elementwise op) and the host-side page tables and token selections.
DRAWS = int(os.environ.get("ATTNSUITE_DEVICE_DRAWS", "200"))
SEED = 20261128
#: Bulk thresholds in elements, taken in turn by the draws: every tensor drawn on the device; all
#: but the smallest (a decode query, scale factors); only the larger ones; only the largest
#: (caches, K/V). Not the real one: a fuzz draw's tensors lie below it, and drawing them on the
#: host costs more than the rest of the build.
THRESHOLDS = (1, 1 << 11, 1 << 14, 1 << 16)


def _shapes_only(seed, shape, dtype, device):
    return torch.empty(shape, dtype=dtype, device=device)


def build_on_meta(family, case, threshold: int, monkeypatch) -> dict:
    monkeypatch.setattr(attention, "CHUNKED_FROM", threshold)
    monkeypatch.setattr(paged, "SHARED_FROM", max(threshold, 1 << 16))
    with StrictDevices():
        return family.make_inputs(case, case.generator(), device=META)


@pytest.fixture(autouse=True)
def _no_device_values(monkeypatch):
    monkeypatch.setattr(attention, "device_randn", _shapes_only)
    monkeypatch.setattr(paged, "device_randn", _shapes_only)
    monkeypatch.setattr(paged, "_SHARED", {})


def test_families_that_draw_on_the_host_have_their_inputs_placed_whole():
    from attnsuite.family import inputs_on

    class Meta:
        torch_device = META

        @staticmethod
        def place(t):
            return t.to(META) if isinstance(t, torch.Tensor) else t

    for name in sorted(set(FUZZED) - set(ON_DEVICE)):
        family = registry.family(name)
        case = fuzz_cases(family, SEED, 1)[0]
        placed = inputs_on(family, case, Meta())
        assert all(t.device == META for t in placed.values() if isinstance(t, torch.Tensor)), name


@pytest.mark.parametrize("name", ON_DEVICE)
def test_fuzz_draws_build_on_a_device_without_mixing_it_with_the_host(name, monkeypatch):
    family = registry.family(name)
    mixed, built, on_device, stopped = [], 0, 0, 0
    for i, case in enumerate(fuzz_cases(family, SEED, DRAWS)):
        threshold = THRESHOLDS[i % len(THRESHOLDS)]
        try:
            inputs = build_on_meta(family, case, threshold, monkeypatch)
        except MixedDevices as exc:
            mixed.append(f"{case.id} (bulk from {threshold} elements): {exc}")
            continue
        except NeedsValues:
            stopped += 1
            continue
        except NotImplementedError as exc:  # a meta kernel that needs values (indexing by a mask)
            if "meta" not in str(exc):
                raise
            stopped += 1
            continue
        built += 1
        on_device += any(isinstance(t, torch.Tensor) and t.device == META for t in inputs.values())
    assert not mixed, f"{len(mixed)} draws mix the device and the host:\n" + "\n".join(mixed[:10])
    # The test has teeth only where the draws put tensors on the device.
    assert on_device >= DRAWS // 4 or stopped >= DRAWS // 2, (built, on_device, stopped)


def test_the_check_refuses_what_cuda_refuses_and_allows_what_it_allows():
    dev = torch.zeros(4, 3, device=META)
    idx = torch.tensor([0, 2])
    with StrictDevices():
        dev[idx] = torch.zeros(2, 3, device=META)    # host indices: CUDA moves them
        dev[idx, 0] = torch.tensor(1.0)              # a host scalar value
        dev.copy_(torch.ones(4, 3))                  # a copy onto the device
        (dev * torch.tensor(2.0)).add_(1)            # a host scalar operand
        for bad in (lambda: dev.__setitem__(idx, torch.zeros(2, 3)),   # host values into a device tensor
                    lambda: dev.masked_fill_(torch.ones(4, 3, dtype=torch.bool), 0),
                    lambda: torch.where(torch.ones(4, 3, dtype=torch.bool), dev, dev),
                    lambda: torch.zeros(4, 3).copy_(dev),
                    lambda: torch.cat([dev, torch.zeros(1, 3)])):
            with pytest.raises(MixedDevices):
                bad()
        with pytest.raises(NeedsValues):
            dev.nonzero()
