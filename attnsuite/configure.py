"""Starting the suite in one pytest process (``pytest_configure``): whether this run is a suite
run at all, the options read once, the kernels' settings, the device opened, the session and,
in the process that sees every case, the run's account (attnsuite/accounting.py).

The plugin loads wherever pytest starts in an environment that has attnsuite installed (its
``pytest11`` entry point), so a run whose rootdir has no family registry (another project's
tests) is left alone: the options parse, nothing else happens."""
from __future__ import annotations

import dataclasses
import os

import pytest

from . import registry
from .accounting import RunAccount
from .collection import families_asked
from .context import ACCOUNT, SUITE
from .devices import DeviceUnavailable, device_class, host_device, open_device
from .options import OptionError, joined_option_values, read_options, value_options
from .session import SuiteSession

MARKERS = (("conformance", "a conformance case of a kernel family"),
           ("bench", "a headline benchmark case (tag)"), ("sweep", "a benchmark sweep case (tag)"),
           ("fuzz", "a case drawn by the fuzz profile (tag)"),
           ("workload", "a case from a FlashInfer-Trace workload, --workloads (tag)"),
           ("impl(name)", "the implementation a conformance case runs"))


def registry_name(config) -> str:
    return config.getini("attnsuite_families") or registry.DEFAULT_PACKAGE


def is_suite_run(config) -> bool:
    """Whether this pytest run can reach a family registry (``cases``, or the ini's
    ``attnsuite_families``). One that cannot but names a suite option is told why; one that
    names none is another project's run, which the plugin leaves alone."""
    name = registry_name(config)
    try:
        found = registry.package_dir(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent package is missing
        found = False
    if found:
        return True
    ours = value_options(config._parser) | {"--compile-only", "--autotune"}
    given = [a.split("=", 1)[0] for a in config.invocation_params.args if a.split("=", 1)[0] in ours]
    if given:
        raise pytest.UsageError(
            f"attnsuite: {given[0]} given, but the family registry package {name!r} cannot be imported "
            f"(rootdir {config.rootpath}); run pytest in the attnsuite checkout, name a path inside it "
            f"(pytest /path/to/attnsuite/cases ...), or set attnsuite_families in your ini file")
    return False


def configure(config) -> None:
    quiet_benchmark_under_xdist(config)
    workers_parse_our_options(config)
    for name, doc in MARKERS:
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
    session.only_families = families_asked(config, session)
    config.stash[SUITE] = session
    if workerinput and workerinput.get("workercount"):
        share_cores(int(workerinput["workercount"]))
    if workerinput is None:
        account = config.stash[ACCOUNT] = RunAccount(session, session.writer)
        if controller and config.option.maxworkerrestart is None:
            # A kernel that aborts on every call costs one worker per case: let a conformance run
            # get through a family of crashing cases before xdist gives up.
            config.option.maxworkerrestart = str(max(32, 4 * (config.option.numprocesses or 1)))
        account.max_restarts = int(config.option.maxworkerrestart) if controller else None
        stop_quietly_on_signals(account)


def quiet_benchmark_under_xdist(config) -> None:
    """pytest-benchmark disables itself under xdist anyway; older releases say so on stderr in
    every worker of a conformance run, which has no benchmark. Disabled up front, it is silent."""
    opt = config.option
    xdist = getattr(opt, "dist", "no") != "no" or os.environ.get("PYTEST_XDIST_WORKER")
    if xdist and hasattr(opt, "benchmark_disable") and not getattr(opt, "benchmark_enable", False) \
            and not getattr(opt, "benchmark_only", False):
        opt.benchmark_disable = True


def workers_parse_our_options(config) -> None:
    params = config.invocation_params
    args = joined_option_values(params.args, value_options(config._parser))
    if list(args) != list(params.args):
        config.invocation_params = dataclasses.replace(params, args=tuple(args))


def share_cores(workers: int) -> None:
    """Each xdist worker gets its share of the host's cores for torch's own threads: inputs,
    references and comparisons of 8 workers with a thread per core each would oversubscribe
    the host many times over. A thread count the user set (``OMP_NUM_THREADS``, which torch
    reads as it loads) is kept: they know what else runs on the host."""
    import torch

    if os.environ.get("OMP_NUM_THREADS", "").strip().isdigit():
        return
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def stop_quietly_on_signals(account: RunAccount) -> None:
    """``timeout`` and CI limits send SIGTERM, a terminal's Ctrl-C SIGINT: either ends the run
    quietly (attnsuite/stop.py), so what was recorded is kept and the summary and report are
    still written."""
    from .stop import QuietStop

    QuietStop(account).install()


def dump_faults_beside_records(session: SuiteSession) -> None:
    """A dying xdist worker's fault dump goes beside the records (the crash record quotes its
    tail), not into the terminal."""
    import faulthandler

    try:
        session.options.run_dir.mkdir(parents=True, exist_ok=True)
        fh = open(session.options.run_dir / f"{session.worker}.faults.txt", "a")
    except OSError:  # a host where the records directory cannot be made: dumps go to stderr
        return
    session.faults = fh
    faulthandler.enable(file=fh)
