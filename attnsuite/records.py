"""One JSON line per conformance case: writing them safely, reading and merging them back.

Each process appends to its own file (``<run_dir>/<writer>.jsonl``) and flushes after every
record, so xdist workers never share a file and a killed run keeps every case it finished.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator

SCHEMA = 1
OUTCOMES = ("pass", "fail", "xfail", "xpass", "skip", "error", "crash", "timeout")
STAGES = ("inputs", "validate", "compile", "launch", "numeric", "reference", "teardown")
#: Compile-only stages (attnsuite/compile): where a compile for a target stopped.
COMPILE_STAGES = ("frontend", "ttir", "ttgir", "llvm", "ptxas", "smem", "grid", "adapter", "bishengir",
                  "ub_overflow", "toolchain")
MODES = ("numeric", "compile")
#: A pass whose headroom (allowed / measured error) is below this is shown as tight.
TIGHT_HEADROOM = 1.25


class RecordWriter:
    def __init__(self, run_dir: str | os.PathLike, writer: str):
        self.path = Path(run_dir) / f"{writer}.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = None

    def write(self, record: dict) -> None:
        if self._fh is None:
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(json.dumps(record, sort_keys=True, default=_jsonable) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


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


def read_records(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """All records under the given run directories or files; a torn last line is skipped."""
    records = []
    for f in iter_record_files(paths):
        for line in f.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # the line a killed process was writing
            if rec.get("schema") == SCHEMA:
                records.append(rec)
    return records


def record_key(rec: dict) -> tuple:
    return (rec["case_id"], rec.get("impl", ""), rec["device"], rec.get("mode") or "numeric")


def merge_latest(records: Iterable[dict]) -> list[dict]:
    """One record per (case, implementation, device, mode): the most recently finished one."""
    latest: dict[tuple, dict] = {}
    for rec in records:
        key = record_key(rec)
        if key not in latest or (rec.get("finished_at") or "") >= (latest[key].get("finished_at") or ""):
            latest[key] = rec
    return sorted(latest.values(), key=lambda r: (r["family"], r["device"], r["case_id"], r.get("impl", "")))


def build_record(reports: dict, info: dict, outcome: tuple[str, str | None, str]) -> dict:
    """One record from a case's payload (``info``) and its classified outcome."""
    kind, stage, message = outcome
    result = info.get("result") or {}
    return {
        "schema": SCHEMA,
        "run_id": info.get("run_id"),
        "case_id": info["case_id"],
        "nodeid": info.get("nodeid"),
        "family": info["family"],
        "impl": info.get("impl"),
        "device": info["device"],
        "device_index": info.get("device_index"),
        "mode": info.get("mode", "numeric"),
        "worker": info.get("worker"),
        "dtype": info.get("params", {}).get("dtype"),
        "params": info.get("params", {}),
        "profile": info.get("profile"),
        "tags": info.get("tags", []),
        "outcome": kind,
        "stage": stage,
        "message": message[:20000] if message else None,
        "known_failure": info.get("known_failure"),
        "metrics": result.get("metrics", {}),
        "headroom": result.get("headroom"),
        "tolerance": result.get("tolerance"),
        "timings": result.get("timings", {}),
        "memory": result.get("memory", {}),
        "compile": result.get("compile", {}),
        "quality": result.get("quality"),
        "bench": result.get("bench"),
        "duration_s": sum(getattr(r, "duration", 0.0) or 0.0 for r in reports.values()),
        "started_at": info.get("started_at"),
        "finished_at": info.get("finished_at"),
        "env": info.get("env", {}),
        "repro": info.get("repro"),
    }
