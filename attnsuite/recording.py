"""From a finished item to its record: pytest's phase reports give the verdict, the item's stash
gives the frozen outcome, and ``records.build_record`` makes the line, as soon as the case's
teardown is reported. A single pytest process writes it to the run's records; an xdist worker
sends it to the controller on the teardown report (attnsuite/transport.py) and keeps a local
copy."""
from __future__ import annotations

import pytest

from . import outcome as _verdicts
from .collection import OUTCOME, PARAM, CaseParam
from .records import build_record
from .transport import attach
from .context import now
from .session import SuiteSession

PHASES = pytest.StashKey[dict]()
STARTED = pytest.StashKey[str]()


def verdict(phases: dict, outcome) -> tuple[str, str | None, str]:
    """(outcome, stage, message): pytest's verdict, refined by the case's own outcome where it
    knows better (an out-of-memory run, the stage and message of a failure)."""
    kind, stage, message = _verdicts.classify(phases)
    if outcome is None:
        return kind, stage, message
    if outcome.status == "oom" and kind == "skip":
        return "oom", outcome.stage, outcome.message
    if kind in ("fail", "xfail") and outcome.status == "fail":
        return kind, outcome.stage, message or outcome.message
    return kind, stage or outcome.stage, message


def item_record(session: SuiteSession, item, phases: dict) -> dict | None:
    param: CaseParam | None = item.stash.get(PARAM, None)
    if param is None:
        return None
    outcome = item.stash.get(OUTCOME, None)
    run = session.run_context(item.nodeid, param)
    run.update(started_at=item.stash.get(STARTED, None), finished_at=now(),
               duration_s=sum(getattr(r, "duration", 0.0) or 0.0 for r in phases.values()))
    return build_record(param.case, param.impl, session.device_info(), outcome, verdict(phases, outcome),
                        session.env(), run)


def on_report(session: SuiteSession, writer, item, report) -> None:
    """Keep each phase's report; at teardown, write the case's record."""
    phases = item.stash.setdefault(PHASES, {})
    phases[report.when] = report
    if report.when == "teardown":
        rec = item_record(session, item, phases)
        if rec is not None:
            if session.in_worker:
                attach(report, rec)
            writer().write(rec)
