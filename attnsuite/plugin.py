"""The pytest plugin: thin hooks around one ``SuiteSession`` per process (attnsuite/session.py),
kept in ``config.stash`` (attnsuite/context.py). The work is elsewhere: starting a process in
configure.py, options in options.py, collection in collection.py, benchmark items in
bench/selection.py, running in runner.py, records in recording.py, the run as a whole (crashes,
cases never run, interrupts) in accounting.py, a hung case in hung.py, the end of the run in
finish.py, the terminal's lines in summary.py, the report in attnsuite/report.

It is loaded by the ``pytest11`` entry point of the installed package (so its options parse
wherever pytest starts), or by the checkout's ``conftest.py`` where the package is not
installed; both name it ``attnsuite.plugin``, so pytest registers it once."""
from __future__ import annotations

import os

import pytest

# numpy's OpenBLAS does one job in this suite: the Triton interpreter's tl.dot, on tiles of a few
# hundred rows at most. Its threads spin between calls and took the cores from torch (inputs,
# references) and from the other xdist workers: on 2 cores the quick profile took 45.3 s with
# OpenBLAS's default threads and 29.9 s with one (case time 80.9 s -> 50.6 s). OpenBLAS reads this
# when numpy loads, which torch does in the imports below; a value the user set is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from . import collection, configure as starting, finish, hung  # noqa: E402
from .accounting import RunAccount, is_crash  # noqa: E402
from .collection import PARAM  # noqa: E402
from .context import ACCOUNT, SUITE, now, suite  # noqa: E402
from .devices import device_class  # noqa: E402
from .options import add_options  # noqa: E402
from .scheduling import auto_workers, contiguous_scheduler, tolerate_dead_workers, usable_cpus  # noqa: E402
from .transport import carried  # noqa: E402


def _suite(config):
    """The session, or None in a run that is not a suite run (configure.is_suite_run)."""
    return config.stash.get(SUITE, None)


def pytest_addoption(parser):
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, args):
    """Loaded by the entry point: ``--workloads DIR`` with a space keeps the checkout's rootdir."""
    from .rootdir import settle

    settle(early_config, args)


def pytest_configure(config):
    if starting.is_suite_run(config):
        starting.configure(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    if _suite(node.config) is None:
        return
    options = suite(node.config).options
    node.workerinput["attnsuite_run_id"] = options.run_id
    node.workerinput["attnsuite_records_dir"] = node.config.getoption("records_dir")
    tolerate_dead_workers(node)


def pytest_report_header(config):
    if _suite(config) is None:
        return None
    o = suite(config).options
    mode = f" compile-only for {','.join(o.compile_targets)}" if o.compile_targets else ""
    lines = [f"attnsuite: device={o.device_kind}{mode} profile={o.profile} records={o.run_dir}"]
    if o.workloads is not None:
        from .flashinfer_trace.workloads import load

        lines.append(f"attnsuite: {load(str(o.workloads)).summary()} from {o.workloads}")
    return lines


# -- collection -------------------------------------------------------------------------------

def pytest_collect_file(file_path, parent):
    if _suite(parent.config) is None:
        return None
    return collection.collect_file(file_path, parent)


def pytest_generate_tests(metafunc):
    if "bench_case" in metafunc.fixturenames and _suite(metafunc.config) is not None:
        from .bench.selection import bench_params

        metafunc.parametrize("bench_case", bench_params(metafunc.config))


def pytest_collection_modifyitems(config, items):
    if _suite(config) is not None:
        collection.order_and_time(config, items)


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
    if _suite(config) is None or suite(config).options.device_kind == "cpu":
        return None
    return contiguous_scheduler(config, log)


def pytest_collection_finish(session):
    account = session.config.stash.get(ACCOUNT, None)
    if account is not None and not suite(session.config).controller:
        account.collection(item.nodeid for item in session.items if collection.is_case(item))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    account = node.config.stash.get(ACCOUNT, None)
    if account is not None:
        account.collection(ids)


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
    if _suite(item.config) is None or not collection.is_case(item):
        return
    from .recording import STARTED

    session = suite(item.config)
    item.stash[STARTED] = now()
    if PARAM not in item.stash:  # a benchmark: its param comes from the case it times
        param = session.bench_param(item.callspec.id)
        if param is not None:
            item.stash[PARAM] = param
    hung.arm(item)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if _suite(item.config) is not None and collection.is_case(item):
        from .recording import on_report

        if report.when == "teardown":
            hung.disarm(item)
        session = suite(item.config)
        on_report(session, session.writer, item, report)
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


#: pytest_runtest_logreport gets no config: the one this process runs under.
_CONFIG: dict = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG["config"] = session.config
    s = _suite(session.config)
    if s is not None and not s.controller and getattr(session.config, "workerinput", None) is not None:
        starting.dump_faults_beside_records(s)


def _account_of_reports() -> RunAccount | None:
    config = _CONFIG.get("config")
    return config.stash.get(ACCOUNT, None) if config is not None else None


# -- end of session ---------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    finish.finish(session.config, exitstatus)


def pytest_unconfigure(config):
    finish.report_written(config)  # a run without the terminal summary (-p no:terminal) too


def pytest_terminal_summary(terminalreporter, config):
    from .summary import terminal_summary

    terminal_summary(terminalreporter, config)
