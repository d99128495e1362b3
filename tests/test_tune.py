"""The tile tuner's bookkeeping (the timing itself needs a GPU): defaults off the GPU, cache
entries keyed by device name, memoised per process."""
import json

import torch

from kernels import _tune, settings

CANDIDATES = [{"BLOCK_N": 64}, {"BLOCK_N": 128}]


def _fresh(monkeypatch, tmp_path, autotune="0"):
    monkeypatch.setenv(_tune.CACHE_ENV, str(tmp_path / "tune.json"))
    monkeypatch.setattr(settings, "_current", settings.Settings(autotune=autotune == "1"))
    monkeypatch.setattr(_tune, "_cache", None)
    monkeypatch.setattr(_tune, "_memo", {})
    monkeypatch.setattr(_tune, "_names", {})


def _no_build(cfg):
    raise AssertionError("nothing may be built or timed here")


def test_not_live_or_not_cuda_uses_the_default_without_timing(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path, autotune="1")
    cuda = torch.device("cuda", 0)
    assert _tune.pick("k", (1,), lambda: CANDIDATES, _no_build, cuda, live=False) == (CANDIDATES[0], "default")
    assert _tune.pick("k", (1,), lambda: CANDIDATES, _no_build, torch.device("cpu"), live=True) == (
        CANDIDATES[0], "default")


def test_a_cached_config_for_this_device_name_is_used_and_memoised(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path)
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(_tune, "_names", {cuda: "Fake GPU"})
    (tmp_path / "tune.json").write_text(json.dumps(
        {"Fake GPU": {"k": {"1/a": {"config": {"BLOCK_N": 128}, "candidates_ms": []}}},
         "Other GPU": {"k": {"2/a": {"config": {"BLOCK_N": 32}}}}}))
    assert _tune.pick("k", (1, "a"), lambda: CANDIDATES, _no_build, cuda, live=True) == (
        {"BLOCK_N": 128}, "cache")
    # another device's entry is not ours; without ATTNSUITE_AUTOTUNE the default is used
    assert _tune.pick("k", (2, "a"), lambda: CANDIDATES, _no_build, cuda, live=True) == (
        CANDIDATES[0], "default")
    (tmp_path / "tune.json").unlink()
    assert _tune.pick("k", (1, "a"), lambda: CANDIDATES, _no_build, cuda, live=True)[1] == "cache"


def test_tuning_stores_the_fastest_candidate_with_every_timing(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path, autotune="1")
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(_tune, "_names", {cuda: "Fake GPU"})
    fake_ms = {64: 2.0, 128: 1.0}
    monkeypatch.setattr(_tune, "_time_ms", lambda device, run: run())
    monkeypatch.setattr("kernels._checks.run_plan", lambda plan: plan)
    cfg, source = _tune.pick("k", (3,), lambda: CANDIDATES, lambda c: fake_ms[c["BLOCK_N"]], cuda, live=True)
    assert (cfg, source) == ({"BLOCK_N": 128}, "tuned")
    stored = json.loads((tmp_path / "tune.json").read_text())["Fake GPU"]["k"]["3"]
    assert stored["config"] == {"BLOCK_N": 128}
    assert [ms for ms, _ in stored["candidates_ms"]] == [2.0, 1.0]
