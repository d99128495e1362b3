"""--compile-only: every case's launches compiled for the device's targets, without a device."""
import pytest

from attnsuite.compile import toolchain

upstream = pytest.mark.skipif(toolchain.installed() != "upstream", reason="needs upstream triton")
ascend = pytest.mark.skipif(toolchain.installed() != "ascend", reason="needs triton-ascend (tox -e npu-compile)")

DECODE = "cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S300-D64-lse]"


def test_cpu_cannot_compile_only(run_suite):
    run = run_suite(DECODE, "--compile-only")
    assert run.returncode == 4 and "--compile-only needs --device cuda or --device npu" in run.output


@upstream
def test_npu_compile_only_needs_the_ascend_toolchain(run_suite):
    run = run_suite(DECODE, "--device", "npu", "--compile-only")
    assert run.returncode == 4 and "needs triton-ascend" in run.output and "Traceback" not in run.output


@upstream
def test_cuda_compile_only_builds_every_launch_for_each_arch(run_suite):
    run = run_suite(DECODE, "cases/sparse_paged_decode.py", "-k", "S300 or keep0.05",
                    "--device", "cuda", "--compile-only", "--cuda-arch", "80,90")
    assert run.returncode == 0, run.output[-3000:]
    assert len(run.records) >= 2
    for rec in run.records:
        assert rec["mode"] == "compile" and rec["outcome"] == "pass" and rec["device"] == "cuda"
        assert set(rec["compile"]) == {"sm_80", "sm_90"}
        for links in rec["compile"].values():
            assert links and all(x["outcome"] == "pass" and x["cubin_bytes"] > 0 for x in links)
        assert "--compile-only --cuda-arch 80,90" in rec["repro"]
    # decode at S=300 under device configs: one split kernel plus the merge, as a launch would run
    (dec,) = [r for r in run.records if r["family"] == "decode"]
    assert [x["kernel"] for x in dec["compile"]["sm_90"]] in (["_decode_fwd"], ["_decode_fwd", "_merge_splits"])
    html = run.report.read_text()
    assert "cuda compile" in html and "sm_90" in html


@upstream
def test_compile_records_do_not_replace_numeric_ones():
    from attnsuite.records import merge_latest

    base = {"schema": 1, "case_id": "decode[x]", "family": "decode", "device": "cuda", "impl": "triton"}
    merged = merge_latest([dict(base, outcome="pass", mode="numeric"), dict(base, outcome="fail", mode="compile")])
    assert sorted(r["mode"] for r in merged) == ["compile", "numeric"]


@ascend
def test_npu_compile_only_reaches_the_last_stage_without_cann(run_suite):
    run = run_suite(DECODE, "--device", "npu", "--compile-only")
    (rec,) = run.records
    assert rec["outcome"] == "pass", rec["message"]
    (links,) = rec["compile"].values()
    assert all(x["last_stage_reached"] == "bishengir (hivmc missing)" for x in links)
