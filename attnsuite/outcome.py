"""From pytest's per-phase reports to one verdict per case: pass, fail, xfail, xpass, skip,
error, crash or timeout, with the stage it happened in and a message."""
from __future__ import annotations

TIMEOUT_MARK = "Timeout (>"
#: xdist reports a dead worker with this phase name.
CRASH_PHASE = "???"


def _text(report) -> str:
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skip: (path, lineno, "Skipped: reason")
        return str(longrepr[2])
    crash = getattr(getattr(longrepr, "reprcrash", None), "message", None)
    return crash if crash else str(longrepr)


def classify(reports: dict) -> tuple[str, str | None, str]:
    """(outcome, stage, message) from the {phase: report} of one test item."""
    crash = reports.get(CRASH_PHASE)
    if crash is not None:
        return "crash", "launch", _text(crash)
    setup, call, teardown = reports.get("setup"), reports.get("call"), reports.get("teardown")
    if setup is not None and setup.skipped:
        if hasattr(setup, "wasxfail"):
            return "xfail", None, str(setup.wasxfail)
        return "skip", None, _text(setup).removeprefix("Skipped: ")
    if setup is not None and setup.failed:
        return "error", "inputs", _text(setup)
    if call is not None:
        if call.skipped and hasattr(call, "wasxfail"):
            return "xfail", None, _text(call) or str(call.wasxfail)
        if call.skipped:
            return "skip", None, _text(call).removeprefix("Skipped: ")
        if call.failed:
            text = _text(call)
            if TIMEOUT_MARK in text:
                return "timeout", "launch", text
            if "[XPASS(strict)]" in text:
                return "xpass", None, text
            return "fail", None, text
        if hasattr(call, "wasxfail"):
            return "xpass", None, str(call.wasxfail)
    if teardown is not None and teardown.failed:
        return "error", "teardown", _text(teardown)
    return "pass", None, ""
