"""The run as a whole, kept by the process that sees every case (xdist's controller, or the one
pytest process): which cases were collected, started and recorded; a record for a case whose
worker died; ``not_run`` records for the cases a run never reached (interrupted, restart budget
spent); and the run's ``run.json`` status, so a report of a partial run says it is partial."""
from __future__ import annotations

import time
from pathlib import Path

from .outcome import CRASH_PHASE, _text
from .records import build_record, write_run_status
from .context import now
from .session import SuiteSession


class RunAccount:
    def __init__(self, session: SuiteSession, writer):
        self.session = session
        self.writer = writer
        self.collected: list[str] = []
        self._known: set[str] = set()
        self.started: dict[str, float] = {}
        self.finished: set[str] = set()
        self.crashes = 0
        #: Cases whose record this process received from a worker (attnsuite/transport.py).
        self.recorded: set[str] = set()
        #: Why the run ended early: "SIGINT", "SIGTERM", "watchdog", or None.
        self.interrupted: str | None = None
        self.max_restarts: int | None = None

    # -- events -----------------------------------------------------------------------------------
    def collection(self, ids) -> None:
        # Every xdist worker reports the whole collection: a set keeps this linear (a list scan
        # per id cost the controller about 1 s of a 2618-case run's start at 16 workers).
        for nodeid in ids:
            if nodeid not in self.finished and nodeid not in self._known:
                self._known.add(nodeid)
                self.collected.append(nodeid)

    def start(self, nodeid: str) -> None:
        self.started.setdefault(nodeid, time.monotonic())

    def finish(self, nodeid: str) -> None:
        self.finished.add(nodeid)

    def receive(self, record: dict) -> None:
        """A worker's record of a case it finished, off its report: into the run's records."""
        worker = str(record.get("worker") or "worker")
        if not worker.replace("-", "").replace("_", "").isalnum():
            worker = "worker"  # it names a file: nothing but a plain name
        self.writer(worker).write(record)
        if record.get("nodeid"):
            self.recorded.add(record["nodeid"])

    def crash(self, report) -> None:
        """A worker died running ``report.nodeid``: record it, unless the worker's watchdog
        already sent the case's record (a timeout) just before ending it."""
        self.crashes += 1
        nodeid = report.nodeid
        self.finished.add(nodeid)
        if nodeid in self.recorded:
            return
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
        message = _text(report)
        dump = self._fault_dump(worker)
        if dump:
            message += "\n" + dump
        rec = self._record(nodeid, ("crash", "launch", message), worker=worker,
                           elapsed_s=self._elapsed(nodeid))
        if rec is not None:
            self.writer().write(rec)

    # -- end of run -----------------------------------------------------------------------------
    def close(self, exitstatus) -> None:
        """Write ``not_run`` records for what never ran, then the run status."""
        reason = self._not_run_reason()
        missing = [n for n in self.collected if n not in self.finished]
        if reason is None and missing:
            reason = "the run ended before this case was reached"
        for nodeid in missing:
            rec = self._record(nodeid, ("not_run", None, reason), worker=None, elapsed_s=None)
            if rec is not None:
                self.writer().write(rec)
        write_run_status(self.session.options.run_dir, {
            "run_id": self.session.options.run_id, "collected": len(self.collected),
            "recorded": len([n for n in self.collected if n in self.finished]),
            "not_run": len(missing), "interrupted": self.interrupted,
            "not_run_reason": reason if missing else None, "crashes": self.crashes,
            "exitstatus": int(exitstatus) if exitstatus is not None else None, "finished_at": now()})

    def _not_run_reason(self) -> str | None:
        if self.interrupted:
            return f"the run was interrupted ({self.interrupted}) before this case ran"
        if self.max_restarts is not None and self.crashes > self.max_restarts:
            return (f"xdist's worker restart budget ({self.max_restarts}) was spent after {self.crashes} "
                    f"worker crashes; raise it with --max-worker-restart")
        return None

    # -- helpers -----------------------------------------------------------------------------------
    def _elapsed(self, nodeid: str) -> float | None:
        t0 = self.started.get(nodeid)
        return None if t0 is None else round(time.monotonic() - t0, 3)

    def _fault_dump(self, worker: str | None) -> str:
        """The tail of the dead worker's fault-handler dump (written beside the records)."""
        if worker is None:
            return ""
        path = Path(self.session.options.run_dir) / f"{worker}.faults.txt"
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        starts = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
        block = lines[starts[-1]:] if starts else lines[-25:]
        return "\n".join(line for line in block if line.strip() and not line.startswith("Extension modules"))[:4000]

    def _record(self, nodeid: str, verdict, *, worker, elapsed_s) -> dict | None:
        session = self.session
        param = session.param_for(nodeid)
        if param is None:
            return None
        run = session.run_context(nodeid, param, mode="bench" if nodeid.startswith("benchmarks/") else None)
        run.update(worker=worker or session.worker, finished_at=now(), elapsed_s=elapsed_s,
                   duration_s=elapsed_s or 0.0)
        return build_record(param.case, param.impl, session.device_info(), None, verdict, session.env(), run)


def is_crash(report) -> bool:
    return report.when == CRASH_PHASE
