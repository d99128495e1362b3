"""The tile tuner's bookkeeping (the timing itself needs a GPU): defaults off the GPU, the
shipped table before the user's cache, cache entries keyed by device name, memoised per process,
retuning for a new table; and every shipped table is valid."""
import json

import pytest
import torch

from kernels import _tune, settings, tuning

CANDIDATES = [{"BLOCK_N": 64}, {"BLOCK_N": 128}]


def _fresh(monkeypatch, tmp_path, autotune="0", table=None):
    monkeypatch.setattr(settings, "_current", settings.Settings(autotune=autotune == "1",
                                                                tune_cache=str(tmp_path / "tune.json")))
    monkeypatch.setattr(_tune, "_cache", None)
    monkeypatch.setattr(_tune, "_memo", {})
    monkeypatch.setattr(_tune, "_names", {})
    monkeypatch.setattr(_tune, "_tables", {} if table is None else {"Fake GPU": table})


def _no_build(cfg):
    raise AssertionError("nothing may be built or timed here")


def test_not_live_or_not_cuda_uses_the_default_without_timing(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path, autotune="1")
    cuda = torch.device("cuda", 0)
    assert _tune.pick("k", (1,), lambda: CANDIDATES, _no_build, cuda, live=False) == (CANDIDATES[0], "default")
    assert _tune.pick("k", (1,), lambda: CANDIDATES, _no_build, torch.device("cpu"), live=True) == (
        CANDIDATES[0], "default")


def test_the_cache_file_is_the_one_the_settings_name(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path)
    assert _tune.cache_path() == tmp_path / "tune.json"
    monkeypatch.setattr(settings, "_current", settings.Settings())
    assert _tune.cache_path().name == "tune.json" and ".cache" in str(_tune.cache_path())


def test_a_cached_config_for_this_device_name_is_used_and_memoised(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path)
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(_tune, "_names", {cuda: "Fake GPU"})
    (tmp_path / "tune.json").write_text(json.dumps(
        {"Fake GPU": {"k": {"1/a": {"config": {"BLOCK_N": 128}, "candidates_ms": []}}},
         "Other GPU": {"k": {"2/a": {"config": {"BLOCK_N": 32}}}}}))
    assert _tune.pick("k", (1, "a"), lambda: CANDIDATES, _no_build, cuda, live=True) == (
        {"BLOCK_N": 128}, "cache")
    # another device's entry is not ours; without autotune the default is used
    assert _tune.pick("k", (2, "a"), lambda: CANDIDATES, _no_build, cuda, live=True) == (
        CANDIDATES[0], "default")
    (tmp_path / "tune.json").unlink()
    assert _tune.pick("k", (1, "a"), lambda: CANDIDATES, _no_build, cuda, live=True)[1] == "cache"


def test_the_shipped_table_comes_before_the_cache(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path, autotune="1", table={"k": {"1/a": {"config": {"BLOCK_N": 64}}}})
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(_tune, "_names", {cuda: "Fake GPU"})
    (tmp_path / "tune.json").write_text(json.dumps(
        {"Fake GPU": {"k": {"1/a": {"config": {"BLOCK_N": 128}}, "2/a": {"config": {"BLOCK_N": 128}}}}}))
    assert _tune.pick("k", (1, "a"), lambda: CANDIDATES, _no_build, cuda, live=True) == ({"BLOCK_N": 64}, "table")
    assert _tune.pick("k", (2, "a"), lambda: CANDIDATES, _no_build, cuda, live=True) == ({"BLOCK_N": 128}, "cache")


def test_a_table_file_is_only_read_for_the_device_it_names(tmp_path):
    path = _tune.table_path("Fake GPU 80GB", tmp_path)
    assert path.name == "Fake_GPU_80GB.json"
    path.write_text(json.dumps({"device": "Fake GPU 80GB", "kernels": {"k": {"1": {"config": {}}}}}))
    assert _tune.read_table("Fake GPU 80GB", tmp_path) == {"k": {"1": {"config": {}}}}
    # same file name, another device: ignored
    assert _tune.read_table("Fake-GPU 80GB", tmp_path) == {}
    assert _tune.read_table("No Such GPU", tmp_path) == {}


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


def test_retuning_ignores_table_and_cache_and_collects_instead_of_caching(monkeypatch, tmp_path):
    _fresh(monkeypatch, tmp_path, table={"k": {"1": {"config": {"BLOCK_N": 64}}}})
    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(_tune, "_names", {cuda: "Fake GPU"})
    monkeypatch.setattr(_tune, "_time_ms", lambda device, run: run())
    monkeypatch.setattr("kernels._checks.run_plan", lambda plan: plan)
    fake_ms = {64: 2.0, 128: 1.0}
    assert _tune.pick("k", (1,), lambda: CANDIDATES, _no_build, cuda, live=True)[1] == "table"
    with tuning.retuning() as found:
        cfg, source = _tune.pick("k", (1,), lambda: CANDIDATES, lambda c: fake_ms[c["BLOCK_N"]], cuda, live=True)
    assert (cfg, source) == ({"BLOCK_N": 128}, "tuned")
    assert found["k"]["1"]["config"] == {"BLOCK_N": 128}
    assert not (tmp_path / "tune.json").exists()
    assert settings.current().autotune is False
    assert _tune.pick("k", (1,), lambda: CANDIDATES, _no_build, cuda, live=True)[1] == "table"


def test_check_table_accepts_candidates_only():
    from kernels.decode import decode_candidates

    good = decode_candidates(64, torch.float16)[1]
    assert tuning.check_table({"decode": {"128/1024/64/4/torch.float16/0": {"config": good}}}) == []
    bad = {**good, "BLOCK_N": 48}
    problems = tuning.check_table({"decode": {"128/1024/64/4/torch.float16/0": {"config": bad}},
                                   "decode_v2": {"1": {"config": good}},
                                   "prefill": {"1/2": {"config": good}}})
    assert len(problems) == 3 and "not one of the kernel's candidates" in problems[0]


def test_write_table_merges_and_refuses_invalid_entries(tmp_path):
    from kernels.prefill import prefill_candidates

    a, b = prefill_candidates(64, torch.float16)[:2]
    tuning.write_table("Fake GPU", {"prefill": {"1/1024/64/torch.float16": {"config": a}}}, {"x": 1}, tmp_path)
    tuning.write_table("Fake GPU", {"prefill": {"0/1024/64/torch.float16": {"config": b}}}, {"x": 2}, tmp_path)
    assert set(_tune.read_table("Fake GPU", tmp_path)["prefill"]) == {"1/1024/64/torch.float16",
                                                                       "0/1024/64/torch.float16"}
    with pytest.raises(ValueError, match="invalid table"):
        tuning.write_table("Fake GPU", {"prefill": {"1/1024/64/torch.float16": {"config": {"BLOCK_M": 1}}}}, {},
                           tmp_path)


@pytest.mark.parametrize("path", sorted(_tune.TABLE_DIR.glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_table_is_valid(path):
    data = json.loads(path.read_text())
    assert _tune.table_path(data["device"]) == path, "file name must follow the device name"
    assert tuning.check_table(data["kernels"]) == []
    assert "command" in data.get("made_with", {})
