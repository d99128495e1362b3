"""The benchmark timer: statistics, throughput arithmetic, the per-device lock, host time against
a Python call of known cost, the graph-replay method and its profiler fallback against fake
devices whose durations are known (on cpu), and on a GPU the real methods against a copy of
known size and a call whose host time would otherwise leak into its device time."""
import json
import multiprocessing
import statistics
import time
from contextlib import contextmanager, nullcontext

import pytest
import torch

from attnsuite.bench import graph_time as gt
from attnsuite.bench import profiler_time as pt
from attnsuite.bench.compare import compare, load, main as compare_main
from attnsuite.bench.host_time import host_time
from attnsuite.bench.run import repeat_record, throughput, unchecked
from attnsuite.bench.session import flatten, headline
from attnsuite.bench.timing import (CaptureFailed, device_lock, device_time, summarize, time_call)
from attnsuite.devices import open_device

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU machine)")


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


# --- host time ------------------------------------------------------------------------------

def _busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def test_host_time_of_a_python_call_of_known_cost():
    h = host_time(lambda: _busy(300), runs=40)
    assert h["runs"] == 40 and h["q1"] <= h["median"] <= h["q3"]
    # The call cannot take less than its busy wait; a loaded machine may stretch it a little.
    assert 300 <= h["median"] < 600, h


def test_host_time_times_only_the_call_not_the_sync():
    ticks = iter(range(0, 10**6, 5))  # every clock read advances 5 "seconds"
    calls = []
    h = host_time(lambda: calls.append(1), sync=lambda: [next(ticks) for _ in range(7)], runs=3,
                  warmup=0, clock=lambda: next(ticks))
    assert calls == [1, 1, 1] and h["median"] == pytest.approx(5e6)


# --- device time by graph replay, against a fake device of known durations --------------------

class _Clock:
    now = 0.0


class _Event:
    def __init__(self, clock):
        self.clock, self.t = clock, None

    def record(self):
        self.t = self.clock.now

    def elapsed_time(self, other):
        return other.t - self.t


class _Graph:
    def __init__(self, clock, ms):
        self.clock, self.ms = clock, ms

    def replay(self):
        self.clock.now += self.ms


class FakeGraphs:
    """A device where a replayed graph lasts LAUNCH + its flushes + its calls (ms)."""
    method = "cudagraph"
    LAUNCH = 0.004

    def __init__(self, call_ms, flush_ms=0.09, fail=None):
        self.call_ms, self.flush_ms, self.fail = call_ms, flush_ms, fail
        self.clock, self.counts = _Clock(), {"flush": 0, "call": 0}
        self.captured = []

    def flush(self):
        self.counts["flush"] += 1

    def call(self):
        self.counts["call"] += 1

    def synchronize(self):
        pass

    def event(self):
        return _Event(self.clock)

    def side_stream(self):
        return nullcontext()

    @contextmanager
    def strict_syncs(self):
        if self.fail == "sync":
            raise RuntimeError("called a synchronizing CUDA operation")
        yield

    def capture(self, body):
        if self.fail == "capture":
            raise RuntimeError("Cannot copy between CPU and CUDA tensors during CUDA graph capture\nmore")
        self.counts.update(flush=0, call=0)
        body()
        self.captured.append(dict(self.counts))
        return _Graph(self.clock, self.LAUNCH + self.counts["flush"] * self.flush_ms
                      + self.counts["call"] * self.call_ms)


class FakeDevice:
    kind, index = "fake", 0

    def synchronize(self):
        pass


def test_cold_graph_time_is_the_call_alone_launch_and_flush_cancel():
    dev = FakeGraphs(call_ms=0.010)
    r = gt.graph_time(FakeDevice(), dev.call, flush=dev.flush, runs=7, backend=dev)
    assert r.method == "cudagraph" and r.l2 == "cold" and r.timing.runs == 7
    assert r.timing.median_ms == pytest.approx(0.010, rel=1e-9)
    # k rounds of (flush, call) and k flushes alone, k chosen for ~TARGET_MS per replay
    k = gt.calls_per_replay(0.010, 0.09)
    assert k == 16 and {"flush": k, "call": k} in dev.captured and {"flush": k, "call": 0} in dev.captured
    # what a flush-then-one-replay timer would have reported: the launch cost on top
    assert r.timing.median_ms < 0.010 + FakeGraphs.LAUNCH / 2


def test_warm_graph_time_amortizes_the_launch_over_k_calls():
    dev = FakeGraphs(call_ms=0.5)
    r = gt.graph_time(FakeDevice(), dev.call, flush=None, runs=5, backend=dev)
    assert r.l2 == "warm"
    k = gt.calls_per_replay(0.5 + FakeGraphs.LAUNCH, 0.0)  # estimated from one replayed call
    assert k == 3 and r.timing.median_ms == pytest.approx(0.5 + FakeGraphs.LAUNCH / k)


def test_a_long_call_is_replayed_once_per_sample():
    assert gt.calls_per_replay(50.0, 0.09) == 1
    assert gt.calls_per_replay(0.0, 0.0) == gt.MAX_CALLS


@pytest.mark.parametrize("fail", ["sync", "capture"])
def test_uncapturable_calls_raise_capture_failed_with_one_line(fail):
    dev = FakeGraphs(call_ms=0.01, fail=fail)
    with pytest.raises(CaptureFailed) as info:
        gt.graph_time(FakeDevice(), dev.call, flush=dev.flush, runs=3, backend=dev)
    assert "\n" not in str(info.value)
    assert ("synchronizes" in str(info.value)) == (fail == "sync")


def _fake_activities(log):
    """Profiler stand-in: the device activities of what ran, 90 us per flush, 4 + 6 us per call."""
    def activities(fn, sync):
        log.clear()
        fn()
        out, t = [], 0.0
        for kind in log:
            for d in ((90.0,) if kind == "flush" else (4.0, 6.0)):
                out.append((t, d))
                t += d
        return out
    return activities


def test_capture_failure_falls_back_to_the_profiler_and_says_so(monkeypatch):
    dev = FakeGraphs(call_ms=0.01, fail="capture")
    monkeypatch.setattr(gt, "backend_for", lambda device: dev)
    log = []
    monkeypatch.setattr(pt, "device_activities", _fake_activities(log))
    r = device_time(FakeDevice(), lambda: log.append("call"), flush=lambda: log.append("flush"), runs=5)
    assert r.method == "profiler" and r.l2 == "cold"
    assert r.timing.median_ms == pytest.approx(0.010) and r.timing.runs == 5
    assert "not capturable" in r.note and "Cannot copy between CPU and CUDA" in r.note
    with pytest.raises(CaptureFailed):  # asked for graphs only: no silent fallback
        device_time(FakeDevice(), lambda: None, method="cudagraph", flush=lambda: None)


def test_profiler_splits_runs_by_position_not_by_kernel_name():
    acts = [(i, d) for i, d in enumerate([90, 4, 6, 90, 5, 6, 90, 4, 7])]
    assert pt.per_call_us(acts, runs=3, flush_count=1) == [10, 11, 11]
    assert pt.per_call_us(acts[:-1], runs=3, flush_count=1) is None


def test_a_benchmark_line_has_the_contract_fields(monkeypatch):
    dev = FakeGraphs(call_ms=0.02)
    monkeypatch.setattr(gt, "backend_for", lambda device: dev)
    line = time_call(FakeDevice(), dev.call, flush=dev.flush, runs=5)
    assert set(line) == {"device", "method", "host_us", "latency_ms", "l2", "note"}
    assert set(line["device"]) == {"median_ms", "q1_ms", "q3_ms", "iqr_ms", "min_ms", "runs"}
    assert set(line["host_us"]) == {"median", "q1", "q3", "runs"}
    assert line["latency_ms"] == pytest.approx(line["device"]["median_ms"] + line["host_us"]["median"] * 1e-3)
    payload = {"kernel": {**line, "compile_s": 1.0}}
    assert headline(payload)["device_median_ms"] == pytest.approx(0.02)


# --- reproducibility ----------------------------------------------------------------------------

def test_repeat_flags_a_spread_over_ten_percent():
    assert repeat_record([1.0, 1.05]) == {"device_median_ms": [1.0, 1.05], "spread": pytest.approx(0.05),
                                          "flagged": False}
    assert repeat_record([1.0, 1.2])["flagged"] is True
    assert repeat_record([1.2, 1.0])["spread"] == pytest.approx(0.2)


def _bench_record(case_id, kernel_ms, cudnn_ms):
    from attnsuite.records import SCHEMA

    line = lambda ms: {"device": {"median_ms": ms}, "method": "cudagraph"}  # noqa: E731
    return {"schema": SCHEMA, "case_id": case_id, "family": "decode", "impl": "triton", "device": "cuda",
            "outcome": "pass", "mode": "bench",
            "bench": {"kernel": line(kernel_ms), "baselines": {"sdpa_cudnn": line(cudnn_ms),
                                                               "reference": {"unavailable": "x"}}}}


def test_compare_two_stored_runs(tmp_path, capsys):
    for run, recs in (("a", [_bench_record("c1", 1.0, 2.0), _bench_record("c2", 1.0, 1.0)]),
                      ("b", [_bench_record("c1", 1.05, 2.0), _bench_record("c2", 1.5, 1.0)])):
        (tmp_path / run).mkdir()
        (tmp_path / run / "gw0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    rc = compare_main([str(tmp_path / "a"), str(tmp_path / "b")])
    out = capsys.readouterr().out
    assert rc == 1 and "FLAG" in out and "4 lines compared, 1 with" in out
    flagged = [r for r in compare(load(str(tmp_path / "a")), load(str(tmp_path / "b"))) if r["flagged"]]
    assert [(r["case"].split("@")[0], r["line"]) for r in flagged] == [("decode[c2]", "kernel")]


def test_compare_reads_pytest_benchmark_json(tmp_path, capsys):
    def bench_json(ms):
        return {"benchmarks": [{"fullname": "benchmarks/test_bench.py::test_bench[x]",
                                "extra_info": {"device_median_ms": ms, "device_method": "cudagraph",
                                               "baselines.sdpa_cudnn.device.median_ms": 1.0}}]}
    (tmp_path / "a.json").write_text(json.dumps(bench_json(1.0)))
    (tmp_path / "b.json").write_text(json.dumps(bench_json(1.02)))
    assert compare_main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "2 lines compared, 0 with" in capsys.readouterr().out


def test_unchecked_turns_off_index_checks_also_on_an_object_of_methods():
    from dataclasses import dataclass

    def keys(q, check_indices=True):
        return check_indices

    @dataclass(frozen=True)
    class Ops:
        keys: object
        compress: object

    ops = unchecked(Ops(keys=keys, compress=lambda x: x))
    assert ops.keys(1) is False and ops.compress(3) == 3
    assert unchecked(keys)(1) is False
    plain = lambda q: q  # noqa: E731
    assert unchecked(plain) is plain


# --- the per-device lock ------------------------------------------------------------------------

class _LockDevice:
    kind, index = "fake", 0


def _hold(seconds, started):
    with device_lock(_LockDevice()):
        started.set()
        time.sleep(seconds)


def test_device_lock_serializes_processes():
    ctx = multiprocessing.get_context("fork")
    started = ctx.Event()
    p = ctx.Process(target=_hold, args=(1.0, started))
    p.start()
    started.wait(10)
    t0 = time.perf_counter()
    with device_lock(_LockDevice()):
        waited = time.perf_counter() - t0
    p.join()
    assert waited > 0.5


# --- on a GPU: the real methods against known quantities ------------------------------------------

def _ms_back_to_back(call, n=10):
    """Events around n back-to-back calls of a 1 GiB kernel: each lasts ~0.3 ms or more, so the
    host enqueues far ahead and nothing but the kernels is inside the events."""
    call()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        call()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n


def _ms_each_after_a_flush(call, flush, n=10):
    """Events around each call, the L2 flushed before it: the flush keeps the device busy while
    the host enqueues the events and the call, so no host time is inside."""
    call()
    pairs = []
    for _ in range(n):
        flush()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        call()
        b.record()
        pairs.append((a, b))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)


@CUDA
@pytest.mark.parametrize("method", ["cudagraph", "profiler"])
def test_device_time_of_a_copy_of_known_size(method):
    """Warm: the same as back-to-back calls. Cold: the same as each call timed alone after a
    flush. The "copy" is an elementwise kernel (x * 1 into another buffer), not ``copy_``: a
    device-to-device ``copy_`` is a memcpy, which a captured graph runs as a memcpy node, and on
    an H100 that node moved 1 GiB in 0.88 ms where the eager memcpy took 0.715 ms, warm or cold;
    a kernel is the same kernel in both."""
    device = open_device("cuda", None)
    src = torch.ones(2**29, dtype=torch.float16, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    call = lambda: torch.mul(src, 1, out=dst)  # noqa: E731
    warm = device_time(device, call, method=method, l2="warm", runs=10)
    cold = device_time(device, call, method=method, runs=10)
    assert warm.method == cold.method == method
    for got, expected in ((warm, _ms_back_to_back(call)),
                          (cold, _ms_each_after_a_flush(call, device.l2_flusher()))):
        assert abs(got.timing.median_ms - expected) / expected < 0.05, (got, expected)


@CUDA
def test_host_time_never_lands_in_graph_device_time():
    """A call with 2 ms of host work before a tiny kernel: the eager event timer reports the
    host's 2 ms; graph replay reports the kernel."""
    device = open_device("cuda", None)
    x = torch.zeros(1024, device="cuda")

    def call():
        _busy(2000)
        x.add_(1)

    call()
    graph = device_time(device, call, runs=5)
    events = device_time(device, call, method="events", runs=5)
    assert graph.method == "cudagraph" and graph.timing.median_ms < 0.1, graph
    assert events.timing.median_ms > 1.5, events


@CUDA
def test_a_call_that_syncs_falls_back_to_the_profiler_on_the_gpu():
    device = open_device("cuda", None)
    x = torch.zeros(2**20, device="cuda")
    call = lambda: x.add_(1).sum().item()  # noqa: E731
    call()
    r = device_time(device, call, runs=5)
    assert r.method == "profiler" and "not capturable" in r.note
    assert 0 < r.timing.median_ms < 1.0
    torch.randn(4, device="cuda")  # the failed check left the RNG usable


def test_show_prints_every_line_with_its_method_and_the_config_source():
    from attnsuite.bench.show import render

    line = {"device": {"median_ms": 0.0103, "iqr_ms": 0.0002}, "method": "cudagraph", "l2": "cold",
            "host_us": {"median": 21.5}, "latency_ms": 0.0318, "note": None}
    rec = {"family": "decode", "case_id": "x", "impl": "triton", "device": "cuda",
           "bench": {"kernel": {**line, "compile_s": 1.0},
                     "baselines": {"sdpa_cudnn": {**line, "method": "profiler"}, "reference": {"unavailable": "y"}},
                     "speedup": {"sdpa_cudnn": 1.0}, "repeat": repeat_record([0.0103, 0.0125]),
                     "config": {"decode_fwd": {"BLOCK_N": 64, "tuning": "table"}}, "gbps": 2900.0}}
    text = render([rec])
    assert "device      10.3 us" in text and "[cudagraph, L2 cold]" in text and "[profiler" in text
    assert "host    21.5 us" in text and "FLAGGED" in text and "config decode_fwd: table: BLOCK_N=64" in text
    assert "unavailable: y" in text


class _ToyFamily:
    """A family whose kernel 'lasts' 10 us and whose reference 40 us on the fake device."""

    def make_inputs(self, case, gen):
        return {"x": torch.ones(4)}

    def output_specs(self, case, inputs):
        return {"o": ((4,), torch.float32)}

    def call(self, impl, case, inputs, outputs):
        return impl(inputs["x"], out=outputs["o"])

    def reference(self, case, inputs, dtype):
        _CALLED.append("reference")

    def vendor_problem(self, case, inputs):
        return None

    def extra_baselines(self, case, inputs, impl):
        return {"broken": (lambda: 1 / 0, None)}

    def work(self, case, inputs):
        return {"bytes": 4e6}

    def sweep(self, case):
        return None


_CALLED = []


class _ToyCase:
    dtype = torch.float32

    def generator(self):
        return torch.Generator().manual_seed(0)


class _ToyDevice(FakeDevice):
    torch_device = torch.device("cpu")

    def place(self, t):
        return t


def test_run_bench_fills_the_records_contract_from_device_time(monkeypatch):
    from attnsuite.bench import run as run_mod

    per_call = {"kernel": 0.010, "reference": 0.040}

    class Graphs(FakeGraphs):
        def capture(self, body):
            _CALLED.clear()
            body()
            ms = sum(per_call["reference" if c == "reference" else "kernel"] for c in _CALLED)
            return _Graph(self.clock, self.LAUNCH + ms)

    monkeypatch.setattr(gt, "backend_for", lambda device: Graphs(0.0))
    monkeypatch.setattr(run_mod, "device_lock", lambda device: nullcontext())

    def kernel(x, out):
        _CALLED.append("kernel")
        out.copy_(x)

    bench = run_mod.run_bench(_ToyFamily(), _ToyCase(), _ToyDevice(), kernel, runs=5, l2="warm", repeat=2,
                              copy_gbps=1000.0)
    k = bench["kernel"]
    assert set(k) == {"device", "method", "host_us", "latency_ms", "l2", "note", "compile_s"}
    assert k["method"] == "cudagraph" and k["l2"] == "warm"
    assert k["device"]["median_ms"] == pytest.approx(0.010, rel=0.05)
    assert bench["baselines"]["reference"]["device"]["median_ms"] == pytest.approx(0.040, rel=0.05)
    assert bench["speedup"]["reference"] == pytest.approx(4.0, rel=0.1)
    assert bench["baselines"]["broken"] == {"unavailable": "ZeroDivisionError: division by zero"}
    assert bench["repeat"]["flagged"] is False and len(bench["repeat"]["device_median_ms"]) == 2
    assert bench["gbps"] == pytest.approx(4e6 / (k["device"]["median_ms"] * 1e-3) / 1e9)


def test_a_pinned_baseline_is_timed_inside_its_context_entered_once(monkeypatch):
    from attnsuite.baselines.cuda import Pinned

    dev = FakeGraphs(call_ms=0.02)
    monkeypatch.setattr(gt, "backend_for", lambda device: dev)
    entered, inside = [], []
    state = {"in": False}

    @contextmanager
    def context():
        entered.append(1)
        state["in"] = True
        yield
        state["in"] = False

    def bare():
        inside.append(state["in"])
        dev.call()

    line = time_call(FakeDevice(), Pinned(bare, context), flush=dev.flush, runs=5)
    assert entered == [1] and inside and all(inside)
    assert "backend pinned around the timing" in line["note"]
    Pinned(bare, context)()  # called on its own it still pins
    assert entered == [1, 1] and inside[-1] is True


# --- benchmarks in minutes: slow baselines get fewer runs, flush graphs are captured once ---------

def test_a_slow_baseline_gets_fewer_timed_runs_and_a_fast_one_all_of_them():
    from attnsuite.bench.run import BASELINE_BUDGET_S, MIN_BASELINE_RUNS, baseline_runs

    assert baseline_runs(0.001, 30) == 30  # 30 ms in all: every run
    assert baseline_runs(BASELINE_BUDGET_S / 30, 30) == 30
    assert baseline_runs(0.004, 30) == int(BASELINE_BUDGET_S / 0.004) < 30  # a 4 ms reference
    assert baseline_runs(0.012, 30) == MIN_BASELINE_RUNS  # a sweep point's 12 ms reference
    assert baseline_runs(2.0, 30) == MIN_BASELINE_RUNS  # never fewer than the floor
    assert baseline_runs(2.0, 3) == 3  # nor more than asked for
    assert baseline_runs(0.0, 30) == 30


def test_the_flush_graph_is_captured_once_and_replayed_for_every_later_call():
    dev = FakeGraphs(call_ms=0.010)
    first = gt.graph_time(FakeDevice(), dev.call, flush=dev.flush, runs=5, backend=dev)
    flush_only = [c for c in dev.captured if c["call"] == 0]
    assert len(flush_only) == 2  # one round (to choose k) and k rounds
    again = gt.graph_time(FakeDevice(), dev.call, flush=dev.flush, runs=5, backend=dev)
    assert [c for c in dev.captured if c["call"] == 0] == flush_only  # none captured again
    assert again.timing.median_ms == pytest.approx(first.timing.median_ms) == pytest.approx(0.010)
    # Another flush (another device or scratch buffer) gets graphs of its own.
    other = FakeGraphs(call_ms=0.010)
    gt.graph_time(FakeDevice(), other.call, flush=other.flush, runs=5, backend=other)
    assert len([c for c in other.captured if c["call"] == 0]) == 2


def _time_by_calling(monkeypatch, run_mod, median_ms: float) -> None:
    """run_bench with every timed callable called once and given ``median_ms``, no device."""
    monkeypatch.setattr(run_mod, "_VENDOR_TIMES", {})
    monkeypatch.setattr(run_mod, "device_lock", lambda device: nullcontext())
    monkeypatch.setattr(run_mod, "time_call", lambda device, fn, **kw: (fn(), {
        "device": {"median_ms": median_ms}, "method": "cudagraph", "note": None})[1])
    monkeypatch.setattr(run_mod, "first_call_s", lambda device, fn: 0.0)


def _copy_kernel(x, out):
    out.copy_(x)


def test_a_vendor_baseline_is_timed_once_per_shape_and_reused_with_a_note(monkeypatch):
    from attnsuite.bench import run as run_mod

    timed = []

    class Family(_ToyFamily):
        def __init__(self, n, point=True):
            self.n, self.point = n, point

        def sweep(self, case):  # a sweep's point: its keyed baseline may be shared
            return {"name": "toy", "series": "s", "x": self.n} if self.point else None

        def make_inputs(self, case, gen):
            return {"x": torch.ones(self.n)}

        def output_specs(self, case, inputs):
            return {"o": ((self.n,), torch.float32)}

        def vendor_problem(self, case, inputs):
            x = inputs["x"]
            return {"q": x, "k": x, "v": x}

        def extra_baselines(self, case, inputs, impl):
            n = inputs["x"].shape[0]
            return {"own": (lambda: timed.append(("own", n)), None, ("size", n))}

    class Device(_ToyDevice):
        def vendor_baselines(self, problem):
            n = problem["q"].shape[0]
            return {"vendor": (lambda: timed.append(n), "dense"), "gone": (None, "not here")}

    _time_by_calling(monkeypatch, run_mod, 0.01)
    kernel = _copy_kernel
    first = run_mod.run_bench(Family(4), _ToyCase(), Device(), kernel, runs=5, l2="warm")
    second = run_mod.run_bench(Family(4), _ToyCase(), Device(), kernel, runs=5, l2="warm")
    other = run_mod.run_bench(Family(8), _ToyCase(), Device(), kernel, runs=5, l2="warm")
    # The 4-element problem timed once, the 8-element one on its own; the family's keyed
    # baseline likewise, and again for another implementation of the same problem.
    def other_kernel(x, out):
        out.copy_(x)

    by_other = run_mod.run_bench(Family(4), _ToyCase(), Device(), other_kernel, runs=5, l2="warm")
    assert timed == [4, ("own", 4), 8, ("own", 8), ("own", 4)]
    assert "reused" in second["baselines"]["own"]["note"] and "reused" not in (by_other["baselines"]["own"]["note"] or "")
    # A headline case (no sweep) times its own baselines even when a sweep point had the key.
    timed.clear()
    headline = run_mod.run_bench(Family(4, point=False), _ToyCase(), Device(), kernel, runs=5, l2="warm")
    assert timed == [("own", 4)] and "reused" not in (headline["baselines"]["own"]["note"] or "")
    assert "reused" not in (first["baselines"]["vendor"]["note"] or "")
    assert "reused" in second["baselines"]["vendor"]["note"] and "dense" in second["baselines"]["vendor"]["note"]
    assert second["baselines"]["vendor"]["device"] == first["baselines"]["vendor"]["device"]
    assert "reused" not in (other["baselines"]["vendor"]["note"] or "")
    assert second["baselines"]["gone"] == {"unavailable": "not here"}
    assert second["speedup"]["vendor"] == pytest.approx(1.0)


def test_a_reference_whose_time_depends_on_less_than_the_case_is_timed_once_per_key_in_a_sweep(monkeypatch):
    from attnsuite.bench import run as run_mod

    timed = []

    class Family(_ToyFamily):
        def __init__(self, n, point=True):
            self.n, self.point = n, point

        def sweep(self, case):
            return {"name": "toy", "series": "s", "x": self.n} if self.point else None

        def reference(self, case, inputs, dtype):
            timed.append(self.n)

        def reference_cost_key(self, case, inputs):
            return ("size", self.n)

        def extra_baselines(self, case, inputs, impl):
            return {}

    _time_by_calling(monkeypatch, run_mod, 0.04)
    runs = [run_mod.run_bench(Family(n, point), _ToyCase(), _ToyDevice(), _copy_kernel, runs=5, l2="warm")
            for n, point in ((4, True), (4, True), (8, True), (4, False))]
    assert timed == [4, 8, 4]  # the second point of size 4 reuses; a headline case times its own
    notes = [r["baselines"]["reference"]["note"] or "" for r in runs]
    assert ["reused" in n for n in notes] == [False, True, False, False]
    assert runs[1]["speedup"]["reference"] == pytest.approx(runs[0]["speedup"]["reference"])


def test_an_adapter_with_a_prepare_step_is_timed_by_its_launch_alone():
    from attnsuite.bench.run import launch_only

    log = []

    def prepare(x, *, out=None):
        log.append("prepare")
        return lambda: (log.append("launch"), x)[1]

    def adapter(x, *, out=None):
        return prepare(x, out=out)()
    adapter.prepare = prepare

    call = launch_only(adapter)
    assert call(1, out=None) == 1 and call(1, out=None) == 1 and call(1, out=None) == 1
    assert log == ["prepare", "launch", "launch", "launch"]
    plain = lambda x: x  # noqa: E731
    assert launch_only(plain) is plain
