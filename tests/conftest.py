"""Helpers for the project's own tests: run the conformance suite in a separate process (forked
from one that has imported torch already: tests/processes.py) and read back what it recorded."""
from __future__ import annotations

import fcntl
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnsuite.records import read_records
from tests.processes import run_python

ROOT = Path(__file__).resolve().parents[1]

# One intra-op thread for torch in these tests and every process they start, unless you set
# OMP_NUM_THREADS: two test workers on CI's two cores, each starting runs of its own, keep the
# cores busy already, and an oversubscribed thread pool spins. Three interpreted runs at once on
# 2 cores took 17 s of CPU each with torch's default two threads, 9 s with one.
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # loaded with the suite's plugin, before this file
        sys.modules["torch"].set_num_threads(1)

# Bytecode for the ~150 Python processes these tests start (suite runs, their xdist workers,
# scripts). With PYTHONDONTWRITEBYTECODE set (some images set it; tox does not pass it on) each
# of them compiled the project's sources again: about 1 s of CPU a process, a sixth of the
# whole directory's time on two cores. Instead they keep their bytecode under a directory of
# the system's temporary one (PYTHONPYCACHEPREFIX), still writing nothing into the checkout;
# the first process fills it (torch's modules included, a few seconds once), the rest read it.
# Bytecode is checked against its source's mtime and size, so a stale entry is never used.
if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
    os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"attnsuite-tests-pycache-{os.getuid()}")
    del os.environ["PYTHONDONTWRITEBYTECODE"]


@dataclass
class SuiteRun:
    returncode: int
    output: str
    records: list[dict]
    report: Path

    def by_case(self) -> dict[str, dict]:
        return {r["case_id"]: r for r in self.records}

    def outcomes(self) -> dict[str, str]:
        return {r["case_id"]: r["outcome"] for r in self.records}


def _run_suite(out_dir: Path, *args: str, env: dict | None = None, timeout: float = 600) -> SuiteRun:
    records, report = out_dir / "records", out_dir / "index.html"
    argv = ["-m", "pytest", "-q", "-p", "no:cacheprovider",
            "--records-dir", str(records), "--report-html", str(report), *args]
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    proc = run_python(argv, cwd=ROOT, env=full_env, timeout=timeout)
    found = read_records([records]) if records.is_dir() else []
    return SuiteRun(proc.returncode, proc.stdout + proc.stderr, found, report)


@pytest.fixture
def run_suite(tmp_path):
    """``run_suite(*pytest_args, env=None)`` runs pytest on the conformance cases from the
    repository root, with records and report under ``tmp_path``."""
    calls = iter(range(1000))

    def _run(*args: str, env: dict | None = None, timeout: float = 600) -> SuiteRun:
        return _run_suite(tmp_path / f"run{next(calls)}", *args, env=env, timeout=timeout)

    return _run


def made_once(request, tmp_path_factory, name: str, make) -> tuple[Path, dict]:
    """``make(directory) -> dict`` (JSON-able) once per session, in a directory named ``name``:
    under ``-n`` (tox -e tests runs two workers) the directory the workers share, so the first
    worker to ask makes it under a lock and another waits and reads it, instead of each worker
    making its own (a session or module fixture runs once per worker). Returns the directory and
    what ``make`` returned. Treat the directory as read-only."""
    # Not xdist's worker_id fixture (missing under -p no:xdist), nor PYTEST_XDIST_WORKER (which
    # pytest_configure below removes).
    if not hasattr(request.config, "workerinput"):
        where = tmp_path_factory.mktemp(name)
        return where, make(where)
    shared = tmp_path_factory.getbasetemp().parent / name
    shared.mkdir(exist_ok=True)
    done = shared / "made.json"
    with open(shared / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            made = make(shared)
            done.write_text(json.dumps(made))
            return shared, made
    return shared, json.loads(done.read_text())


def suite_run_made_once(request, tmp_path_factory, name: str, *args: str, env: dict | None = None) -> SuiteRun:
    """``_run_suite(directory, *args)`` once per session (``made_once``), read back from its records."""
    def make(where: Path) -> dict:
        run = _run_suite(where, *args, env=env)
        return {"returncode": run.returncode, "output": run.output}

    where, made = made_once(request, tmp_path_factory, name, make)
    records = where / "records"
    return SuiteRun(made["returncode"], made["output"],
                    read_records([records]) if records.is_dir() else [], where / "index.html")


@pytest.fixture(scope="session")
def quick_cpu_run(tmp_path_factory, request) -> SuiteRun:
    """The whole quick profile on cpu under two xdist workers, once per session. It is the
    most expensive run these tests make; every test that needs one (the plugin end to end, the
    report in a browser) reads this one instead of repeating it. Treat it as read-only.
    Once per session under ``-n`` too (``made_once``)."""
    return suite_run_made_once(request, tmp_path_factory, "quick-cpu", "-n", "2")


def _language_namespaces() -> list:
    """The objects Triton's interpreter patches (triton/runtime/interpreter.py, ``_patch_lang``)."""
    try:
        import triton.language as tl
    except ImportError:
        return []
    core = tl.core
    names = ("tensor", "tensor_descriptor_base", "condition", "dtype")
    return [tl, core, getattr(tl, "math", None)] + [getattr(core, n, None) for n in names]


@pytest.fixture(autouse=True)
def _undo_interpreter_patches():
    """Triton 3.9's interpreter patches ``triton.language`` when an interpreted kernel calls a
    @jit helper and never restores it (``InterpretedFunction.__call__``). A later real compile
    in the same process (tests/test_compile_core.py, on a cold Triton cache) then fails in the
    frontend with "'value' object has no attribute 'dtype'". Put the namespaces back after
    every test, so test order cannot matter."""
    saved = [(obj, dict(vars(obj))) for obj in _language_namespaces() if obj is not None]
    yield
    for obj, before in saved:
        now = vars(obj)
        for name in [n for n in now if n not in before]:
            delattr(obj, name)
        for name, value in before.items():
            if now.get(name, _ABSENT) is not value:
                setattr(obj, name, value)


_ABSENT = object()


#: Tests that run a whole conformance profile in a child suite run (the quick profile under
#: xdist and what reads it, the fast kernel paths' quick cases, the mutation catalog, the fuzz
#: profile's CI slice): minutes of CPU on a 2-core machine. ``tox -e tests`` leaves them to
#: ``tox -e profile-runs``; CI (.ci/run) runs both.
PROFILE_RUN = "profile_run"


def pytest_configure(config):
    """In an xdist worker (tox -e tests runs two), forget xdist's environment variables: the suite
    runs these tests start inherit the environment, and a child pytest that saw them would take
    its parent's run id (the compile cache is keyed on it) and think itself a worker.

    In the controller, hand tests out one at a time (``--maxschedchunk 1``) instead of in chunks
    of a quarter of the collection: with the slow tests first (``pytest_collection_modifyitems``)
    each worker takes the next slow test as it frees up, and no worker is left alone with a
    minute-long test at the end while the other sits idle."""
    config.addinivalue_line("markers", f"{PROFILE_RUN}: runs a whole conformance profile in a child suite run "
                            "(tox -e profile-runs)")
    if hasattr(config, "workerinput"):
        for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
            del os.environ[name]
    elif getattr(config.option, "dist", "no") != "no" and getattr(config.option, "maxschedchunk", 0) is None:
        config.option.maxschedchunk = 1


def pytest_sessionstart(session):
    """``interpreted.speed_up``, which the suite's runner installs before its first case, for the
    kernels these tests interpret directly too (not the helper-patching skip:
    test_interpreter_patching.py compares the interpreter with and without it). At session start:
    Triton must not be imported before the plugin's configure sets ``TRITON_INTERPRET``."""
    if os.environ.get("TRITON_INTERPRET") != "1":  # the compile tiers' runs of these tests
        return
    from attnsuite import interpreted

    interpreted.speed_up()


#: The slowest tests, longest first (``--durations`` of ``tox -e tests`` on a 2-core machine,
#: tree i29): started first, so they overlap each other instead of trailing at the end. A test
#: renamed here only loses its place in the order. The fast-path run leads: it is the longest
#: test that runs in one process, so nothing can overlap it but the other worker's tests.
SLOW = (
    "tests/test_fast_paths.py::test_fast_paths_pass_the_quick_conformance_cases_in_the_interpreter",
    "tests/test_plugin.py::test_quick_profile_under_xdist_passes_records_every_case_and_writes_the_report",
    "tests/test_records_stay_true.py::test_dead_workers_are_recorded_as_crashes_until_the_restart_budget_then_the_"
    "rest_as_not_run",
    "tests/test_reproducible.py::test_a_case_alone_and_inside_a_run_records_the_same_numbers",
    "tests/test_mutants.py::test_the_quick_profile_on_cpu_kills_every_mutant_and_passes_every_control",
    "tests/test_fuzz.py::test_the_ci_slice_passes_on_cpu_on_the_persistent_grid",
    "tests/test_records_stay_true.py::test_a_case_stuck_in_native_code_is_ended_by_the_watchdog_and_the_run_goes_on",
    "tests/test_mustafar_paths.py::test_mustafar_plan_in_interpreter",
    "tests/test_several_hosts.py::test_workers_in_other_directories_send_their_records_and_the_controller_writes_"
    "one_report",
    "tests/test_program_order.py::test_a_store_into_the_next_program_s_row_passes_in_grid_order_and_fails_shuffled",
    "tests/test_side_by_side.py::test_bare_all_runs_every_registered_implementation_of_every_family",
    "tests/test_impls.py::test_the_interpreter_bf16_entry_judges_only_cases_that_ran_a_triton_kernel",
    "tests/test_mutants.py::test_any_catalog_module_hung_and_crashing_implementations_counted",
    "tests/test_plugin.py::test_a_hung_case_is_stopped_and_recorded_as_timeout",
    "tests/test_compile_only.py::test_cuda_compile_only_builds_every_launch_for_each_arch",
    "tests/test_report_browser.py",  # after the quick run it reads (quick_cpu_run)
)


def _slowness(item) -> int:
    name = item.nodeid.split("[", 1)[0]
    for rank, slow in enumerate(SLOW):
        if name == slow or name.startswith(slow + "::"):
            return rank
    return len(SLOW) if {"run_suite", "quick_cpu_run"} & set(getattr(item, "fixturenames", ())) else len(SLOW) + 1


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks given here
def pytest_collection_modifyitems(config, items):
    """The slow tests first, each followed by a quick one: an xdist worker keeps the next test
    queued while it runs one, so the one queued behind a slow test is a quick one and the next
    slow test goes to whichever worker frees up first. (Every worker sorts the same collection
    the same way, as xdist requires.) Only this directory's tests are reordered: a conformance
    run that happens to load this conftest keeps its own order."""
    ours = [i for i in items if i.nodeid.startswith("tests/")]
    if len(ours) != len(items):
        return
    # Every test that reads the shared quick-profile run is a profile run, so a new one cannot
    # land in tox -e tests by forgetting the mark.
    for item in items:
        if "quick_cpu_run" in getattr(item, "fixturenames", ()):
            item.add_marker(PROFILE_RUN)
    ranked = sorted(items, key=_slowness)
    slow = [i for i in ranked if _slowness(i) < len(SLOW)]
    rest = [i for i in ranked if _slowness(i) >= len(SLOW)]
    quick = [i for i in rest if _slowness(i) > len(SLOW)]
    middle = [i for i in rest if _slowness(i) == len(SLOW)]
    interleaved = []
    for n, item in enumerate(slow):
        interleaved.append(item)
        if n < len(quick):
            interleaved.append(quick[n])
    items[:] = interleaved + middle + quick[len(slow):]
