"""The mutation catalog proves the suite's teeth and its controls prove it has no false failures:
every family has at least five planted-bug implementations and two correct ones written apart
from the project's code (mutants/), all fitting the family's interface; the quick profile on cpu
kills every mutant and passes every control (python -m attnsuite.mutate), and the runner takes any
catalog module, counting a hung or crashing implementation without losing the others."""
import importlib
import json
import os
import sys

import pytest

from attnsuite import registry

from attnsuite.interfaces import check_impl
from attnsuite.mutate import FAMILIES, Job, catalog, catalog_family, jobs_for, load_catalog
from attnsuite.registry import family as family_of
from tests.conftest import ROOT
from tests.processes import run_python


@pytest.mark.parametrize("name", FAMILIES)
def test_five_documented_mutants_and_two_controls_that_fit_the_interface(name):
    module = importlib.import_module(f"mutants.{name}")
    family = family_of(name)
    assert catalog_family(module) == name
    assert len(module.MUTANTS) >= 5 and len(module.CONTROLS) >= 2
    for impl_name, impl in {**module.MUTANTS, **module.CONTROLS}.items():
        check_impl(family, impl_name, impl)
        assert (getattr(impl, "__doc__", None) or "").strip(), f"{impl_name} says what it is"
    assert all(doc for fam, _, doc in catalog([name])), "every mutant says what its bug is"
    assert not set(module.MUTANTS) & set(module.CONTROLS)


def _mutate(tmp_path, *args, timeout=900):
    out = tmp_path / "verdicts.json"
    # Forked from the tests' forkserver (tests/processes.py): the runner's own workers are fresh.
    proc = run_python(["-m", "attnsuite.mutate", "--json", str(out), *args], cwd=ROOT,
                      env=dict(os.environ), timeout=timeout)
    return proc, (json.loads(out.read_text()) if out.exists() else [])


@pytest.mark.profile_run
def test_the_quick_profile_on_cpu_kills_every_mutant_and_passes_every_control(tmp_path):
    proc, verdicts = _mutate(tmp_path)
    print(proc.stdout)
    survivors = [(v["family"], v["name"]) for v in verdicts if v["kind"] == "mutant" and not v["ok"]]
    failing = [(v["family"], v["name"], v["message"]) for v in verdicts if v["kind"] == "control" and not v["ok"]]
    assert not survivors and not failing, proc.stdout + proc.stderr
    assert proc.returncode == 0
    assert {v["family"] for v in verdicts} == set(FAMILIES)
    expected = {(f, n) for f in FAMILIES for n in {**load_catalog(f"mutants.{f}").MUTANTS,
                                                    **load_catalog(f"mutants.{f}").CONTROLS}}
    assert {(v["family"], v["name"]) for v in verdicts} == expected
    # A kill is a failing conformance case, not an error in the harness.
    mutants = [v for v in verdicts if v["kind"] == "mutant"]
    assert all(v["case"] and v["case"].startswith(v["family"] + "[") for v in mutants)
    assert all(v["stage"] in ("numeric", "contract", "validate", "launch", "compile") for v in mutants)
    # Controls run every case they support: more than 20, or every quick case of a smaller catalog.
    quick = {f: sum(c.profile == "quick" for c in registry.family(f).cases) for f in FAMILIES}
    assert all(v["cases_run"] > min(20, quick[v["family"]] - 1) for v in verdicts if v["kind"] == "control")


def test_any_catalog_module_hung_and_crashing_implementations_counted(tmp_path):
    proc, verdicts = _mutate(tmp_path, "--catalog", "tests.mutation_catalog", "--case-timeout", "5", "--jobs", "1")
    by_name = {v["name"]: v for v in verdicts}
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert set(by_name) == {"decode_correct", "decode_hangs", "decode_crashes", "decode_unscaled",
                            "decode_returns_zeros", "decode_sdpa"}
    assert {v["family"] for v in verdicts} == {"decode"}
    # A correct "mutant" survives; a wrong "control" fails; both make the run fail.
    assert not by_name["decode_correct"]["ok"] and by_name["decode_correct"]["cases_run"] > 20
    assert not by_name["decode_returns_zeros"]["ok"] and by_name["decode_returns_zeros"]["failures"]
    # A hang and a crash kill their mutant, and the workers that replace theirs go on.
    assert by_name["decode_hangs"]["ok"] and by_name["decode_hangs"]["stage"] == "timeout"
    assert by_name["decode_crashes"]["ok"] and by_name["decode_crashes"]["stage"] == "crash"
    assert by_name["decode_unscaled"]["ok"] and by_name["decode_sdpa"]["ok"]
    assert "SURVIVED" in proc.stdout and "FAILED" in proc.stdout


def test_fewer_catalogs_than_workers_are_split_into_shards():
    assert jobs_for([("a", "x")], 2) == [Job("a", "x", (0, 2)), Job("a", "x", (1, 2))]
    assert [j.shard for j in jobs_for([("a", None), ("b", None), ("c", None)], 2)] == [(0, 1)] * 3


#: A stand-in worker speaking the runner's protocol: job "dies" crashes inside its first case,
#: "silent" hangs in it; any other job reports one verdict. It prints its pid into each verdict.
FAKE_WORKER = r"""
import json, os, sys, time
for line in sys.stdin:
    job = json.loads(line)
    emit = lambda **e: (print(json.dumps(e)), sys.stdout.flush())
    name = job["catalog"]
    emit(event="ready")
    if name not in job["skip"]:
        emit(event="case", kind="mutant", name=name, case="c[1]", family="f")
        if name == "dies":  # its output ends a moment before it exits, as on a loaded machine
            os.close(1)
            time.sleep(0.5)
            os._exit(3)
        if name == "silent":
            time.sleep(60)
        emit(event="verdict", family="f", kind="mutant", name=name, doc="", catalog=name, ok=True,
             case="c[1]", stage="numeric", message=str(os.getpid()))
    emit(event="done")
"""


def test_a_lane_gives_its_worker_job_after_job_and_replaces_one_that_died_or_hung(monkeypatch):
    from argparse import Namespace

    import attnsuite.mutate as mutate

    monkeypatch.setattr(mutate, "_worker_command", lambda args: [sys.executable, "-c", FAKE_WORKER])
    args = Namespace(jobs=1, case_timeout=2.0)
    names = ["a", "b", "dies", "c", "silent", "d"]
    verdicts = mutate.run([(n, "f") for n in names], args)
    assert [v.name for v in verdicts] == names
    by = {v.name: v for v in verdicts}
    assert by["dies"].ok and by["dies"].stage == "crash" and "exited with 3" in by["dies"].message
    assert by["silent"].ok and by["silent"].stage == "timeout"
    # One worker until a death, a fresh one after each.
    pids = [by[n].message for n in ("a", "b", "c", "d")]
    assert pids[0] == pids[1] != pids[2] != pids[3]
