"""A case the watchdog (attnsuite/watchdog.py) finds stuck where no signal reaches Python: armed
and disarmed around each case, and, when it fires, the case recorded as a timeout from the
watchdog's thread before the process is ended."""
from __future__ import annotations

import pytest

from .collection import OUTCOME, PARAM
from .context import ACCOUNT, now, suite
from .records import build_record
from .watchdog import Watchdog, grace

#: ``session.watchdog`` of a process that runs no case (xdist's controller).
_NONE = object()


def watchdog(config) -> Watchdog | None:
    session = suite(config)
    if session.watchdog is None:
        session.watchdog = _NONE if session.controller else \
            Watchdog(lambda item, seconds: on_expire(config, item, seconds))
    return None if session.watchdog is _NONE else session.watchdog


def arm(item) -> None:
    dog = watchdog(item.config)
    if dog is not None:
        timeout = suite(item.config).options.case_timeout
        dog.arm(item, timeout + grace(timeout))


def disarm(item) -> None:
    dog = watchdog(item.config)
    if dog is not None:
        dog.disarm()


def on_expire(config, item, seconds: float) -> None:
    """The case is stuck where no signal reaches Python: record it as a timeout from here; in a
    single process also close the run (cases never reached, run.json, report) before it ends."""
    session = suite(config)
    param = item.stash.get(PARAM, None)
    if param is not None:
        run = session.run_context(item.nodeid, param)
        run.update(finished_at=now(), elapsed_s=round(seconds, 3), duration_s=seconds)
        message = (f"Timeout (>{seconds:.0f}s, watchdog): the case did not return and did not respond to "
                   f"pytest-timeout's signal (stuck in native code?); the process was ended")
        rec = build_record(param.case, param.impl, session.device_info(), item.stash.get(OUTCOME, None),
                           ("timeout", "launch", message), session.env(), run)
        session.writer().write(rec)
        if session.in_worker:
            _send_to_controller(config, item, rec)
    account = config.stash.get(ACCOUNT, None)
    if account is not None:  # one process: nobody else will close the run
        from .finish import render

        account.finish(item.nodeid)
        account.interrupted = f"watchdog: {item.nodeid} hung past {seconds:.0f}s"
        account.close(None)
        render(config)


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
