"""FlashInfer-Trace ``mla_paged`` definitions (decode and causal prefill, pages of 1 and 64) read as
cases of the MLA families: shapes, scale, page tables and query counts from the workload; its own
folder of test data, so the gqa tests' counts stay what they were."""
import json

import torch

from attnsuite.flashinfer_trace import schema, workloads
from attnsuite.registry import family as family_of
from tests.conftest import ROOT

DATA = ROOT / "tests" / "data" / "flashinfer_trace_mla"


def test_the_test_definitions_and_workloads_are_valid_in_the_schema():
    for path in DATA.rglob("definitions/**/*.json"):
        assert not schema.validate_definition(json.loads(path.read_text())), path
    for path in DATA.rglob("workloads/**/*.jsonl"):
        for line in path.read_text().splitlines():
            assert not schema.validate_workload(json.loads(line)["workload"]), path


def test_mla_workloads_map_to_the_mla_families():
    loaded = workloads.load(str(DATA))
    assert not loaded.problems and not loaded.ignored
    decode, prefill = loaded.cases["mla_paged_decode"], loaded.cases["mla_paged_prefill"]
    assert len(decode) == len(prefill) == 4
    for case in decode + prefill:
        p = case.params
        assert not p.get("unmapped"), p.get("unmapped")
        assert (p["H"], p["Dc"], p["Dr"], p["dtype"], p["cache"], p["scale"]) == (16, 512, 64, "bf16", "same", 0.1352)
        assert p["P"] in (1, 64) and p["lse"]
        # No kv_last_page_len input: every page is full.
        assert all(n % p["P"] == 0 for n in p["lengths"])
        assert case.id.startswith(f"{case.family}[fi-mla_paged_")
    for case in prefill:
        p = case.params
        assert p["causal"] and sum(p["queries"]) == p["fi"]["workload"]["axes"]["total_q"]
        assert all(n <= m for n, m in zip(p["queries"], p["lengths"]))
    sizes = {c.params["fi"]["workload"]["uuid"]: sum(c.params["lengths"]) // c.params["P"] for c in decode}
    assert sizes == {"mla-decode-ps1-0": 9, "mla-decode-ps1-1": 12, "mla-decode-ps64-0": 9, "mla-decode-ps64-1": 12}


def test_mapped_cases_build_inputs_the_reference_runs_on():
    loaded = workloads.load(str(DATA))
    for name in ("mla_paged_decode", "mla_paged_prefill"):
        family = family_of(name)
        case = next(c for c in loaded.cases[name] if c.params["P"] == 1)
        inputs = family.make_inputs(case, case.generator())
        rows = sum(case["queries"]) if name == "mla_paged_prefill" else len(case["lengths"])
        assert inputs["q_nope"].shape == (rows, 16, 512) and inputs["ckv_cache"].shape[1:] == (1, 512)
        out = family.reference(case, inputs, torch.float64)
        assert out["o"].shape == (rows, 16, 512) and bool(torch.isfinite(out["lse"]).all())


def test_an_fp8_cache_is_the_fp8_class_and_a_causal_overflow_is_not_mapped():
    d = json.loads(next(DATA.rglob("definitions/**/mla_paged_prefill_causal_h16_ckv512_kpe64_ps1.json")).read_text())
    w = json.loads(next(DATA.rglob("workloads/**/mla_paged_prefill_causal_h16_ckv512_kpe64_ps1.jsonl"))
                   .read_text().splitlines()[0])["workload"]
    fp8 = json.loads(json.dumps(d))
    for n in ("ckv_cache", "kpe_cache"):
        fp8["inputs"][n]["dtype"] = "float8_e4m3fn"
    assert workloads.to_case(fp8, w, DATA)[1].params["cache"] == "fp8"
    family, case = workloads.to_case(d, {**w, "axes": {**w["axes"], "total_q": 10**6}}, DATA)
    assert family == "mla_paged_prefill" and "cached tokens" in case.params["unmapped"]
