"""FlashInfer-Trace interop (attnsuite/flashinfer_trace): Definition/Workload files of our own
making in their schema (tests/data/flashinfer_trace) in as cases, the cases run on cpu, their
results out as traces, validated against the schema transcribed from flashinfer-bench's models."""
from __future__ import annotations

import json
import math
import os
import shutil
import textwrap

import pytest
import torch

from attnsuite.flashinfer_trace import schema, traces, workloads
from attnsuite.flashinfer_trace.safetensors_index import MissingExtra, SafetensorsError, read_tensor
from tests.conftest import ROOT
from tests.flashinfer_trace_blob import BLOB, DEC_ST_1, safetensors_bytes

DATA = ROOT / "tests" / "data" / "flashinfer_trace"
DEC = "gqa_paged_decode_h4_kv2_d64_ps16"
RAG = "gqa_ragged_prefill_causal_h4_kv2_d64"


def _definition(name: str) -> dict:
    return json.loads(next(DATA.rglob(f"definitions/**/{name}.json")).read_text())


def _workload(definition: str, uuid: str) -> dict:
    for line in next(DATA.rglob(f"workloads/**/{definition}.jsonl")).read_text().splitlines():
        entry = json.loads(line)
        if entry["workload"]["uuid"] == uuid:
            return entry["workload"]
    raise KeyError(uuid)


def by_uuid() -> dict:
    loaded = workloads.load(str(DATA))
    return {c.params["fi"]["workload"]["uuid"]: c for cs in loaded.cases.values() for c in cs}


# -- the test data is valid in their schema ---------------------------------------------------------

def test_every_test_definition_and_workload_is_valid_in_the_schema():
    definitions = sorted(DATA.rglob("definitions/**/*.json"))
    assert len(definitions) == 4
    for path in definitions:
        assert schema.validate_definition(json.loads(path.read_text())) == [], path
    for path in DATA.rglob("workloads/**/*.jsonl"):
        for line in path.read_text().splitlines():
            assert schema.validate_trace(json.loads(line)) == [], (path, line[:80])


@pytest.mark.parametrize("mutate, problem", [
    (lambda t: t["evaluation"].update(status="SKIPPED"), "status: 'SKIPPED' not one of"),
    (lambda t: t["evaluation"].pop("performance"), "performance must be present when status is PASSED"),
    (lambda t: t["evaluation"].update(status="INCORRECT_NUMERICAL"),
     "performance must be absent when status is INCORRECT_NUMERICAL"),
    (lambda t: t["evaluation"].update(status="RUNTIME_ERROR"), "correctness must be absent"),
    (lambda t: t["evaluation"]["correctness"].update(max_absolute_error=-1.0), "must be >= 0"),
    (lambda t: t["evaluation"]["performance"].update(latency_ms=math.inf), "must be finite"),
    (lambda t: t["evaluation"]["environment"].pop("hardware"), "missing field 'hardware'"),
    (lambda t: t["evaluation"]["environment"].update(libs={"torch": 2}), "libs: must map names"),
    (lambda t: t["workload"].pop("uuid"), "missing field 'uuid'"),
    (lambda t: t["workload"]["inputs"].update(sm_scale={"type": "scalar"}), "missing field 'value'"),
    (lambda t: t["workload"]["axes"].update(batch_size=-1), "non-negative integer"),
    (lambda t: t.update(evaluations=[]), "unknown field 'evaluations'"),
    (lambda t: t["evaluation"].update(timestamp=""), "timestamp: must be a non-empty string"),
])
def test_the_validator_finds_each_rule_of_their_trace_model(mutate, problem):
    trace = json.loads(next(line for line in (DATA / "workloads" / "gqa_paged" / f"{DEC}.jsonl").read_text()
                            .splitlines() if '"evaluation": {' in line))
    assert schema.validate_trace(trace) == []
    mutate(trace)
    found = schema.validate_trace(trace)
    assert any(problem in p for p in found), found


@pytest.mark.parametrize("mutate, problem", [
    (lambda d: d["inputs"]["q"].update(dtype="half"), "dtype 'half' not one of"),
    (lambda d: d["inputs"]["q"].update(shape=["batch_size", "heads"]), "undefined axis 'heads'"),
    (lambda d: d["axes"].update(page_size={"type": "const"}), "non-negative integer value"),
    (lambda d: d.update(reference="def apply(q):\n    return q\n"), "function 'run'"),
    (lambda d: d["outputs"].update(q=d["inputs"]["q"]), "input and output names overlap"),
    (lambda d: d.pop("op_type"), "missing field 'op_type'"),
])
def test_the_validator_finds_each_rule_of_their_definition_model(mutate, problem):
    d = _definition(DEC)
    mutate(d)
    assert any(problem in p for p in schema.validate_definition(d))


# -- workloads in ---------------------------------------------------------------------------------

def test_workloads_map_to_our_families_with_their_scale_shapes_and_page_tables():
    loaded = workloads.load(str(DATA))
    cases = by_uuid()
    assert set(cases) == {"dec-rand-1", "dec-st-1", "dec-missing-blob", "pp-1", "rag-rand-1", "rag-prefix"}
    assert "result-line" not in cases  # a line with an evaluation is a result, not a workload
    assert loaded.ignored == ["rmsnorm"] and loaded.problems == []

    st = cases["dec-st-1"]
    assert st.id == f"paged_decode[fi-{DEC}-dec-st-1]" and "workload" in st.tags
    p = st.params
    # The stored page table, exactly: page 3 shared by sequences 0 and 2, an empty sequence.
    assert (p["placement"], p["pages"], p["pool"], p["lengths"]) == ("given", (3, 7, 1, 4, 3), 8, (25, 0, 48))
    assert (p["Hq"], p["Hkv"], p["D"], p["P"], p["layout"], p["dtype"], p["lse"], p["scale"]) == \
        (4, 2, 64, 16, "NHD", "fp16", True, 0.125)

    rand = cases["dec-rand-1"].params
    assert rand["scale"] == 0.1 and rand["placement"] == "scattered" and rand["pool"] == 20
    pages = [math.ceil(n / 16) for n in rand["lengths"]]
    assert len(rand["lengths"]) == 3 and sum(pages) == 7 and min(pages) >= 1

    rag = cases["rag-rand-1"].params
    assert cases["rag-rand-1"].family == "prefill_varlen"
    assert (rag["layout"], rag["causal"], rag["scale"], sum(rag["lengths"]), len(rag["lengths"])) == \
        ("packed", True, 0.09, 40, 3)


def test_generated_page_tables_and_lengths_depend_on_the_workload_alone():
    d = _definition(DEC)
    w = _workload(DEC, "dec-rand-1")
    once = workloads.to_case(d, w, DATA)[1].params
    again = workloads.to_case(d, json.loads(json.dumps(w)), DATA)[1].params
    other = workloads.to_case(d, {**w, "uuid": "another-uuid"}, DATA)[1].params
    assert once["lengths"] == again["lengths"]
    assert sum(math.ceil(n / 16) for n in other["lengths"]) == 7


@pytest.mark.parametrize("uuid, reason", [
    ("dec-missing-blob", "kv_indptr: "),
    ("pp-1", "gqa_paged prefill: no family of this suite runs queries over a paged cache"),
    ("rag-prefix", "total_q 10 != total_kv 30"),
])
def test_workloads_that_do_not_map_skip_with_the_reason(uuid, reason):
    case = by_uuid()[uuid]
    assert reason in case.params["unmapped"]
    assert workloads.unmapped_reason(case).startswith("FlashInfer-Trace workload not mapped")


@pytest.mark.parametrize("change, reason", [
    (lambda d, w: d["inputs"]["q"].update(dtype="float8_e4m3fn"), "have different dtypes"),
    (lambda d, w: [d["inputs"][n].update(dtype="float8_e4m3fn") for n in ("q", "k_cache", "v_cache")],
     "dtype float8_e4m3fn"),
    (lambda d, w: d["axes"]["num_qo_heads"].update(value=5), "not a multiple of num_kv_heads"),
    (lambda d, w: w["inputs"].update(sm_scale={"type": "random"}), "sm_scale is a random input"),
    (lambda d, w: w["axes"].pop("num_kv_indices"), "no value for axis 'num_kv_indices'"),
])
def test_each_unmappable_class_of_decode_workload_says_why(change, reason):
    d, w = _definition(DEC), json.loads(json.dumps(_workload(DEC, "dec-rand-1")))
    change(d, w)
    family, case = workloads.to_case(d, w, DATA)
    assert family == "paged_decode" and reason in case.params["unmapped"]


def test_a_stored_page_table_that_is_no_page_table_is_not_mapped(tmp_path):
    d, w = _definition(DEC), _workload(DEC, "dec-st-1")
    for bad, reason in (({**DEC_ST_1, "kv_indices": torch.tensor([3, 7, 1, 4, 9], dtype=torch.int32)},
                         "kv_indices outside [0, num_pages=8)"),
                        ({**DEC_ST_1, "kv_last_page_len": torch.tensor([17, 0, 16], dtype=torch.int32)},
                         "kv_last_page_len outside 1..page_size=16"),
                        ({**DEC_ST_1, "kv_indptr": torch.tensor([0, 2, 6], dtype=torch.int32)}, "no CSR offset"),
                        ({k: v for k, v in DEC_ST_1.items() if k != "kv_indices"}, "kv_indices: ")):
        blob = tmp_path / BLOB
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(safetensors_bytes(bad))
        assert reason in workloads.to_case(d, w, tmp_path)[1].params["unmapped"]
    # A table half stored is no table: the other half is not drawn in its place.
    half = {**w, "inputs": {**w["inputs"], "kv_indices": {"type": "random"}}}
    blob.write_bytes(safetensors_bytes(DEC_ST_1))
    assert "only one of kv_indptr / kv_indices" in workloads.to_case(d, half, tmp_path)[1].params["unmapped"]


def test_stored_ragged_offsets_give_the_lengths_when_q_and_kv_pair_up(tmp_path):
    d = _definition(RAG)
    blob = tmp_path / "rag.safetensors"
    ref = {"type": "safetensors", "path": "rag.safetensors"}
    w = {"uuid": "rag-st", "axes": {"total_q": 12, "total_kv": 12, "len_indptr": 4},
         "inputs": {"q": {"type": "random"}, "k": {"type": "random"}, "v": {"type": "random"},
                    "qo_indptr": {**ref, "tensor_key": "qo_indptr"}, "kv_indptr": {**ref, "tensor_key": "kv_indptr"},
                    "sm_scale": {"type": "scalar", "value": 0.2}}}
    offsets = torch.tensor([0, 5, 5, 12], dtype=torch.int32)
    blob.write_bytes(safetensors_bytes({"qo_indptr": offsets, "kv_indptr": offsets}))
    params = workloads.to_case(d, w, tmp_path)[1].params
    assert (params["lengths"], params["S"], params["scale"]) == ((5, 0, 7), 7, 0.2)
    blob.write_bytes(safetensors_bytes({"qo_indptr": offsets, "kv_indptr": offsets * 2}))
    assert "q and kv lengths differ" in workloads.to_case(d, w, tmp_path)[1].params["unmapped"]


def test_a_definition_without_last_page_lengths_means_full_pages():
    d = _definition(DEC)
    del d["inputs"]["kv_last_page_len"]
    w = {**_workload(DEC, "dec-rand-1")}
    w["inputs"] = {k: v for k, v in w["inputs"].items() if k != "kv_last_page_len"}
    lengths = workloads.to_case(d, w, DATA)[1].params["lengths"]
    assert all(n % 16 == 0 for n in lengths) and sum(lengths) == 7 * 16


def test_safetensors_reader_reads_stored_tensors_of_any_dtype(tmp_path):
    blob = DATA / BLOB
    for key, want in DEC_ST_1.items():
        got = read_tensor(blob, key)
        assert got.dtype == want.dtype and torch.equal(got, want)
    with pytest.raises(SafetensorsError, match="no tensor 'q'"):
        read_tensor(blob, "q")
    # Float inputs a workload may store (q, k, v, a scale), written by hand from the format.
    floats = {"q": torch.randn(2, 3, dtype=torch.float16), "k": torch.randn(4, dtype=torch.bfloat16),
              "s": torch.tensor([0.125, -2.5], dtype=torch.float32), "m": torch.tensor([True, False])}
    other = tmp_path / "f.safetensors"
    other.write_bytes(safetensors_bytes(floats))
    for key, want in floats.items():
        got = read_tensor(other, key)
        assert got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
    with pytest.raises(SafetensorsError, match="no such file"):
        read_tensor(tmp_path / "nowhere.safetensors", "q")
    other.write_bytes(safetensors_bytes(floats)[:20])
    with pytest.raises(SafetensorsError, match="not a readable safetensors file"):
        read_tensor(other, "q")


def test_safetensors_reader_reads_what_the_package_writes(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    path = tmp_path / "t.safetensors"
    tensors = {"a": torch.arange(7, dtype=torch.int64), "b": torch.tensor([[1, -2], [3, 4]], dtype=torch.int32),
               "c": torch.randn(3, 5, dtype=torch.float32), "d": torch.randn(2, 2, dtype=torch.bfloat16)}
    st.save_file(tensors, str(path))
    assert all(torch.equal(read_tensor(path, k), v) for k, v in tensors.items())


def test_a_page_table_stored_as_floats_is_not_mapped(tmp_path):
    d, w = _definition(DEC), _workload(DEC, "dec-st-1")
    blob = tmp_path / BLOB
    blob.parent.mkdir(parents=True)
    blob.write_bytes(safetensors_bytes({**DEC_ST_1, "kv_indices": DEC_ST_1["kv_indices"].float()}))
    assert "kv_indices: stored as float32, not integers" in workloads.to_case(d, w, tmp_path)[1].params["unmapped"]


def test_without_the_package_the_trace_options_name_the_extra(monkeypatch, tmp_path):
    import sys

    from attnsuite import options

    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors -> ImportError
    with pytest.raises(MissingExtra, match=r"needs the safetensors package .*pip install 'attnsuite\[trace\]'"):
        read_tensor(DATA / BLOB, "kv_indptr")

    class Config:
        def getoption(self, name):
            return str(tmp_path)

    for name, flag in (("workloads", "--workloads"), ("trace_out", "--trace-out")):
        with pytest.raises(options.OptionError, match=rf"^{flag} needs the safetensors package.*'trace' extra"):
            options._path_option(Config(), name)


# -- traces out -----------------------------------------------------------------------------------

def _record(**kw) -> dict:
    rec = {"mode": "numeric", "outcome": "pass", "stage": None, "message": None, "family": "paged_decode",
           "impl": "triton", "case_id": "c", "device": "cpu", "env": {"device_name": "cpu x", "torch": "2"},
           "finished_at": "2026-01-01T00:00:00+00:00", "metrics": {"o": {"max_abs_err": 1e-3, "max_rel_err": 0.5}},
           "params": {"fi": {"definition": DEC, "op_type": "gqa_paged", "workload": _workload(DEC, "dec-rand-1")}}}
    rec.update(kw)
    return rec


@pytest.mark.parametrize("outcome, stage, message, status", [
    ("pass", None, None, "PASSED"),
    ("xpass", None, None, "PASSED"),
    ("fail", "numeric", "o: max abs err 1e-2 > allowed", "INCORRECT_NUMERICAL"),
    ("xfail", "numeric", "o: max abs err 1e-2 > allowed", "INCORRECT_NUMERICAL"),
    ("fail", "numeric", "o: shape [2, 4] != reference shape [2, 8]", "INCORRECT_SHAPE"),
    ("fail", "compile", "CompilationError", "COMPILE_ERROR"),
    ("fail", "launch", "RuntimeError", "RUNTIME_ERROR"),
    ("fail", "validate", "ValueError: q", "RUNTIME_ERROR"),
    ("fail", "contract", "buffer contract: o", "RUNTIME_ERROR"),
    ("crash", None, "worker died", "RUNTIME_ERROR"),
    ("timeout", None, "timeout", "TIMEOUT"),
    ("skip", None, "does not support", None),
    ("oom", "impl", "out of memory", None),
    ("not_run", None, None, None),
    ("fail", "reference", "the reference raised", None),
    ("fail", "inputs", "could not build", None),
])
def test_record_outcomes_map_to_their_status_names(outcome, stage, message, status):
    rec = _record(outcome=outcome, stage=stage, message=message)
    assert traces.status_of(rec) == status
    trace = traces.trace_of(rec, None)
    assert (trace is None) == (status is None)
    if trace is not None:
        assert trace["evaluation"]["status"] == status and schema.validate_trace(trace) == []


def test_compile_only_records_are_not_traced():
    assert traces.status_of(_record(mode="compile")) is None


def test_performance_comes_from_the_benchmark_record_of_the_same_case():
    bench = {"kernel": {"device": {"median_ms": 0.02}},
             "baselines": {"reference": {"device": {"median_ms": 0.5}}}}
    trace = traces.trace_of(_record(), {"bench": bench})
    assert trace["evaluation"]["performance"] == {"latency_ms": 0.02, "reference_latency_ms": 0.5,
                                                  "speedup_factor": pytest.approx(25.0)}
    # Only what was measured: no benchmark, no figures; no reference time, no speedup.
    untimed = traces.trace_of(_record(), None)
    assert untimed["evaluation"]["performance"] == {} and "not timed" in untimed["evaluation"]["log"]
    assert schema.validate_trace(untimed) == []
    alone = traces.trace_of(_record(), {"bench": {"kernel": {"device": {"median_ms": 0.02}}}})
    assert alone["evaluation"]["performance"] == {"latency_ms": 0.02} and schema.validate_trace(alone) == []


def test_non_finite_errors_are_written_as_their_strings():
    rec = _record(outcome="fail", stage="numeric", message="o: 3 non-finite value(s) (NaN)",
                  metrics={"o": {"max_abs_err": math.inf, "max_rel_err": math.inf}})
    trace = traces.trace_of(rec, None)
    json.dumps(trace, allow_nan=False)
    assert trace["evaluation"]["correctness"]["max_absolute_error"] == "Infinity"
    assert schema.validate_trace(trace) == []


# -- the round trip, through real runs -------------------------------------------------------------

WRONG_SCALE = textwrap.dedent('''
    from kernels.paged_decode import paged_decode as _ours


    def paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND",
                     scale=None, return_lse=False, out=None, lse=None):
        # a planted bug: the softmax scale is dropped (1/sqrt(D) always)
        return _ours(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout=layout,
                     return_lse=return_lse, out=out, lse=lse)
''')


def _read_traces(out) -> dict[str, dict]:
    found = {}
    for path in (out / "traces").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            trace = json.loads(line)  # strict JSON: no bare NaN or Infinity
            assert schema.validate_trace(trace) == [], trace
            assert path.stem == trace["definition"] and path.parent.name == _definition(trace["definition"])["op_type"]
            found[trace["workload"]["uuid"]] = trace
    return found


def test_round_trip_workloads_in_cases_run_traces_out(run_suite, tmp_path):
    data = tmp_path / "dataset"
    shutil.copytree(DATA, data)
    out = tmp_path / "out"
    run = run_suite("cases", "-m", "workload", f"--workloads={data}", f"--trace-out={out}")
    assert run.returncode == 0, run.output[-3000:]
    outcomes = run.outcomes()
    assert outcomes == {f"paged_decode[fi-{DEC}-dec-rand-1]": "pass", f"paged_decode[fi-{DEC}-dec-st-1]": "pass",
                        f"paged_decode[fi-{DEC}-dec-missing-blob]": "skip",
                        "prefill_varlen[fi-gqa_paged_prefill_causal_h4_kv2_d64_ps16-pp-1]": "skip",
                        f"prefill_varlen[fi-{RAG}-rag-rand-1]": "pass", f"prefill_varlen[fi-{RAG}-rag-prefix]": "skip"}
    by_case = run.by_case()
    assert by_case[f"paged_decode[fi-{DEC}-dec-rand-1]"]["params"]["scale"] == 0.1
    assert "FlashInfer-Trace: 3 traces for 2 definitions" in run.output

    found = _read_traces(out)
    assert set(found) == {"dec-rand-1", "dec-st-1", "rag-rand-1"}
    for uuid, trace in found.items():
        assert trace["workload"] == _workload(trace["definition"], uuid)
        ev = trace["evaluation"]
        assert ev["status"] == "PASSED" and trace["solution"].startswith("attnsuite:")
        assert 0 < ev["correctness"]["max_absolute_error"] < 1e-2
        assert ev["performance"] == {}  # a conformance run measures no time: no figures, not zeros
        assert ev["environment"]["libs"]["torch"] == torch.__version__
    # The definitions travel with the traces, so DIR loads as a dataset.
    assert json.loads((out / "definitions" / "gqa_paged" / f"{DEC}.json").read_text()) == _definition(DEC)
    # The same traces again from the stored records alone.
    assert traces.main([str(tmp_path / "again"), str(run.report.parent / "records")]) == 0
    assert _read_traces(tmp_path / "again") == found


def test_a_workloads_option_that_is_no_directory_is_a_usage_error(run_suite, tmp_path):
    run = run_suite("cases/paged_decode.py", f"--workloads={tmp_path / 'nowhere'}")
    assert run.returncode == 4 and "--workloads" in run.output and "not a directory" in run.output


def _collected(*args: str) -> list[str]:
    from tests.processes import run_python

    out = run_python(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                     cwd=ROOT, env=dict(os.environ), timeout=300)
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_workload_cases_come_beside_the_catalog_not_instead():
    plain = _collected("cases/paged_decode.py")
    more = _collected("cases/paged_decode.py", f"--workloads={DATA}")
    assert set(plain) < set(more)
    assert sorted(set(more) - set(plain)) == [f"cases/paged_decode.py::paged_decode[fi-{DEC}-{u}]"
                                              for u in ("dec-missing-blob", "dec-rand-1", "dec-st-1")]


def test_mapped_workloads_are_benchmark_cases_too():
    from tests.processes import run_python

    out = run_python(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                      "benchmarks", "-m", "workload", f"--workloads={DATA}"],
                     cwd=ROOT, env=dict(os.environ), timeout=300)
    ids = sorted(line.split("[", 1)[1] for line in out.stdout.splitlines() if "::test_bench[" in line)
    assert ids == [f"paged_decode[fi-{DEC}-dec-rand-1]]", f"paged_decode[fi-{DEC}-dec-st-1]]",
                   f"prefill_varlen[fi-{RAG}-rag-rand-1]]"], out.stdout[-2000:]


def test_a_planted_bug_the_workloads_scale_exposes_becomes_incorrect_numerical(run_suite, tmp_path):
    (tmp_path / "wrong_scale.py").write_text(WRONG_SCALE)
    out = tmp_path / "out"
    run = run_suite("cases/paged_decode.py", "-m", "workload", f"--workloads={DATA}", f"--trace-out={out}",
                    "--impl", "paged_decode=wrong_scale:paged_decode",
                    env={"PYTHONPATH": f"{ROOT}:{tmp_path}"})
    assert run.returncode == 1, run.output[-3000:]
    found = _read_traces(out)
    # sm_scale 0.1 is not 1/sqrt(64); dec-st-1's 0.125 is, so dropping it goes unseen there.
    assert found["dec-rand-1"]["evaluation"]["status"] == "INCORRECT_NUMERICAL"
    assert "performance" not in found["dec-rand-1"]["evaluation"]
    assert found["dec-rand-1"]["evaluation"]["correctness"]["max_absolute_error"] > 1e-2
    assert found["dec-st-1"]["evaluation"]["status"] == "PASSED"
    assert found["dec-rand-1"]["solution"] == "attnsuite:paged_decode:wrong_scale:paged_decode"
