"""The pytest plugin: options, device selection, case parametrization, per-case records and
the end-of-session report. Hooks stay thin; the logic lives in the modules they call."""
from __future__ import annotations

import datetime as _dt
import importlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from . import outcome as _outcome
from .case import PROFILES, select
from .devices import BACKENDS, DeviceUnavailable, device_class, host_device, open_device
from .interfaces import Unsupported
from .records import RecordWriter, build_record, read_records

STATE = pytest.StashKey["SessionState"]()
CASE_INFO = pytest.StashKey[dict]()
DEFAULT_LEDGER = "cases/known_failures.toml"


@dataclass
class SessionState:
    device_kind: str
    profile: str
    run_id: str
    run_dir: Path
    report_path: Path | None
    worker: str
    controller: bool
    #: family -> [(name, implementation)] from --impl, resolved up front so a bad spec stops the run.
    impl_overrides: dict[str, list[tuple[str, object]]]
    case_timeout: float
    #: compile-only: the targets every case is compiled for (empty for a numeric run).
    compile_targets: list[str]
    ledger_path: Path
    bench_runs: int = 30
    bench_method: str = "auto"
    bench_l2: str = "cold"
    bench_repeat: int = 1
    device: object = None
    writer: RecordWriter | None = None
    env: dict | None = None
    pending: dict = field(default_factory=dict)
    _ledger: list | None = None

    def env_fingerprint(self) -> dict:
        if self.env is None:
            from .environment import fingerprint

            self.env = fingerprint(self.device)
        return self.env

    def ledger(self) -> list:
        if self._ledger is None:
            from .ledger import load

            self._ledger = load(self.ledger_path)
        return self._ledger

    def impls_for(self, family) -> list[tuple[str, object]]:
        """The implementations this session tests for ``family`` (the default one unless --impl)."""
        return self.impl_overrides.get(family.name) or [family.default_impl()]

    def impl_for(self, family, name: str | None = None) -> tuple[str, object]:
        impls = self.impls_for(family)
        return next((i for i in impls if i[0] == name), impls[0])

    @property
    def mode(self) -> str:
        return "compile" if self.compile_targets else "numeric"

    def repro(self, nodeid: str, family: str | None = None, impl: str | None = None) -> str:
        extra = f" --impl {family}={impl}" if family in self.impl_overrides and impl else ""
        if self.compile_targets:
            extra += " --compile-only " + " ".join(_target_options(self.device_kind, self.compile_targets))
        return f"pytest '{nodeid}' --device {self.device_kind} --profile {self.profile}{extra}"


def _target_options(kind: str, targets: list[str]) -> list[str]:
    if kind == "cuda":
        return ["--cuda-arch", ",".join(t.removeprefix("sm_") for t in targets)]
    return ["--soc", targets[0]]


def compile_targets(kind: str, cuda_arch: str, soc: str) -> list[str]:
    """The compile-only targets of a device: sm_NN per --cuda-arch entry, or the --soc."""
    from .compile import toolchain

    if kind == "cpu":
        raise pytest.UsageError("--compile-only needs --device cuda or --device npu (cpu interprets, "
                                "it never compiles)")
    want = "upstream" if kind == "cuda" else "ascend"
    if toolchain.installed() != want:
        need = "upstream triton" if kind == "cuda" else "triton-ascend (tox -e npu-compile)"
        raise pytest.UsageError(f"--device {kind} --compile-only: needs {need}; this environment has "
                                f"{toolchain.describe()}")
    if kind == "cuda":
        archs = [a.strip() for a in cuda_arch.split(",") if a.strip()]
        if not archs or not all(a.isdigit() for a in archs):
            raise pytest.UsageError(f"--cuda-arch: expected numbers like 80,90, got {cuda_arch!r}")
        return [f"sm_{a}" for a in archs]
    return [soc]


def _parse_impls(values: list[str]) -> dict[str, list[tuple[str, object]]]:
    from .impls import ImplError, parse_options, resolve_all

    try:
        return resolve_all(parse_options(values))
    except ImplError as exc:
        raise pytest.UsageError(str(exc)) from None


# -- options and set-up -------------------------------------------------------------------------

def pytest_addoption(parser):
    group = parser.getgroup("attnsuite", "attention kernel conformance")
    group.addoption("--device", choices=sorted(BACKENDS), default="cpu",
                    help="where kernels run: cpu (Triton interpreter, default), cuda, npu")
    group.addoption("--profile", choices=PROFILES, default=None,
                    help="case set: quick (small shapes; default on cpu) or full (default elsewhere)")
    group.addoption("--impl", action="append", default=[], metavar="FAMILY=MODULE:CALLABLE",
                    help="run FAMILY's cases against this callable instead of the project's kernel")
    group.addoption("--records-dir", default=None,
                    help="where this run's JSONL records go (default reports/runs/<run id>)")
    group.addoption("--report-html", default=None,
                    help="report written at session end (default reports/index.html; 'none' to skip)")
    group.addoption("--compile-only", action="store_true", default=False,
                    help="compile (never launch) every case's kernels for the device's targets; needs "
                         "no accelerator. cuda: upstream triton, --cuda-arch; npu: triton-ascend, --soc")
    group.addoption("--cuda-arch", default="80,90", help="compile-only CUDA targets (default 80,90)")
    group.addoption("--soc", default="Ascend910B2", help="compile-only Ascend target (default Ascend910B2)")
    group.addoption("--case-timeout", type=float, default=None,
                    help="seconds before a hung case is stopped and recorded as timeout "
                         "(default 900 on cpu, 300 elsewhere; needs pytest-timeout)")
    group.addoption("--bench-runs", type=int, default=30,
                    help="benchmarks: timed runs per kernel and baseline (median and IQR over them)")
    group.addoption("--bench-method", choices=("auto", "cudagraph", "profiler", "events", "npu"),
                    default="auto",
                    help="benchmarks, device time: auto (default): graph replay, else the profiler's "
                         "kernel time for a call that cannot be captured; events: the old eager "
                         "timing (host time inside); npu: triton-ascend's profiler-based do_bench")
    group.addoption("--bench-l2", choices=("cold", "warm"), default="cold",
                    help="benchmarks: L2 state of every timed call (cold: flushed before each)")
    group.addoption("--bench-repeat", type=int, default=1, choices=(1, 2),
                    help="benchmarks: 2 times each kernel twice in the session and flags a "
                         "device-time spread over 10%% (bench.repeat)")
    group.addoption("--autotune", action="store_true", default=False,
                    help="GPU: time the tile candidates of every kernel shape not yet in the tune "
                         "cache and cache the fastest (kernels.settings.autotune; cache at "
                         "ATTNSUITE_TUNE_CACHE, default ~/.cache/attnsuite/tune.json)")
    group.addoption("--kernel-path", choices=("auto", "portable", "fast"), default=None,
                    help="auto (default): backend fast paths on CUDA, portable kernels elsewhere; "
                         "portable: the portable kernels everywhere; fast: the fast paths, also "
                         "in the interpreter (kernels.settings.kernel_path)")
    parser.addini("attnsuite_ledger", "known-failure ledger (TOML), relative to the rootdir",
                  default=DEFAULT_LEDGER)


def pytest_configure(config):
    config.addinivalue_line("markers", "conformance: a conformance case of a kernel family")
    config.addinivalue_line("markers", "bench: a benchmark case (benchmarks/)")
    config.addinivalue_line("markers", "impl(name): the implementation a conformance case runs")
    kind = config.getoption("device")
    device_class(kind).prepare_environment()  # before anything imports triton
    # The kernels' own settings object, set in every process (xdist workers run this hook too).
    import kernels.settings

    kernels.settings.configure(kernel_path=config.getoption("kernel_path"),
                               autotune=True if config.getoption("autotune") else None)

    workerinput = getattr(config, "workerinput", None)
    controller = workerinput is None and getattr(config.option, "dist", "no") != "no"
    worker = workerinput["workerid"] if workerinput else ("controller" if controller else "main")
    if workerinput and "attnsuite_run_id" in workerinput:
        run_id, run_dir = workerinput["attnsuite_run_id"], Path(workerinput["attnsuite_run_dir"])
    else:
        run_id = f"{kind}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        records = config.getoption("records_dir")
        run_dir = Path(records) if records else config.rootpath / "reports" / "runs" / run_id
    report = config.getoption("report_html")
    report_path = None if report == "none" else Path(report or config.rootpath / "reports" / "index.html")
    timeout = config.getoption("case_timeout") or (900.0 if kind == "cpu" else 300.0)
    targets = (compile_targets(kind, config.getoption("cuda_arch"), config.getoption("soc"))
               if config.getoption("compile_only") else [])
    # Interpreted and compile-only runs default to small shapes; device runs to the full sweep.
    profile = config.getoption("profile") or ("quick" if kind == "cpu" or targets else "full")

    state = SessionState(
        device_kind=kind, profile=profile, compile_targets=targets,
        run_id=run_id, run_dir=run_dir, report_path=report_path, worker=worker, controller=controller,
        impl_overrides=_parse_impls(config.getoption("impl")), case_timeout=timeout,
        ledger_path=config.rootpath / config.getini("attnsuite_ledger"),
        bench_runs=config.getoption("bench_runs"), bench_method=config.getoption("bench_method"),
        bench_l2=config.getoption("bench_l2"), bench_repeat=config.getoption("bench_repeat"),
    )
    try:
        if targets:
            state.device = host_device(kind)  # compile-only: inputs stay on the host
        elif controller:
            device_class(kind).check_available()  # fail once, before spawning workers
        else:
            state.device = open_device(kind, workerinput["workerid"] if workerinput else None)
    except DeviceUnavailable as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE] = state


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    state = node.config.stash[STATE]
    node.workerinput["attnsuite_run_id"] = state.run_id
    node.workerinput["attnsuite_run_dir"] = str(state.run_dir)


def pytest_report_header(config):
    state = config.stash[STATE]
    mode = f" compile-only for {','.join(state.compile_targets)}" if state.compile_targets else ""
    return [f"attnsuite: device={state.device_kind}{mode} profile={state.profile} records={state.run_dir}"]


# -- collection -------------------------------------------------------------------------------

def pytest_generate_tests(metafunc):
    if "bench_case" in metafunc.fixturenames:
        return _parametrize_bench(metafunc)
    family = getattr(metafunc.module, "FAMILY", None)
    if family is None or "case" not in metafunc.fixturenames:
        return
    state = metafunc.config.stash[STATE]
    ledger = state.ledger()
    from .ledger import KnownFailureHit, lookup

    impls = [name for name, _ in state.impls_for(family)]
    params = []
    for case in select(family.cases, state.profile):
        for impl in impls:
            marks = [pytest.mark.conformance, pytest.mark.impl(impl)]
            known = lookup(ledger, case, state.device_kind, mode=state.mode, impl=impl)
            if known is not None:
                marks.append(pytest.mark.xfail(strict=True, raises=KnownFailureHit, reason=(
                    f"known failure {known.id}: {known.reason} (porting_notes.md#{known.note}); "
                    f"if this case passes, the ledger entry {known.id!r} looks stale")))
            # Each case once per implementation; ids name the implementation only when there
            # are several, so a single-implementation run keeps the plain case ids.
            case_id = case.label if len(impls) == 1 else f"{case.label}@{impl}"
            params.append(pytest.param(case, id=case_id, marks=marks))
    metafunc.parametrize("case", params)


def bench_selection(family, profile: str) -> list:
    """A family's benchmark cases: its headline ("bench") cases, plus the sweeps in full."""
    wanted = {"bench"} | ({"sweep"} if profile == "full" else set())
    return [c for c in family.cases if wanted & set(c.tags)]


def _parametrize_bench(metafunc):
    state = metafunc.config.stash[STATE]
    params = [pytest.param(case, id=case.id, marks=[pytest.mark.bench])
              for family in metafunc.module.FAMILIES for case in bench_selection(family, state.profile)]
    metafunc.parametrize("bench_case", params)


def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("timeout"):
        return
    timeout = config.stash[STATE].case_timeout
    for item in items:
        if (item.get_closest_marker("conformance") or item.get_closest_marker("bench")) \
                and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(timeout))


# -- running a case ---------------------------------------------------------------------------

class Conformance:
    """What a conformance test calls: ``conformance.check(FAMILY, case)``."""

    def __init__(self, item, state: SessionState):
        self.item, self.state = item, state

    def check(self, family, case):
        from .ledger import lookup
        from .runner import run_case

        marker = self.item.get_closest_marker("impl")
        impl_name, impl = self.state.impl_for(family, marker.args[0] if marker else None)
        if self.state.compile_targets and not family.launches_kernel(case):
            pytest.skip(f"compile-only: {case.id} runs plain PyTorch, no kernel to compile")
        known = lookup(self.state.ledger(), case, self.state.device_kind, mode=self.state.mode,
                       impl=impl_name)
        info = self.item.stash[CASE_INFO]
        info["impl"] = impl_name
        info["known_failure"] = known.describe() if known else None
        try:
            return run_case(family, case, self.state.device, impl, known, info["result_obj"],
                            compile_targets=self.state.compile_targets)
        except Unsupported as exc:
            pytest.skip(f"{impl_name} does not support this case: {exc}")


@pytest.fixture
def conformance(request):
    return Conformance(request.node, request.config.stash[STATE])


@pytest.fixture
def bench(request):
    """``bench.run(case)`` times a case (see attnsuite/bench); stores into pytest-benchmark's
    JSON when that plugin is active."""
    from .bench.session import Bench

    benchmark = None
    state = request.config.stash[STATE]
    if request.config.pluginmanager.hasplugin("benchmark") and state.device.kind != "cpu":
        benchmark = request.getfixturevalue("benchmark")
    return Bench(state, request.node.stash[CASE_INFO],
                 request.module.FAMILIES, benchmark)


def _impl_marker(item) -> str | None:
    marker = item.get_closest_marker("impl")
    return marker.args[0] if marker else None


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def pytest_runtest_setup(item):
    params = getattr(getattr(item, "callspec", None), "params", {})
    case = params.get("case") or params.get("bench_case")
    if case is None or not (item.get_closest_marker("conformance") or item.get_closest_marker("bench")):
        return
    from .result import CaseResult

    state = item.config.stash[STATE]
    item.stash[CASE_INFO] = {
        "run_id": state.run_id, "case_id": case.id, "nodeid": item.nodeid, "family": case.family,
        "params": dict(case.params), "profile": state.profile, "tags": sorted(case.tags),
        "impl": None, "device": state.device_kind, "device_index": state.device.index,
        "mode": "bench" if item.get_closest_marker("bench") else state.mode,
        "worker": state.worker, "env": state.env_fingerprint(),
        "repro": state.repro(item.nodeid, case.family, _impl_marker(item)),
        "started_at": _now(), "result_obj": CaseResult(),
    }


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    info = item.stash.get(CASE_INFO, None)
    if info is not None:
        payload = {k: v for k, v in info.items() if k != "result_obj"}
        payload["result"] = info["result_obj"].as_payload()
        payload["finished_at"] = _now()
        exc = call.excinfo.value if call.excinfo is not None else None
        payload["stage"] = getattr(exc, "stage", None)
        # Round-trip through JSON: the payload crosses xdist's wire and ends in a JSON record.
        payload = json.loads(json.dumps(payload, default=str))
        report.user_properties.append((_outcome.PAYLOAD_KEY, payload))
    return report


def pytest_runtest_logreport(report):
    state = _state_of(report)
    if state is None:
        return
    if report.when == _outcome.CRASH_PHASE:
        _write(state, {_outcome.CRASH_PHASE: report}, crash_info(state, report.nodeid))
        return
    if state.controller:
        return  # workers write their own records
    if not _outcome.payload(report):
        return
    phases = state.pending.setdefault(report.nodeid, {})
    phases[report.when] = report
    if report.when == "teardown":
        del state.pending[report.nodeid]
        info = next((_outcome.payload(r) for r in (phases.get("call"), phases.get("setup"), report)
                     if r is not None and _outcome.payload(r)), {})
        _write(state, phases, info)


_CONFIG = {}


def _state_of(report):
    config = _CONFIG.get("config")
    return config.stash.get(STATE, None) if config is not None else None


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG["config"] = session.config


def _write(state: SessionState, phases: dict, info: dict) -> None:
    if state.writer is None:
        state.writer = RecordWriter(state.run_dir, state.worker)
    state.writer.write(build_record(phases, info, _outcome.classify(phases)))


def crash_info(state: SessionState, nodeid: str) -> dict:
    """What the controller knows of a case whose worker died: its id, family and parameters."""
    match = re.search(r"::test_(\w+)\[(.*)\]$", nodeid)
    family, label = (match.group(1), match.group(2)) if match else ("unknown", nodeid)
    params = {}
    try:
        module = importlib.import_module(nodeid.split("::")[0].removesuffix(".py").replace("/", "."))
        params = next(dict(c.params) for c in module.FAMILY.cases if c.label == label)
    except Exception:  # best effort: the crash record stands without its parameters
        pass
    return {"run_id": state.run_id, "case_id": f"{family}[{label}]", "nodeid": nodeid, "family": family,
            "params": params, "profile": state.profile, "device": state.device_kind, "worker": "controller",
            "mode": state.mode,
            "finished_at": _now(), "repro": state.repro(nodeid)}


# -- end of session ---------------------------------------------------------------------------

def pytest_sessionfinish(session):
    state = session.config.stash.get(STATE, None)
    if state is None:
        return
    if state.writer is not None:
        state.writer.close()
    if getattr(session.config, "workerinput", None) is not None or state.report_path is None:
        return
    if not state.run_dir.is_dir() or not any(state.run_dir.glob("*.jsonl")):
        return
    from .report import render_report

    try:
        render_report(read_records([state.run_dir]), state.report_path)
    except Exception as exc:  # the records are safe on disk; the report can be re-rendered
        session.config.stash[STATE].report_error = f"{type(exc).__name__}: {exc}"


def pytest_terminal_summary(terminalreporter, config):
    state = config.stash.get(STATE, None)
    if state is None or not state.run_dir.is_dir() or not any(state.run_dir.glob("*.jsonl")):
        return
    from .summary import summary_lines

    terminalreporter.section("attnsuite")
    for line in summary_lines(read_records([state.run_dir])):
        terminalreporter.write_line(line)
    terminalreporter.write_line(f"records: {state.run_dir}")
    error = getattr(state, "report_error", None)
    if error:
        terminalreporter.write_line(f"report NOT written ({error}); re-render with "
                                    f"python -m attnsuite.report {state.run_dir}")
    elif state.report_path is not None:
        terminalreporter.write_line(f"report: {state.report_path}  "
                                    f"(merge runs: python -m attnsuite.report reports/runs/*)")
