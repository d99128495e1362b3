"""Records that stay true when a foreign kernel misbehaves (issue: crashes, hangs, running out of
memory, runs that end early), each behaviour driven by a purpose-built implementation of
tests/planted.py through a real pytest run."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from attnsuite.records import read_records, read_run_status
from tests.conftest import ROOT

DECODE = "cases/decode.py"
ONE = "cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"
PLANTED = "decode=tests.planted:"


def test_dead_workers_are_recorded_as_crashes_until_the_restart_budget_then_the_rest_as_not_run(run_suite):
    # An implementation that aborts on every call (as a failed assertion in a driver does), one
    # worker, restart budget 1: two crashes, then the rest not run. No test path on the command
    # line: the worker that replaces a crashed one must still find the suite's options once
    # --records-dir names a directory that exists (options.py, joined_option_values).
    run = run_suite("-n", "1", "--max-worker-restart", "1",
                    "-k", "decode and S17 and fp16 and not paged and not sparse and not magicpig",
                    "--impl", PLANTED + "decode_aborts")
    outcomes = [r["outcome"] for r in run.records]
    assert set(outcomes) == {"crash", "not_run"} and outcomes.count("crash") >= 2, run.output[-3000:]
    assert len(run.records) == len({r["case_id"] for r in run.records})
    assert all(r["params"].get("S") == 17 for r in run.records)
    (status,) = read_run_status([run.report.parent / "records"])
    assert status["collected"] == len(run.records) and status["not_run"] == outcomes.count("not_run")
    assert "restart budget (1)" in status["not_run_reason"]
    assert all("restart budget" in r["message"] for r in run.records if r["outcome"] == "not_run")
    crashes = [r for r in run.records if r["outcome"] == "crash"]
    for rec in crashes:
        assert rec["impl"] == "tests.planted:decode_aborts"
        assert rec["env"]["torch"] and rec["env"]["triton"] and rec["elapsed_s"] is not None and rec["elapsed_s"] >= 0
        assert "--impl decode=tests.planted:decode_aborts" in rec["repro"] and "--case-timeout" in rec["repro"]
        # The dead worker's fault dump, not the terminal, holds the stack.
        assert "Fatal Python error: Aborted" in rec["message"] and "decode_aborts" in rec["message"]
    assert run.report.exists()
    # A crash's repro command, run as it stands (under xdist so the crash is a record, not a dead
    # run; no restart after it), gives the same outcome.
    cmd = crashes[0]["repro"].removeprefix("pytest ").replace("'", "").split()
    again = run_suite(*cmd, "-n", "1", "--max-worker-restart", "0")
    assert [r["outcome"] for r in again.records] == ["crash"], again.output[-3000:]


def test_a_case_stuck_in_native_code_is_ended_by_the_watchdog_and_the_run_goes_on(run_suite):
    # Restart budget 1: no worker is started after the second (and last) case's.
    run = run_suite(DECODE, "-n", "1", "--max-worker-restart", "1", "-k", "S17 and fp16 and Hkv2",
                    "--case-timeout", "1", "--impl", PLANTED + "decode_hangs_in_native_code", timeout=300)
    assert len(run.records) >= 2, run.output[-2000:]
    assert {r["outcome"] for r in run.records} == {"timeout"}
    assert all("watchdog" in r["message"] and r["impl"] == "tests.planted:decode_hangs_in_native_code"
               for r in run.records)


def test_out_of_memory_is_its_own_outcome_with_its_stage_never_a_failure(run_suite):
    run = run_suite(ONE, "--impl", PLANTED + "decode_out_of_memory")
    (rec,) = run.records
    assert rec["outcome"] == "oom" and rec["stage"] == "first_call" and "out of memory" in rec["message"]
    assert run.returncode == 0


BUFFER_BUGS = {"decode_ignores_out": "ignored the caller's buffer",
               "decode_copies_out": "not that buffer or a view of it",
               "decode_never_writes": "never wrote"}


def test_the_buffer_contract_is_checked(run_suite):
    # The three implementations side by side in one run (each gets its own inputs and buffers):
    # one interpreter start instead of three.
    ids = [f"{ONE}@tests.planted:{name}" for name in BUFFER_BUGS]  # a case's id names its impl when several run
    run = run_suite(*ids, *(arg for name in BUFFER_BUGS for arg in ("--impl", PLANTED + name)))
    by_impl = {r["impl"]: r for r in run.records}
    assert len(run.records) == len(by_impl) == len(BUFFER_BUGS), run.output[-2000:]
    for impl, why in BUFFER_BUGS.items():
        rec = by_impl["tests.planted:" + impl]
        assert rec["outcome"] == "fail" and why in rec["message"], (impl, rec["message"])
        assert rec["stage"] == ("numeric" if impl == "decode_never_writes" else "contract"), impl


def _default_signal_state():
    """The run under test starts as a shell would start it: no signal blocked, SIGINT and
    SIGTERM at their defaults, whatever this test process inherited or changed (two runs of the
    whole test suite here saw the child ignore SIGINT; it never did when run alone)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def _interrupted_run(tmp_path, sig, *, delivery, xdist_args=()):
    """A run stopped by ``sig`` once a case hangs. ``delivery``: "group" (a terminal's Ctrl-C
    reaches every process of the job) or "timeout" (what ``timeout(1)`` does: the command first,
    then its whole process group, so the command gets the signal twice)."""
    records, report, started = tmp_path / "records", tmp_path / "index.html", tmp_path / "started"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATTN_PLANTED_STARTED": str(started)}
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", DECODE, "-k", "S17",
                             "--records-dir", str(records), "--report-html", str(report), *xdist_args,
                             "--impl", PLANTED + "decode_hangs", "--case-timeout", "120"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_default_signal_state, start_new_session=True)
    deadline = time.monotonic() + 240
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    if delivery == "timeout":
        proc.send_signal(sig)
    os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=120)
    return out, records, report


@pytest.mark.parametrize("sig,name,delivery,xdist_args", [
    (signal.SIGINT, "SIGINT", "group", ()),
    (signal.SIGTERM, "SIGTERM", "timeout", ("-n", "1"))], ids=["SIGINT-ctrl-c", "SIGTERM-timeout-xdist"])
def test_a_run_that_ends_early_stops_quietly_and_still_writes_its_report_with_a_banner(tmp_path, sig, name,
                                                                                         delivery, xdist_args):
    out, records, report = _interrupted_run(tmp_path, sig, delivery=delivery, xdist_args=xdist_args)
    (status,) = read_run_status([records])
    assert status["interrupted"] == name, out[-2000:]
    recs = read_records([records])
    assert recs and {r["outcome"] for r in recs} <= {"not_run", "fail", "timeout"}
    assert status["collected"] == len(recs) and status["not_run"] >= 1
    assert report.exists() and f"INTERRUPTED ({name})" in out
    # The summary and the one-line banner, and no traceback: not even when the signal comes twice.
    assert "decode " in out and f"records: {records}" in out and f"Interrupted: {name}" in out, out[-2000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]


def test_read_records_keeps_what_it_can_and_says_what_it_skipped(tmp_path):
    good = {"schema": 2, "case_id": "decode[a]", "family": "decode", "device": "cpu", "outcome": "crash",
            "impl": None, "params": "odd", "finished_at": 5}
    lines = [json.dumps(good), "{torn", json.dumps({"schema": 2, "family": "decode"}), json.dumps([1, 2]),
             json.dumps({**good, "schema": 99})]
    (tmp_path / "x.jsonl").write_text("\n".join(lines))
    skipped = []
    (rec,) = read_records([tmp_path], skipped)
    assert rec["impl"] == "unknown" and rec["params"] == {} and rec["finished_at"] == "5"
    assert len(skipped) == 4 and all("x.jsonl:" in s for s in skipped)


def test_a_stop_signal_delivered_twice_is_one_stop_and_a_later_one_exits_at_once(monkeypatch):
    from attnsuite import stop

    class Account:
        interrupted = None

    exits = []
    monkeypatch.setattr(stop.os, "_exit", exits.append)
    clock = iter([100.0, 101.0, 100.0 + stop.REPEAT_WINDOW_S + 1])
    quiet = stop.QuietStop(Account(), clock=lambda: next(clock))
    with pytest.raises(pytest.Session.Interrupted, match="SIGTERM"):
        quiet(signal.SIGTERM, None)
    assert quiet.account.interrupted == "SIGTERM"
    quiet(signal.SIGTERM, None)  # the same stop again (timeout(1) signals process and group): ignored
    assert exits == []
    quiet(signal.SIGINT, None)  # asked again, later: now
    assert exits == [128 + signal.SIGINT]
