"""The benchmark timer: statistics, throughput arithmetic, the per-device lock, and (on a GPU)
the timer checked against a known quantity: a device-to-device copy timed by torch's own events."""
import multiprocessing
import time

import pytest
import torch

from attnsuite.bench.run import throughput
from attnsuite.bench.session import flatten
from attnsuite.bench.timing import device_lock, measure, summarize
from attnsuite.devices import open_device


def test_median_and_iqr():
    t = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (t.median_ms, t.q1_ms, t.q3_ms, t.iqr_ms, t.min_ms, t.runs) == (3.0, 2.0, 4.0, 2.0, 1.0, 5)
    assert summarize([7.0]).iqr_ms == 0.0
    with pytest.raises(ValueError):
        summarize([])


def test_throughput_and_fraction_of_copy_bandwidth():
    out = throughput({"flops": 2e12, "bytes": 3e9}, kernel_ms=2.0, copy_gbps=3000.0)
    assert out["tflops"] == pytest.approx(1000.0) and out["gbps"] == pytest.approx(1500.0)
    assert out["copy_fraction"] == pytest.approx(0.5)
    assert throughput({}, 1.0, None)["tflops"] is None


def test_flatten_for_extra_info():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": None}) == {"a.b": 1, "a.c.d": 2, "e": None}


class _FakeDevice:
    kind, index = "fake", 0


def _hold(seconds, started):
    with device_lock(_FakeDevice()):
        started.set()
        time.sleep(seconds)


def test_device_lock_serializes_processes():
    ctx = multiprocessing.get_context("fork")
    started = ctx.Event()
    p = ctx.Process(target=_hold, args=(1.0, started))
    p.start()
    started.wait(10)
    t0 = time.perf_counter()
    with device_lock(_FakeDevice()):
        waited = time.perf_counter() - t0
    p.join()
    assert waited > 0.5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU machine)")
def test_timer_matches_torch_events_on_a_device_copy():
    device = open_device("cuda", None)
    src = torch.ones(2**28, dtype=torch.float16, device="cuda")  # 512 MB
    dst = torch.empty_like(src)
    ours = measure(device, lambda: dst.copy_(src), warmup=3, runs=20).median_ms
    samples = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst.copy_(src)
        b.record()
        torch.cuda.synchronize()
        samples.append(a.elapsed_time(b))
    theirs = sorted(samples)[len(samples) // 2]
    assert abs(ours - theirs) / theirs < 0.05, (ours, theirs)
