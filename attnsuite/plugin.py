"""The pytest plugin: thin hooks around one ``SuiteSession`` (attnsuite/session.py). Options live
in options.py, collection in collection.py, running in runner.py, records in recording.py, the run
as a whole (crashes, cases never run, interrupts) in accounting.py, the watchdog in watchdog.py,
and the report in attnsuite/report."""
from __future__ import annotations

import dataclasses
import faulthandler
import os
import threading

import pytest

# numpy's OpenBLAS does one job in this suite: the Triton interpreter's tl.dot, on tiles of a few
# hundred rows at most. Its threads spin between calls and took the cores from torch (inputs,
# references) and from the other xdist workers: on 2 cores the quick profile took 45.3 s with
# OpenBLAS's default threads and 29.9 s with one (case time 80.9 s -> 50.6 s). OpenBLAS reads this
# when numpy loads, which torch does in the imports below; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .accounting import RunAccount, is_crash
from .collection import OUTCOME, PARAM, FamilyFile, register_tags
from .devices import DeviceUnavailable, device_class, host_device, open_device
from .options import OptionError, add_options, joined_option_values, read_options, value_options
from .records import RecordWriter, read_records
from .scheduling import (auto_workers, contiguous_scheduler, order_for_compiles, specialization_key,
                         tolerate_dead_workers, usable_cpus)
from .transport import ControllerWriters, WorkerCache, carried
from .context import SUITE, now, suite
from .session import SuiteSession

ACCOUNT = pytest.StashKey[RunAccount]()
WATCHDOG = pytest.StashKey[object]()


def _quiet_benchmark_under_xdist(config) -> None:
    """pytest-benchmark disables itself under xdist anyway; older releases say so on stderr in
    every worker of a conformance run, which has no benchmark. Disabled up front, it is silent."""
    opt = config.option
    xdist = getattr(opt, "dist", "no") != "no" or os.environ.get("PYTEST_XDIST_WORKER")
    if xdist and hasattr(opt, "benchmark_disable") and not getattr(opt, "benchmark_enable", False) \
            and not getattr(opt, "benchmark_only", False):
        opt.benchmark_disable = True


def pytest_addoption(parser):
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def _workers_parse_our_options(config) -> None:
    params = config.invocation_params
    args = joined_option_values(params.args, value_options(config._parser))
    if list(args) != list(params.args):
        config.invocation_params = dataclasses.replace(params, args=tuple(args))


def pytest_configure(config):
    _quiet_benchmark_under_xdist(config)
    _workers_parse_our_options(config)
    for name, doc in (("conformance", "a conformance case of a kernel family"),
                      ("bench", "a headline benchmark case (tag)"), ("sweep", "a benchmark sweep case (tag)"),
                      ("fuzz", "a case drawn by the fuzz profile (tag)"),
                      ("workload", "a case from a FlashInfer-Trace workload, --workloads (tag)"),
                      ("impl(name)", "the implementation a conformance case runs")):
        config.addinivalue_line("markers", f"{name}: {doc}")
    kind = config.getoption("device")
    device_class(kind).prepare_environment()  # before anything imports triton
    workerinput = getattr(config, "workerinput", None)
    controller = workerinput is None and getattr(config.option, "dist", "no") != "no"
    worker = workerinput["workerid"] if workerinput else ("controller" if controller else "main")
    try:
        options = read_options(config, workerinput)
    except OptionError as exc:
        raise pytest.UsageError(str(exc)) from None
    import kernels.settings  # the kernels' own settings object, set in every process

    kernels.settings.configure(kernel_path=options.kernel_path, autotune=options.autotune or None,
                               persistent_programs=options.persistent_programs)
    session = SuiteSession(options, worker=worker, controller=controller)
    if options.compile_targets:  # before any implementation is imported: Triton 3.2 needs a driver to autotune
        from .compile.capture import use_host_driver
        use_host_driver()
    try:
        session.implementations()  # a bad --impl stops the run here, before any worker starts
        session.ledger()  # and so does a bad ledger
        if options.compile_targets:
            session.device = host_device(kind)  # compile-only: inputs stay on the host
        elif controller:
            device_class(kind).check_available()  # fail once, before spawning workers
        else:
            session.device = open_device(kind, workerinput["workerid"] if workerinput else None)
    except DeviceUnavailable as exc:
        raise pytest.UsageError(str(exc)) from None
    except ValueError as exc:  # ImplError, an unknown family
        raise pytest.UsageError(str(exc)) from None
    config.stash[SUITE] = session
    if workerinput and workerinput.get("workercount"):
        _share_cores(int(workerinput["workercount"]))
    writer = _writer(session)
    if workerinput is None:
        account = config.stash[ACCOUNT] = RunAccount(session, writer)
        if controller and config.option.maxworkerrestart is None:
            # A kernel that aborts on every call costs one worker per case: let a conformance run
            # get through a family of crashing cases before xdist gives up.
            config.option.maxworkerrestart = str(max(32, 4 * (config.option.numprocesses or 1)))
        account.max_restarts = int(config.option.maxworkerrestart) if controller else None
        _stop_quietly_on_signals(account)


def _share_cores(workers: int) -> None:
    """Each xdist worker gets its share of the host's cores for torch's own threads: inputs,
    references and comparisons of 8 workers with a thread per core each would oversubscribe
    the host many times over. A thread count the user set (``OMP_NUM_THREADS``, which torch
    reads as it loads) is kept: they know what else runs on the host."""
    import os

    import torch

    if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        return
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def _writer(session: SuiteSession):
    """``get(worker)``: where this process's records go. One pytest process: its records file. An
    xdist worker: its local cache (the records themselves travel on the reports). The controller:
    a file per worker for the records it receives, ``controller.jsonl`` for its own."""
    holder = {}

    def get(worker: str = "controller"):
        if "w" not in holder:
            if session.in_worker:
                holder["w"] = WorkerCache(session.options.run_dir, session.worker)
            elif session.controller:
                holder["w"] = ControllerWriters(session.options.run_dir)
            else:
                holder["w"] = RecordWriter(session.options.run_dir, session.worker)
        w = holder["w"]
        return w(worker) if isinstance(w, ControllerWriters) else w

    get.holder = holder
    return get


def _stop_quietly_on_signals(account: RunAccount) -> None:
    """``timeout`` and CI limits send SIGTERM, a terminal's Ctrl-C SIGINT: either ends the run
    quietly (attnsuite/stop.py), so what was recorded is kept and the summary and report are
    still written."""
    from .stop import QuietStop

    QuietStop(account).install()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    options = suite(node.config).options
    node.workerinput["attnsuite_run_id"] = options.run_id
    node.workerinput["attnsuite_records_dir"] = node.config.getoption("records_dir")
    tolerate_dead_workers(node)


def pytest_report_header(config):
    o = suite(config).options
    mode = f" compile-only for {','.join(o.compile_targets)}" if o.compile_targets else ""
    lines = [f"attnsuite: device={o.device_kind}{mode} profile={o.profile} records={o.run_dir}"]
    if o.workloads is not None:
        from .flashinfer_trace.workloads import load

        lines.append(f"attnsuite: {load(str(o.workloads)).summary()} from {o.workloads}")
    return lines


# -- collection -------------------------------------------------------------------------------

def pytest_collect_file(file_path, parent):
    if file_path.suffix != ".py" or file_path.name.startswith(("_", "test_")):
        return None
    session = suite(parent.config)
    if not session.in_registry_package(file_path):
        return None
    family = session.family_at(file_path)
    if family is None:
        return None
    node = FamilyFile.from_parent(parent, path=file_path)
    node.family = family
    return node


def pytest_generate_tests(metafunc):
    if "bench_case" not in metafunc.fixturenames:
        return
    session = suite(metafunc.config)
    params = []
    for family in session.families().values():
        impls = [name for name, _ in session.impls_for(family)]
        # --workloads: every mapped workload is a benchmark case too (shapes from a deployment).
        workloads = [c for c in session.workload_cases(family) if not c.params.get("unmapped")]
        for case in [*bench_selection(family, session.options.profile), *workloads]:
            # The case's tags are marks too: ``-m "not sweep"`` keeps the headline cases.
            tags = {"bench", *case.tags} | ({"workload"} if case in workloads else set())
            register_tags(metafunc.config, tags)
            marks = [getattr(pytest.mark, tag) for tag in sorted(tags)]
            # One benchmark per implementation when several run side by side (``@impl`` ids,
            # as the conformance items have), each timed beside the same baselines.
            params += [pytest.param(case, id=case.id if len(impls) == 1 else f"{case.id}@{impl}",
                                    marks=marks) for impl in impls]
    metafunc.parametrize("bench_case", params)


def bench_selection(family, profile: str) -> list:
    """A family's benchmark cases: its headline ("bench") cases, plus the sweeps in full."""
    wanted = {"bench"} | ({"sweep"} if profile == "full" else set())
    return [c for c in family.cases if wanted & set(c.tags)]


def pytest_collection_modifyitems(config, items):
    if suite(config).options.device_kind != "cpu":  # the interpreter compiles nothing
        order_for_compiles(items, _specialization)
    if config.pluginmanager.hasplugin("timeout"):
        timeout = suite(config).options.case_timeout
        for item in items:
            if item.get_closest_marker("bench") and not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(timeout))


def _specialization(item):
    param = item.stash.get(PARAM, None) if _is_case(item) else None
    if param is None:
        return None
    return specialization_key(param.case.family, param.case.params)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` on a device: a worker per core, at most WORKERS_PER_DEVICE per device. The
    interpreter, compile-only runs and PYTEST_XDIST_AUTO_NUM_WORKERS keep xdist's own count."""
    kind = config.getoption("device")
    if kind == "cpu" or config.getoption("compile_only") or os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    try:
        devices = device_class(kind).visible_count()
    except Exception:  # noqa: BLE001 - no device: the run stops with its own message later
        return None
    return auto_workers(usable_cpus(), devices)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if suite(config).options.device_kind == "cpu":
        return None
    return contiguous_scheduler(config, log)


def pytest_collection_finish(session):
    account = session.config.stash.get(ACCOUNT, None)
    if account is not None and not suite(session.config).controller:
        account.collection(item.nodeid for item in session.items if _is_case(item))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    account = node.config.stash.get(ACCOUNT, None)
    if account is not None:
        account.collection(ids)


def _is_case(item) -> bool:
    return item.get_closest_marker("conformance") is not None or item.get_closest_marker("bench") is not None


# -- running and recording ----------------------------------------------------------------------

def pytest_runtest_logstart(nodeid, location):
    account = _account_of_reports()
    if account is not None:
        account.start(nodeid)


@pytest.fixture
def bench(request):
    """``bench.run(case)`` times a case (see attnsuite/bench); stores into pytest-benchmark's
    JSON when that plugin is active."""
    from .bench.session import Bench

    session = suite(request.config)
    benchmark = None
    if request.config.pluginmanager.hasplugin("benchmark") and session.device is not None \
            and session.device.times_kernels:
        benchmark = request.getfixturevalue("benchmark")
    return Bench(session, request.node, benchmark)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if not _is_case(item):
        return
    from .recording import STARTED

    session = suite(item.config)
    item.stash[STARTED] = now()
    if PARAM not in item.stash:  # a benchmark: its param comes from the case it times
        param = session.bench_param(item.callspec.id)
        if param is not None:
            item.stash[PARAM] = param
    watchdog = _watchdog(item.config)
    if watchdog is not None:
        from .watchdog import grace

        watchdog.arm(item, session.options.case_timeout + grace(session.options.case_timeout))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if _is_case(item):
        from .recording import on_report

        if report.when == "teardown":
            watchdog = _watchdog(item.config)
            if watchdog is not None:
                watchdog.disarm()
        session = suite(item.config)
        on_report(session, _writer_of(item.config), item, report)
    return report


def pytest_runtest_logreport(report):
    account = _account_of_reports()
    if account is None:
        return
    rec = carried(report)
    if rec is not None and suite(_CONFIG["config"]).controller:
        account.receive(rec)
    if is_crash(report):
        account.crash(report)
    elif report.when == "teardown":
        account.finish(report.nodeid)


def pytest_keyboard_interrupt(excinfo):
    account = _account_of_reports()
    if account is not None:
        account.interrupted = account.interrupted or "SIGINT"


# -- process-wide helpers -------------------------------------------------------------------------

_CONFIG: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    # pytest_runtest_logreport gets no config: keep the one this process runs under.
    _CONFIG["config"] = session.config
    s = suite(session.config)
    if not s.controller and getattr(session.config, "workerinput", None) is not None:
        # A dying worker's fault dump goes beside the records (the crash record quotes its tail),
        # not into the terminal.
        try:
            s.options.run_dir.mkdir(parents=True, exist_ok=True)
            fh = open(s.options.run_dir / f"{s.worker}.faults.txt", "a")
        except OSError:  # a host where the records directory cannot be made: dumps go to stderr
            return
        _CONFIG["faults"] = fh
        faulthandler.enable(file=fh)


def _account_of_reports() -> RunAccount | None:
    config = _CONFIG.get("config")
    return config.stash.get(ACCOUNT, None) if config is not None else None


def _writer_of(config):
    if "writer" not in _CONFIG:
        _CONFIG["writer"] = _writer(suite(config))
    return _CONFIG["writer"]


def _watchdog(config):
    if "watchdog" not in _CONFIG:
        session = suite(config)
        if session.controller:
            _CONFIG["watchdog"] = None
        else:
            from .watchdog import Watchdog

            _CONFIG["watchdog"] = Watchdog(lambda item, seconds: _on_watchdog(config, item, seconds))
    return _CONFIG["watchdog"]


def _on_watchdog(config, item, seconds: float) -> None:
    """The case is stuck where no signal reaches Python: record it as a timeout from here; in a
    single process also close the run (cases never reached, run.json, report) before it ends."""
    from .collection import PARAM as _PARAM
    from .records import build_record

    session = suite(config)
    param = item.stash.get(_PARAM, None)
    if param is not None:
        run = session.run_context(item.nodeid, param)
        run.update(finished_at=now(), elapsed_s=round(seconds, 3), duration_s=seconds)
        message = (f"Timeout (>{seconds:.0f}s, watchdog): the case did not return and did not respond to "
                   f"pytest-timeout's signal (stuck in native code?); the process was ended")
        rec = build_record(param.case, param.impl, session.device_info(), item.stash.get(OUTCOME, None),
                           ("timeout", "launch", message), session.env(), run)
        _writer_of(config)().write(rec)
        if session.in_worker:
            _send_to_controller(config, item, rec)
    account = config.stash.get(ACCOUNT, None)
    if account is not None:  # one process: nobody else will close the run
        account.finish(item.nodeid)
        account.interrupted = f"watchdog: {item.nodeid} hung past {seconds:.0f}s"
        account.close(None)
        _render(config)


def _send_to_controller(config, item, rec: dict) -> None:
    """From a worker about to be ended: the record, on a teardown report of the stuck case, the
    way every record travels (attnsuite/transport.py). The controller files it and then, when
    xdist reports the worker dead in that case, writes no crash record over it. The report
    passed: a carrier, not a verdict (pytest counts no passed teardown)."""
    from .transport import attach

    report = pytest.TestReport(item.nodeid, item.location, {}, "passed", None, "teardown")
    attach(report, rec)
    try:
        config.hook.pytest_runtest_logreport(report=report)
    except Exception:  # noqa: BLE001 - the controller then records the case as a crash
        pass


# -- end of session ---------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    config = session.config
    s = config.stash.get(SUITE, None)
    if s is None or config.option.collectonly:  # --collect-only ran nothing: no records, no report
        return
    account = config.stash.get(ACCOUNT, None)
    if account is not None:
        account.close(exitstatus)
    for writer in (_CONFIG.get("writer"), account.writer if account is not None else None):
        if writer is not None and "w" in writer.holder:
            writer.holder["w"].close()
    if getattr(config, "workerinput", None) is None:
        # Every case is recorded by now. xdist shuts its workers down after this hook (2-3 s for
        # 16 CUDA processes to exit on an H100 host): the report is written meanwhile, and the
        # summary waits for it (_report_written).
        s.report_writer = threading.Thread(target=_render_and_trace, args=(config,), name="attnsuite-report")
        s.report_writer.start()


def _render_and_trace(config) -> None:
    _render(config)
    _write_traces(config)


def _report_written(config) -> None:
    s = config.stash.get(SUITE, None)
    writer = getattr(s, "report_writer", None)
    if writer is not None:
        writer.join()
        s.report_writer = None


def pytest_unconfigure(config):
    _report_written(config)  # a run without the terminal summary (-p no:terminal) too


def _write_traces(config) -> None:
    """--trace-out: the workload cases' records as FlashInfer-Trace traces (the controller, once)."""
    s = suite(config)
    if s.options.trace_out is None or not s.options.run_dir.is_dir():
        return
    from .flashinfer_trace.traces import write_traces

    try:
        s.trace_summary = write_traces(read_records([s.options.run_dir]), s.options.trace_out)
    except Exception as exc:  # the records are safe on disk; traces can be written from them again
        s.trace_summary = f"traces NOT written ({type(exc).__name__}: {exc})"


def _render(config) -> None:
    s = suite(config)
    run_dir = s.options.run_dir
    if s.options.report_path is None or not run_dir.is_dir() or not any(run_dir.glob("*.jsonl")):
        return
    from .report import render_runs

    try:  # records, each run's run.json (the interrupted-run banner) and what could not be read
        render_runs([run_dir], s.options.report_path)
    except Exception as exc:  # the records are safe on disk; the report can be re-rendered
        s.report_error = f"{type(exc).__name__}: {exc}"


def pytest_terminal_summary(terminalreporter, config):
    _report_written(config)
    s = config.stash.get(SUITE, None)
    if s is None or not s.options.run_dir.is_dir() or not any(s.options.run_dir.glob("*.jsonl")):
        return
    from .summary import summary_lines

    terminalreporter.section("attnsuite")
    account = config.stash.get(ACCOUNT, None)
    if account is not None and account.interrupted:
        terminalreporter.write_line(f"INTERRUPTED ({account.interrupted}): the records and report hold what ran")
    for line in summary_lines(read_records([s.options.run_dir])):
        terminalreporter.write_line(line)
    if s.trace_summary:
        terminalreporter.write_line(s.trace_summary)
    terminalreporter.write_line(f"records: {s.options.run_dir}")
    if s.report_error:
        terminalreporter.write_line(f"report NOT written ({s.report_error}); re-render with "
                                    f"python -m attnsuite.report {s.options.run_dir}")
    elif s.options.report_path is not None:
        terminalreporter.write_line(f"report: {s.options.report_path}  "
                                    f"(merge runs: python -m attnsuite.report reports/runs/*)")
