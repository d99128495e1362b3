"""Records and run status as the report reads them: tolerant of anything a run directory may
hold (a torn last line, records of another schema, nulls and odd types from a producer being
written in parallel), and counting what it could not use so the page can say so.

The harness's own ``attnsuite.records.read_records`` keeps only what the current harness
writes; the report also renders older schemas, and must never fail on a partial record set.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from attnsuite import records as records_module
from attnsuite.report.fields import text

#: The record schemas this report renders (1: the first harness; 2: oom/not_run, phases,
#: elapsed_s, device/host timing, compile hazards).
KNOWN_SCHEMAS = (1, 2)
#: Written by the controller (or the single process) into each run directory.
RUN_STATUS_FILE = "run.json"


@dataclass
class Loaded:
    records: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> how many records/lines
    statuses: list[dict] = field(default_factory=list)  # the runs' run.json contents


def _name(value: Any) -> str | None:
    """A required name field as text: strings as they are, numbers written out, anything else
    (null, a list, a dict, an empty string) unusable."""
    if isinstance(value, str):
        return value or None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


def clean(raw: Iterable[Any]) -> tuple[list[dict], Counter]:
    """Copies of the usable records with their key fields made text (so merging and sorting
    cannot fail), and why each other one was left out."""
    kept, skipped = [], Counter()
    for rec in raw:
        if not isinstance(rec, dict):
            skipped["not a JSON object"] += 1
            continue
        schema = rec.get("schema")
        if isinstance(schema, bool) or schema not in KNOWN_SCHEMAS:
            skipped[f"schema {schema!r} (this report reads schemas "
                    f"{', '.join(map(str, KNOWN_SCHEMAS))})"] += 1
            continue
        names = {k: _name(rec.get(k)) for k in ("case_id", "device", "outcome")}
        missing = [k for k, v in names.items() if v is None]
        if missing:
            skipped[f"no usable {' or '.join(missing)}"] += 1
            continue
        out = dict(rec, **names)
        out["family"] = _name(rec.get("family")) or names["case_id"].split("[", 1)[0]
        out["impl"] = text(rec.get("impl"))
        out["mode"] = text(rec.get("mode")) or "numeric"
        out["finished_at"] = text(rec.get("finished_at"))
        for key in ("run_id", "profile", "nodeid", "repro", "stage", "dtype"):
            if rec.get(key) is not None and not isinstance(rec.get(key), str):
                out[key] = text(rec.get(key))
        kept.append(out)
    return kept, skipped


def merge(recs: list[dict]) -> list[dict]:
    """One record per (case, implementation, device, mode): the latest (the harness's rule)."""
    return records_module.merge_latest(recs)


def record_files(paths: Iterable[str | os.PathLike]) -> tuple[list[Path], list[Path], Counter]:
    """The .jsonl files under the given run directories or files, the directories that may hold
    a run status, and what was passed that holds no records. A path that does not exist raises
    FileNotFoundError (a typo, not an odd record)."""
    files, dirs, skipped = [], [], Counter()
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("*.jsonl"))
            files += found
            dirs += sorted({f.parent for f in found} | {p})
        elif p.suffix == ".jsonl" and p.is_file():
            files.append(p)
            dirs.append(p.parent)
        elif p.exists():
            skipped[f"not a run directory or .jsonl file: {p.name}"] += 1
        else:
            raise FileNotFoundError(f"no records at {p} (expected a run directory or a .jsonl file)")
    return files, list(dict.fromkeys(dirs)), skipped


def read_lines(files: Iterable[Path]) -> tuple[list[Any], Counter]:
    values, skipped = [], Counter()
    for f in files:
        try:
            content = f.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            skipped[f"unreadable file ({type(exc).__name__})"] += 1
            continue
        for line in content.splitlines():
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except (json.JSONDecodeError, ValueError):
                skipped["line that is not JSON (e.g. the one a killed process was writing)"] += 1
    return values, skipped


def read_statuses(dirs: Iterable[Path]) -> list[dict]:
    """The run status of each directory that has one. Uses the harness's reader when it has one
    (``attnsuite.records.read_run_status``), else reads ``run.json`` as the records contract
    describes it; anything unreadable is left out (the page then shows no banner for it)."""
    dirs = list(dirs)
    reader = getattr(records_module, "read_run_status", None)
    if reader is not None:
        try:
            found = reader(dirs)
            found = list(found.values()) if isinstance(found, dict) else list(found or [])
            return [s for s in found if isinstance(s, dict)]
        except Exception:  # a partial run directory must not stop the report
            pass
    statuses = []
    for d in dirs:
        path = Path(d) / RUN_STATUS_FILE
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(value, dict):
            statuses.append(value)
    return statuses


def load(paths: Iterable[str | os.PathLike]) -> Loaded:
    files, dirs, skipped = record_files(paths)
    values, unreadable = read_lines(files)
    recs, unusable = clean(values)
    return Loaded(recs, skipped + unreadable + unusable, read_statuses(dirs))
