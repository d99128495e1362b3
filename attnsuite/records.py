"""One JSON line per conformance case: writing them safely, reading and merging them back.

Each process appends to its own file (``<run_dir>/<writer>.jsonl``) and flushes after every
record, so xdist workers never share a file and a killed run keeps every case it finished.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Iterable, Iterator

SCHEMA = 2
#: oom: the device ran out of memory (never a kernel failure); not_run: the run ended (interrupt,
#: restart budget) before the case ran.
OUTCOMES = ("pass", "fail", "xfail", "xpass", "skip", "error", "crash", "timeout", "oom", "not_run")
STAGES = ("inputs", "validate", "compile", "launch", "first_call", "impl", "contract", "numeric", "reference",
          "compare", "teardown")
#: Compile-only stages (attnsuite/compile): where a compile for a target stopped.
COMPILE_STAGES = ("frontend", "ttir", "ttgir", "llvm", "ptxas", "smem", "grid", "adapter", "bishengir",
                  "ub_overflow", "toolchain")
MODES = ("numeric", "compile")
#: A pass whose headroom (allowed / measured error) is below this is shown as tight.
TIGHT_HEADROOM = 1.25


class RecordWriter:
    """Appends records to ``<run_dir>/<writer>.jsonl``, each flushed to disk before ``write``
    returns; safe to call from the case watchdog's thread too."""

    def __init__(self, run_dir: str | os.PathLike, writer: str, *, suffix: str = ".jsonl", create: bool = True,
                 fsync: bool = True):
        self.path = Path(run_dir) / f"{writer}{suffix}"
        #: fsync after each record: a process running foreign kernels may die at any moment. The
        #: xdist controller runs none; its flushed lines survive its own death without it.
        self.fsync = fsync
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = None
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = dumps(record) + "\n"
        with self._lock:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = open(self.path, "a", encoding="utf-8")
            self._fh.write(line)
            self._fh.flush()
            if self.fsync:
                os.fsync(self._fh.fileno())

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None


def dumps(record: dict) -> str:
    """A record as one JSON line (no newline), as the records files hold it."""
    return json.dumps(record, sort_keys=True, default=_jsonable)


def _jsonable(value):
    # Non-finite floats are valid in our records (an infinite headroom, a NaN error) and json
    # writes them as bare tokens Python reads back; anything else unknown becomes its repr.
    return repr(value)


def iter_record_files(paths: Iterable[str | os.PathLike]) -> Iterator[Path]:
    for p in map(Path, paths):
        if p.is_dir():
            yield from sorted(p.rglob("*.jsonl"))
        elif p.suffix == ".jsonl" and p.exists():
            yield p
        else:
            raise FileNotFoundError(f"no records at {p} (expected a run directory or a .jsonl file)")


#: Fields a record must have for the report to place it; anything else may be missing.
REQUIRED = ("case_id", "family", "device", "outcome")


def normalize(rec) -> dict | None:
    """A record the report can use, or None. Odd values a foreign or crashed writer left
    (``impl: null``, numbers as strings, a missing mode) are filled in, never fatal."""
    if not isinstance(rec, dict) or not all(isinstance(rec.get(k), str) and rec.get(k) for k in REQUIRED):
        return None
    if not isinstance(rec.get("schema"), int) or rec["schema"] > SCHEMA:
        return None
    rec = dict(rec)
    rec["impl"] = rec.get("impl") if isinstance(rec.get("impl"), str) else "unknown"
    rec["mode"] = rec.get("mode") if isinstance(rec.get("mode"), str) else "numeric"
    for key in ("params", "metrics", "env", "compile", "phases", "timings", "memory"):
        if not isinstance(rec.get(key), dict):
            rec[key] = {}
    if not isinstance(rec.get("tags"), list):
        rec["tags"] = []
    if not isinstance(rec.get("library"), dict):  # records from before library adapters, or not a library's
        rec["library"] = None
    for key in ("finished_at", "started_at", "run_id", "worker", "repro", "nodeid", "repro_script", "unsupported"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            rec[key] = str(rec[key])
    return rec


def read_records(paths: Iterable[str | os.PathLike], skipped: list | None = None) -> list[dict]:
    """All records under the given run directories or files, normalized (``normalize``). A torn
    last line (a killed writer) and records the report cannot place are left out; each one left
    out is appended to ``skipped`` as "file:line: why" when a list is given."""
    records = []
    for f in iter_record_files(paths):
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                _note(skipped, f, n, "not JSON (a line a killed process was writing?)")
                continue
            rec = normalize(raw)
            if rec is None:
                _note(skipped, f, n, "not a record this report can place (schema, case_id, family, device, "
                                     "outcome)")
                continue
            records.append(rec)
    return records


def _note(skipped, path, line, why) -> None:
    if skipped is not None:
        skipped.append(f"{path}:{line}: {why}")


def record_key(rec: dict) -> tuple:
    return (rec["case_id"], rec.get("impl") or "", rec["device"], rec.get("mode") or "numeric")


def merge_latest(records: Iterable[dict]) -> list[dict]:
    """One record per (case, implementation, device, mode): the most recently finished one."""
    latest: dict[tuple, dict] = {}
    for rec in records:
        key = record_key(rec)
        if key not in latest or (rec.get("finished_at") or "") >= (latest[key].get("finished_at") or ""):
            latest[key] = rec
    return sorted(latest.values(), key=lambda r: (r["family"], r["device"], r["case_id"], r.get("impl") or ""))


def build_record(case, impl: str, device: dict, outcome, verdict: tuple[str, str | None, str],
                 env: dict, run: dict) -> dict:
    """One record: a pure function of the case, the implementation, the device it ran on
    (``{"kind", "index", "uuid"}``), its frozen outcome (a ``CaseOutcome`` or None when it never
    produced one: a crash, a case not run), pytest's verdict ``(outcome, stage, message)``, the
    environment fingerprint and the run context (run_id, nodeid, profile, mode, worker, repro,
    started_at, finished_at, duration_s, known_failure, elapsed_s; library: the library behind
    an ecosystem implementation, attnsuite.ecosystem.library_info; repro_script: the stand-alone
    reproduction of a library's failure, attnsuite/repro_script.py). ``not_provided``: the outputs
an implementation declared it cannot return (an LSE-less kernel), which were not judged."""
    kind, stage, message = verdict
    result = outcome if outcome is not None else None
    params = dict(case.params) if case is not None else run.get("params", {})
    return {
        "schema": SCHEMA,
        "run_id": run.get("run_id"),
        "case_id": case.id if case is not None else run["case_id"],
        "nodeid": run.get("nodeid"),
        "family": case.family if case is not None else run["family"],
        "impl": impl,
        "device": device["kind"],
        "device_index": device.get("index"),
        "device_uuid": device.get("uuid"),
        "mode": run.get("mode", "numeric"),
        "worker": run.get("worker"),
        "dtype": params.get("dtype"),
        "params": _jsonable_params(params),
        "profile": run.get("profile"),
        "tags": sorted(case.tags) if case is not None else [],
        "outcome": kind,
        "stage": stage,
        "message": message[:20000] if message else None,
        "known_failure": run.get("known_failure"),
        "metrics": dict(result.metrics) if result else {},
        "headroom": result.headroom if result else None,
        "tolerance": dict(result.tolerance) if result and result.tolerance else None,
        "phases": dict(result.phases) if result else {},
        "memory": dict(result.memory) if result else {},
        "compile": dict(result.compile) if result else {},
        "quality": dict(result.quality) if result and result.quality else None,
        "bench": dict(result.bench) if result and result.bench else None,
        "adapter_notes": list(result.adapter_notes) if result else [],
        "not_provided": list(result.not_provided) if result else [],
        "duration_s": run.get("duration_s", 0.0),
        "elapsed_s": run.get("elapsed_s"),
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "env": env or {},
        "repro": run.get("repro"),
        "library": run.get("library"),
        "repro_script": run.get("repro_script"),
        "repro_script_error": run.get("repro_script_error"),
        "unsupported": result.message if result is not None and result.status == "unsupported" else None,
    }


def _jsonable_params(params: dict) -> dict:
    return json.loads(json.dumps(params, default=str))


# -- run status: what a run directory says about the run as a whole ------------------------------

RUN_STATUS = "run.json"


def write_run_status(run_dir: str | os.PathLike, status: dict) -> None:
    path = Path(run_dir) / RUN_STATUS
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(status, indent=1, sort_keys=True, default=str))
    tmp.replace(path)


def read_run_status(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """The ``run.json`` of every run directory given (or holding a given .jsonl file)."""
    found = []
    seen = set()
    for p in map(Path, paths):
        d = p if p.is_dir() else p.parent
        for f in sorted(d.rglob(RUN_STATUS)) if d.is_dir() else []:
            if f in seen:
                continue
            seen.add(f)
            try:
                status = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(status, dict):
                found.append(status)
    return found
