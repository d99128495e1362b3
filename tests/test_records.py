"""Record writing, reading back, merging, and outcome classification."""
import json
import math
from types import SimpleNamespace

import pytest

from attnsuite import outcome
from attnsuite.records import RecordWriter, build_record, merge_latest, read_records


def rec(case_id, device="cpu", finished_at="2026-01-01T00:00:00", outcome="pass", **extra):
    return {"schema": 1, "case_id": case_id, "family": case_id.split("[")[0], "device": device,
            "impl": "triton", "outcome": outcome, "finished_at": finished_at, **extra}


def test_writer_flushes_each_record_so_a_reader_sees_it_at_once(tmp_path):
    w = RecordWriter(tmp_path, "gw0")
    w.write(rec("prefill[a]"))
    # Read while the writer still holds the file open: a killed run keeps what it finished.
    assert [r["case_id"] for r in read_records([tmp_path])] == ["prefill[a]"]
    w.write(rec("prefill[b]", headroom=math.inf))
    w.close()
    back = read_records([tmp_path / "gw0.jsonl"])
    assert [r["case_id"] for r in back] == ["prefill[a]", "prefill[b]"]
    assert math.isinf(back[1]["headroom"])


def test_each_writer_has_its_own_file(tmp_path):
    for worker in ("gw0", "gw1", "controller"):
        w = RecordWriter(tmp_path, worker)
        w.write(rec(f"decode[{worker}]"))
        w.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["controller.jsonl", "gw0.jsonl", "gw1.jsonl"]
    assert len(read_records([tmp_path])) == 3


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "gw0.jsonl"
    path.write_text(json.dumps(rec("prefill[a]")) + "\n" + '{"schema": 1, "case_id": "pre')
    assert [r["case_id"] for r in read_records([tmp_path])] == ["prefill[a]"]


def test_missing_path_is_an_error(tmp_path):
    import pytest

    with pytest.raises(FileNotFoundError):
        read_records([tmp_path / "nope"])


def test_merge_keeps_latest_per_case_impl_device():
    old = rec("prefill[a]", finished_at="2026-01-01T00:00:00", outcome="fail")
    new = rec("prefill[a]", finished_at="2026-01-02T00:00:00", outcome="pass")
    cuda = rec("prefill[a]", device="cuda", outcome="fail")
    untimed = rec("prefill[b]", finished_at=None)
    merged = merge_latest([new, old, cuda, untimed])
    assert {(r["case_id"], r["device"]): r["outcome"] for r in merged} == {
        ("prefill[a]", "cpu"): "pass", ("prefill[a]", "cuda"): "fail", ("prefill[b]", "cpu"): "pass"}


def report(when, outcome_, longrepr=None, **attrs):
    return SimpleNamespace(when=when, outcome=outcome_, passed=outcome_ == "passed",
                           failed=outcome_ == "failed", skipped=outcome_ == "skipped",
                           longrepr=longrepr, user_properties=[], duration=0.5, **attrs)


def classify(**phases):
    return outcome.classify({k: v for k, v in phases.items()})


def test_classify_every_outcome():
    ok = report("setup", "passed")
    td = report("teardown", "passed")
    assert classify(setup=ok, call=report("call", "passed"), teardown=td)[0] == "pass"
    failed = report("call", "failed", "AssertionError: o: max abs err")
    assert classify(setup=ok, call=failed, teardown=td)[0] == "fail"
    skipped = report("setup", "skipped", ("f.py", 1, "Skipped: needs a GPU"))
    assert classify(setup=skipped, teardown=td) == ("skip", None, "needs a GPU")
    xf = report("call", "skipped", "known failure", wasxfail="known failure x")
    assert classify(setup=ok, call=xf, teardown=td)[0] == "xfail"
    xp = report("call", "failed", "[XPASS(strict)] known failure x")
    assert classify(setup=ok, call=xp, teardown=td)[0] == "xpass"
    to = report("call", "failed", "Failed: Timeout (>2.0s) from pytest-timeout.")
    assert classify(setup=ok, call=to, teardown=td)[0] == "timeout"
    err = report("setup", "failed", "fixture exploded")
    assert classify(setup=err, teardown=td)[0] == "error"
    crash = report("???", "failed", "worker 'gw0' crashed while running 'x'")
    assert classify(**{"???": crash})[:2] == ("crash", "launch")


def test_build_record_is_a_function_of_case_impl_device_outcome_and_environment():
    from attnsuite.case import Case
    from attnsuite.result import CaseOutcome

    case = Case("prefill", "x", {"dtype": "fp16", "S": 17}, tags=frozenset({"bench"}))
    out = CaseOutcome("pass", metrics={"o": {"max_abs_err": 1e-3}}, headroom=2.0, tolerance={"factor": 2.0},
                      phases={"inputs": 0.1, "first_call": 0.4})
    run = {"run_id": "r", "nodeid": "cases/prefill.py::prefill[x]", "repro": "pytest 'x'", "duration_s": 1.0}
    args = (case, "triton", {"kind": "cpu", "index": 0}, out, ("pass", None, ""), {"torch": "2.13.0"}, run)
    r = build_record(*args)
    assert r == build_record(*args)  # pure: the same inputs, the same record
    assert r["schema"] == 2 and r["dtype"] == "fp16" and r["headroom"] == 2.0 and r["impl"] == "triton"
    assert r["metrics"]["o"]["max_abs_err"] == 1e-3 and r["duration_s"] == 1.0 and r["tags"] == ["bench"]
    assert r["phases"] == {"inputs": 0.1, "first_call": 0.4}
    assert r["env"]["torch"] == "2.13.0" and r["message"] is None and r["case_id"] == "prefill[x]"
    crash = build_record(case, "mine", {"kind": "cuda", "index": 1, "uuid": "GPU-5e1f"}, None,
                         ("crash", "launch", "died"), {}, run)
    assert crash["outcome"] == "crash" and crash["metrics"] == {} and crash["impl"] == "mine"
    assert (crash["device_index"], crash["device_uuid"], r["device_uuid"]) == (1, "GPU-5e1f", None)


def test_outcomes_are_frozen():
    import dataclasses

    from attnsuite.result import CaseOutcome

    out = CaseOutcome("fail", "numeric", "o: max abs err")
    with pytest.raises(dataclasses.FrozenInstanceError):
        out.status = "pass"
    with pytest.raises(ValueError):
        CaseOutcome("maybe")
