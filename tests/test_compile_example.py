"""examples/paged_port, a user's out-of-tree kernel, through every tier: numeric on cpu, compile-only
for cuda and npu with its own ledger, and registered by entry point. Nothing is installed into the
environment: the package goes on PYTHONPATH, the entry point comes from a temporary dist-info."""
from __future__ import annotations

import os

import pytest

from attnsuite.compile import toolchain
from attnsuite.ledger import installed_versions
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "paged_port"
LEDGER = EXAMPLE / "known_failures.toml"
SPEC = "paged_decode=paged_port.decode:paged_decode"
#: A one-token-page case (rc2 compiles it), page-size-16 ones (rc2 fails), an empty sequence, NHD;
#: 16-bit caches only (the example takes no k_scale/v_scale, so fp8 cases are unsupported for it).
CASES = ["-k", "(L1_7 or L1_16_40 or HND-P16-shared-L100_37_0_64 or NHD-P16-ordered-L17_48) and not kv_fp8"]
PAGED = "cases/paged_decode.py"

upstream = pytest.mark.skipif(toolchain.installed() != "upstream", reason="needs upstream triton")
ascend = pytest.mark.skipif(toolchain.installed() != "ascend", reason="needs triton-ascend (tox -e npu-compile)")


def _env(*extra) -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(ROOT), str(EXAMPLE), *map(str, extra)])}


@upstream
def test_numeric_on_cpu(run_suite):
    run = run_suite(PAGED, *CASES, "--device", "cpu", "--impl", SPEC, env=_env())
    assert run.returncode == 0, run.output[-2000:]
    assert len(run.records) >= 4 and {r["outcome"] for r in run.records} == {"pass"}
    assert all(r["impl"] == SPEC.split("=")[1] and f"--impl {SPEC}" in r["repro"] for r in run.records)


@upstream
def test_cuda_compile_only(run_suite):
    run = run_suite(PAGED, *CASES, "--device", "cuda", "--compile-only", "--cuda-arch", "90",
                    "--impl", SPEC, env=_env())
    assert run.returncode == 0, run.output[-2000:]
    for rec in run.records:
        (entry,) = rec["compile"]["sm_90"]
        assert entry["kernel"] == "_paged_decode_port" and entry["cubin_bytes"] > 0


@ascend
def test_npu_compile_only_with_the_examples_ledger(run_suite):
    run = run_suite(PAGED, *CASES, "--device", "npu", "--compile-only", "--impl", SPEC,
                    "--ledger", str(LEDGER), env=_env())
    assert run.returncode == 0, run.output[-3000:]
    by_page = {}
    for rec in run.records:
        by_page.setdefault(rec["params"]["P"], []).append(rec)
        (entry,) = rec["compile"]["Ascend910B2"]
        assert entry["hazards"]["grid"]["programs"] == rec["params"]["Hq"] * len(rec["params"]["lengths"])
    rc2 = installed_versions()["triton-ascend"] == "3.2.0rc2"
    for rec in by_page[16]:
        if rc2:  # the ledger entry, keyed to the implementation, makes it a strict known failure
            assert rec["outcome"] == "xfail" and rec["known_failure"]["id"] == "paged_port_page_div_zero"
            assert "cannot div 0!" in rec["message"]
        else:
            assert rec["outcome"] == "pass" and rec["known_failure"] is None, rec["message"]
            sites = rec["compile"]["Ascend910B2"][0]["hazards"]["accesses"]["sites"]
            assert any(s["kind"] == "scalar" and s["line"] == "decode.py:39" for s in sites), sites
            assert rec["compile"]["Ascend910B2"][0]["hazards"]["ub"]["bytes"] > 0
    assert [r["outcome"] for r in by_page[1]] == ["pass"]  # tok // 1 folds away: rc2 compiles it


def _dist_info(tmp_path):
    """What `pip install examples/paged_port` would leave for importlib.metadata to find."""
    info = tmp_path / "attnsuite_example_paged_port-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: attnsuite-example-paged-port\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        "[attnsuite.impls]\npaged_decode.paged_port = paged_port.decode:paged_decode\n")
    return tmp_path


def test_the_entry_point_registers_the_example_by_name(tmp_path, monkeypatch):
    from attnsuite import impls, registry

    monkeypatch.syspath_prepend(str(_dist_info(tmp_path)))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    assert impls.entry_points("paged_decode") == {"paged_port": "paged_port.decode:paged_decode"}
    name, fn = impls.resolve(registry.family("paged_decode"), "paged_port")
    assert name == "paged_port" and fn.__module__ == "paged_port.decode"


@upstream
def test_the_entry_point_name_runs_in_the_suite(run_suite, tmp_path):
    run = run_suite(PAGED, "-k", "L1_16_40 and not kv_fp8", "--device", "cpu", "--impl", "paged_decode=paged_port",
                    env=_env(_dist_info(tmp_path)))
    assert run.returncode == 0, run.output[-2000:]
    assert [(r["impl"], r["outcome"]) for r in run.records] == [("paged_port", "pass")]
