"""The end of a run: the account closed (cases never reached, run.json), the writers closed,
and, in the process that sees every case, the report and the FlashInfer-Trace traces written
from the records on disk, in a thread the terminal summary waits for."""
from __future__ import annotations

import threading

from .context import ACCOUNT, SUITE, suite
from .records import read_records


def finish(config, exitstatus) -> None:
    s = config.stash.get(SUITE, None)
    if s is None or config.option.collectonly:  # --collect-only ran nothing: no records, no report
        return
    account = config.stash.get(ACCOUNT, None)
    if account is not None:
        account.close(exitstatus)
    s.close_writers()
    if getattr(config, "workerinput", None) is None:
        # Every case is recorded by now. xdist shuts its workers down after this hook (2-3 s for
        # 16 CUDA processes to exit on an H100 host): the report is written meanwhile, and the
        # summary waits for it (report_written).
        s.report_writer = threading.Thread(target=_render_and_trace, args=(config,), name="attnsuite-report")
        s.report_writer.start()


def _render_and_trace(config) -> None:
    render(config)
    write_traces(config)


def report_written(config) -> None:
    """Wait for the report thread, if one was started."""
    s = config.stash.get(SUITE, None)
    writer = getattr(s, "report_writer", None)
    if writer is not None:
        writer.join()
        s.report_writer = None


def write_traces(config) -> None:
    """--trace-out: the workload cases' records as FlashInfer-Trace traces (the controller, once)."""
    s = suite(config)
    if s.options.trace_out is None or not s.options.run_dir.is_dir():
        return
    from .flashinfer_trace.traces import write_traces as write

    try:
        s.trace_summary = write(read_records([s.options.run_dir]), s.options.trace_out)
    except Exception as exc:  # the records are safe on disk; traces can be written from them again
        s.trace_summary = f"traces NOT written ({type(exc).__name__}: {exc})"


def render(config) -> None:
    s = suite(config)
    run_dir = s.options.run_dir
    if s.options.report_path is None or not run_dir.is_dir() or not any(run_dir.glob("*.jsonl")):
        return
    from .report import render_runs

    try:  # records, each run's run.json (the interrupted-run banner) and what could not be read
        render_runs([run_dir], s.options.report_path)
    except Exception as exc:  # the records are safe on disk; the report can be re-rendered
        s.report_error = f"{type(exc).__name__}: {exc}"
