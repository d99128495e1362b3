"""Workers that share no filesystem with the controller, the way workers on other hosts do: two
execnet gateways (``--tx popen//chdir=...``), each in its own checkout, under a relative
--records-dir. Their records reach the controller over xdist's channel (attnsuite/transport.py)."""
import os

from attnsuite.records import read_records, read_run_status
from attnsuite.transport import CACHE_DIR
from tests.conftest import ROOT
from tests.processes import run_python

SELECT = "decode and S17 and fp16 and not paged and not sparse and not magicpig"


def _checkout(path):
    """A checkout of the project at ``path`` (links to this one's files: what matters is that it
    is another directory, as another host's checkout would be)."""
    path.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("reports", ".git", ".tox") and not entry.name.startswith("."):
            (path / entry.name).symlink_to(entry)
    return path


def test_workers_in_other_directories_send_their_records_and_the_controller_writes_one_report(tmp_path):
    controller, a, b = (_checkout(tmp_path / name) for name in ("controller", "A", "B"))
    # Cases are chosen with -k: xdist maps path arguments onto rsync roots for such gateways.
    # The controller is forked from the tests' forkserver (tests/processes.py); its two gateways
    # are fresh interpreters, as another host's would be.
    proc = run_python(
        ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--tx", f"popen//chdir={a}",
         "--tx", f"popen//chdir={b}", "--dist", "load", "-k", SELECT,
         "--records-dir", "records", "--report-html", "index.html"],
        cwd=controller, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    records = read_records([controller / "records"])
    (status,) = read_run_status([controller / "records"])
    assert len(records) == status["collected"] == status["recorded"] >= 3 and status["not_run"] == 0, out[-3000:]
    assert {r["outcome"] for r in records} == {"pass"}
    assert {r["worker"] for r in records} == {"gw0", "gw1"}  # both gateways ran cases
    # The summary and the report are the controller's, over every case.
    assert "decode " in out and f"{len(records)} pass" in out
    html = (controller / "index.html").read_text()
    assert all(r["case_id"] in html for r in records)
    # A worker's own records directory holds a cache of what it sent, never records of the run.
    for checkout, worker in ((a, "gw0"), (b, "gw1")):
        assert not list((checkout / "records").glob("*.jsonl"))
        cached = (checkout / "records" / CACHE_DIR / f"{worker}.records").read_text().splitlines()
        assert len(cached) == sum(r["worker"] == worker for r in records)


def test_a_record_rides_on_its_report_through_pytests_serialisation(tmp_path):
    """What xdist does to a report between a worker and the controller: pytest's own
    serialisation and back. The record arrives whole; a report without one carries none."""
    import pytest
    from _pytest.reports import TestReport

    from attnsuite.transport import ControllerWriters, attach, carried

    rec = {"schema": 2, "case_id": "decode[x]", "family": "decode", "device": "cuda", "outcome": "pass",
           "nodeid": "cases/decode.py::decode[x]", "worker": "gw3", "headroom": float("inf"), "params": {"S": 17}}
    report = pytest.TestReport("cases/decode.py::decode[x]", ("cases/decode.py", 1, "x"), {}, "passed", None,
                               "teardown")
    attach(report, rec)
    arrived = TestReport._from_json(report._to_json())
    assert carried(arrived) == rec
    assert carried(TestReport._from_json(pytest.TestReport("n", ("f", 1, "n"), {}, "passed", None,
                                                           "teardown")._to_json())) is None
    report.attnsuite_record = "{torn"
    assert carried(report) is None
    writers = ControllerWriters(tmp_path)
    writers("gw3").write(rec)
    writers.close()
    assert read_records([tmp_path])[0]["worker"] == "gw3" and (tmp_path / "gw3.jsonl").exists()
