"""Compile-only for any implementation: launches captured at Triton's launch path
(attnsuite.compile.capture), the per-run compile cache, the Ascend hazards and their display.

The capture tests run under whichever Triton is installed (upstream 3.6-3.9 or triton-ascend 3.2)
and launch nothing: the tensors are host tensors and no driver is asked for."""
from __future__ import annotations

import json

import pytest
import torch
import triton
import triton.language as tl

from attnsuite.compile import capture, hazards, memory, toolchain
from attnsuite.compile.cache import CompileCache
from attnsuite.compile.capture import Launch, NeedsDevice, capture_call, launch_configs

ascend = pytest.mark.skipif(toolchain.installed() != "ascend", reason="needs triton-ascend (tox -e npu-compile)")


def _double(X, Y, n, BLOCK: tl.constexpr, SCALE: tl.constexpr = 2):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, tl.load(X + offs, mask=offs < n) * SCALE, mask=offs < n)


def _jit():
    """A real JITFunction (the test session may have TRITON_INTERPRET=1 set at import)."""
    from triton.runtime.jit import JITFunction

    return JITFunction(_double)


def test_a_jit_launch_is_recorded_not_run():
    kernel = _jit()
    x = torch.randn(100)
    with capture.capture() as launches:
        kernel[(4,)](x, torch.empty_like(x), 100, BLOCK=32)
    (ln,) = launches
    assert (ln.grid, ln.args[2], ln.meta, ln.origin, ln.name) == ((4,), 100, {"BLOCK": 32}, "jit", "_double")


def test_a_callable_grid_sees_bound_arguments_with_defaults():
    seen = {}

    def grid(args):
        seen.update(args)
        return (triton.cdiv(args["n"], args["BLOCK"]),)

    x = torch.randn(100)
    (ln,) = capture_call(lambda: _jit()[grid](x, torch.empty_like(x), 100, BLOCK=32))
    assert ln.grid == (4,)
    assert seen["SCALE"] == 2 and seen["n"] == 100 and "num_warps" not in seen


def test_every_autotune_config_is_its_own_launch_and_prune_applies():
    pruned = []

    def prune(configs, nargs, **kw):
        pruned.append(len(configs))
        return [c for c in configs if c.kwargs["BLOCK"] != 128]

    with capture.host_driver():  # Triton 3.2 asks the driver for a benchmarker when decorating
        tuned = triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w)
                                         for b, w in ((32, 1), (64, 2), (128, 4))],
                                key=["n"], prune_configs_by={"early_config_prune": prune})(_jit())
        x = torch.randn(100)
        launches = capture_call(lambda: tuned[lambda m: (triton.cdiv(100, m["BLOCK"]),)](
            x, torch.empty_like(x), 100))
    assert pruned == [3]
    assert [(ln.grid, ln.meta["BLOCK"], ln.meta["num_warps"]) for ln in launches] == [((4,), 32, 1), ((2,), 64, 2)]
    assert launches[1].origin.startswith("autotune config 2/2 (BLOCK=64")


def test_heuristics_values_reach_the_launch():
    kernel = triton.heuristics({"BLOCK": lambda a: triton.next_power_of_2(a["n"])})(_jit())
    x = torch.randn(100)
    (ln,) = capture_call(lambda: kernel[(1,)](x, torch.empty_like(x), 100))
    assert ln.meta["BLOCK"] == 128


def test_warmup_is_not_a_launch_and_patches_are_undone():
    from triton.runtime import autotuner, jit

    before = (jit.JITFunction.run, autotuner.Autotuner.run)
    x = torch.randn(8)
    with capture.capture() as launches:
        _jit().run(x, torch.empty_like(x), 8, BLOCK=8, grid=(1,), warmup=True)
        with capture.capture() as inner:  # nested blocks record into the innermost
            _jit()[(1,)](x, torch.empty_like(x), 8, BLOCK=8)
    assert launches == [] and len(inner) == 1
    assert (jit.JITFunction.run, autotuner.Autotuner.run) == before


def test_an_implementation_that_wants_a_device_is_told_apart_from_a_failure():
    with capture.host_driver():  # the module decorates an autotuned kernel
        from tests import compile_impls as impls

    q = torch.randn(1, 2, 1, 16)
    if not torch.cuda.is_available():
        with pytest.raises(NeedsDevice, match="needs device tensors.*before any launch.*CUDA"):
            capture_call(lambda: impls.wants_cuda(q, q, q))
    with pytest.raises(NeedsDevice, match="q must be a CUDA tensor"):
        capture_call(lambda: impls.checks_device(q, q, q))
    with pytest.raises(KeyError):  # not about devices: propagates unchanged
        capture_call(lambda: {}["missing"])
    assert capture_call(lambda: impls.plain_torch(q, q, q)) == []


def test_launch_configs_lists_each_kernel_meta():
    x = torch.randn(64)
    assert launch_configs(lambda: _jit()[(2,)](x, torch.empty_like(x), 64, BLOCK=32, num_warps=2)) == {
        "double": {"BLOCK": 32, "num_warps": 2}}
    assert launch_configs(lambda: None) is None


# -- the harness: foreign implementations in compile-only ----------------------------------------

DECODE = "cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S300-D64-lse]"


def _device_args():
    if toolchain.installed() == "ascend":
        return ["--device", "npu", "--compile-only"]
    return ["--device", "cuda", "--compile-only", "--cuda-arch", "90"]


@pytest.mark.skipif(toolchain.installed() is None, reason="needs a Triton toolchain")
@pytest.mark.parametrize("impl,reason", [
    ("wants_cuda", "needs device tensors or a device runtime before any launch"),
    ("checks_device", "q must be a CUDA tensor"),
    ("plain_torch", "launched no Triton kernel"),
])
def test_host_only_and_vendor_implementations_are_skipped_with_the_reason(run_suite, impl, reason):
    run = run_suite(DECODE, *_device_args(), "--impl", f"decode=tests.compile_impls:{impl}")
    (rec,) = run.records
    assert rec["outcome"] == "skip", run.output[-2000:]
    assert reason in rec["message"] and rec["impl"] == f"tests.compile_impls:{impl}"


@pytest.mark.skipif(toolchain.installed() is None, reason="needs a Triton toolchain")
def test_a_foreign_autotuned_kernel_compiles_each_config(run_suite):
    run = run_suite(DECODE, *_device_args(), "--impl", "decode=tests.compile_impls:autotuned")
    (rec,) = run.records
    assert rec["outcome"] == "pass", rec["message"]
    (links,) = rec["compile"].values()
    assert [x["kernel"] for x in links] == ["_decode_tuned", "_decode_tuned"]
    assert [x["origin"].split(" (")[0] for x in links] == ["autotune config 1/2", "autotune config 2/2"]
    assert all(x["grid"] == [16] for x in links)


# -- the per-run cache -----------------------------------------------------------------------------

def test_cache_compiles_a_key_once_across_processes_sharing_a_directory(tmp_path):
    calls = []

    def compile_():
        calls.append(1)
        return {"entry": {"outcome": "pass"}}

    first, second = CompileCache(tmp_path), CompileCache(tmp_path)  # two workers of one run
    assert first.get_or_compile("k", compile_) == ({"entry": {"outcome": "pass"}}, False)
    assert second.get_or_compile("k", compile_)[1] is True
    assert first.get_or_compile(None, compile_)[1] is False  # no key: never cached
    assert len(calls) == 2
    assert json.loads((tmp_path / "k.json").read_text()) == {"entry": {"outcome": "pass"}}


@pytest.mark.skipif(toolchain.installed() is None, reason="needs a Triton toolchain")
def test_identical_specializations_share_a_key_and_alignment_or_dtype_do_not():
    from attnsuite.compile.cache import specialization_key

    target = "Ascend910B2" if toolchain.installed() == "ascend" else "sm_90"
    kernel = _jit()

    def key(x, n, block=32):
        return specialization_key(Launch(kernel, (1,), (x, torch.empty_like(x), n), {"BLOCK": block}), target)

    x = torch.randn(256)
    # other data, another plain int: the same specialization (3.2.0rc2 also keys on tensor shapes)
    assert key(x, 100) == key(torch.randn(256), 200)
    assert key(x, 100) != key(x, 100, block=64)
    assert key(x, 100) != key(x.half(), 100)
    assert key(x, 100) != key(x[1:], 100)  # misaligned pointer


@ascend
def test_repeated_specializations_are_compiled_once_per_run(run_suite, tmp_path):
    run = run_suite("cases/probes.py", "-k", "loop_if_mask and rewrite", "--device", "npu",
                    "--compile-only", env={"ATTNSUITE_COMPILE_CACHE": str(tmp_path / "cache")})
    entries = [x for r in run.records for x in r["compile"]["Ascend910B2"]]
    # pages1 specializes num_pages == 1 into a constant: two specializations for two cases
    assert len(entries) == 2 and not any(x.get("cached") for x in entries)
    again = run_suite("cases/probes.py", "-k", "loop_if_mask and rewrite", "--device", "npu",
                      "--compile-only", env={"ATTNSUITE_COMPILE_CACHE": str(tmp_path / "cache")})
    assert all(x["cached"] and x["compiled_seconds"] > 0 for r in again.records for x in r["compile"]["Ascend910B2"])


# -- hazards ---------------------------------------------------------------------------------------

def test_grid_hazard_counts_against_the_cores_the_kernel_runs_on():
    mixed = hazards.grid_hazard((512, 16), "Ascend910B2", "mix")
    assert mixed == {"programs": 8192, "ai_cores": 24, "vector_cores": 48, "bound_to": "ai_cores",
                     "ratio": 341.33, "flagged": True}
    vector = hazards.grid_hazard((96,), "Ascend910B2", "aiv")
    assert (vector["bound_to"], vector["ratio"], vector["flagged"]) == ("vector_cores", 2.0, False)
    assert hazards.grid_hazard((97,), "Ascend910B2", "aiv")["flagged"]
    assert hazards.grid_hazard((1,), "Ascend310P3", None) is None  # no table entry: not measured


def test_access_and_ub_hazards_and_their_display():
    accesses = [{"granularity": "element", "loc": "k.py:10", "trips": 512},
                {"granularity": "row", "loc": "k.py:12", "trips": 16},
                {"granularity": "row", "loc": "k.py:12", "trips": None}]
    found = hazards.hazards((8192,), "Ascend910B2", mix_mode="mix", accesses=accesses,
                            memory={"aiv": {"ub": 188000}, "aic": {"cbuf": 1024}})
    assert found["accesses"] == {"scalar": 1, "row_gather": 2, "sites": [
        {"kind": "scalar", "line": "k.py:10", "count": 1, "moves": 512},
        {"kind": "row_gather", "line": "k.py:12", "count": 2, "moves": None}]}
    assert found["ub"] == {"bytes": 188000, "capacity": 196608, "percent": 95.6, "flagged": True}
    assert hazards.describe({"hazards": found}) == [
        "! grid 8192 programs = 341.33x the 24 AI cores", "! UB 95.6% (188000 B)",
        "! 1 scalarized access (k.py:10)", "2 row gathers (k.py:12)"]
    assert hazards.describe({}) == [] and "ub" not in hazards.hazards((1,), "Ascend910B2", memory={})


def test_memory_display_takes_the_end_of_the_highest_buffer(tmp_path):
    (tmp_path / "memory_info_aiv.json").write_text(json.dumps({"Record": [
        {"scope": "ub", "memory_info_array": [{"extent": 512, "offset": [0]},
                                              {"extent": 8192, "offset": [64, 2112]}]},
        {"scope": "ub", "memory_info_array": [{"extent": 8, "offset": [0]}]}]}))
    (tmp_path / "memory_info_aic.json").write_text(json.dumps({"Record": [
        {"scope": "cbuf", "memory_info_array": [{"extent": 16384, "offset": [0]}]}]}))
    assert memory.read_display(str(tmp_path)) == {"aic": {"cbuf": 2048}, "aiv": {"ub": 3136}}
    assert memory.read_display(str(tmp_path / "missing")) == {}


@ascend
def test_npu_records_carry_the_three_hazards(run_suite):
    run = run_suite("cases/probes.py", "-k", "gather_transposed or grid_limit", "--device", "npu",
                    "--compile-only")
    by_case = {r["case_id"]: r["compile"]["Ascend910B2"][0] for r in run.records}
    rows = by_case["probes[gather_transposed-rewrite-fp16]"]["hazards"]
    assert rows["grid"]["programs"] == 1 and 0 < rows["ub"]["bytes"] < rows["ub"]["capacity"]
    assert rows["accesses"]["sites"][0]["line"] == "gather_transposed.py:34"
    grid = by_case["probes[grid_limit-original-fp16]"]
    assert grid["stage"] == "grid" and grid["hazards"]["grid"]["flagged"]
