"""Records and run status as the report reads them: tolerant of anything a runs directory may
hold (a stray file, a torn last line, a value that is no record), and counting what it could not
use, by reason, so the page can say so. Whether a value is a usable record is the harness's
rule (``attnsuite.records.normalize``), not this module's.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from attnsuite import records as records_module


@dataclass
class Loaded:
    records: list[dict] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)  # reason -> how many records/lines
    statuses: list[dict] = field(default_factory=list)  # the runs' run.json contents


def _why(raw: Any) -> str:
    """Why ``records.normalize`` turned a value down, in a few words for the page."""
    if not isinstance(raw, dict):
        return "not a JSON object"
    schema = raw.get("schema")
    if isinstance(schema, bool) or not isinstance(schema, int) or schema > records_module.SCHEMA:
        return f"schema {schema!r} (this report reads schemas up to {records_module.SCHEMA})"
    missing = [k for k in records_module.REQUIRED if not (isinstance(raw.get(k), str) and raw.get(k))]
    return f"no usable {', '.join(missing)}" if missing else "not a record"


def clean(raw: Iterable[Any]) -> tuple[list[dict], Counter]:
    """The usable records, normalized by the harness's own rule (``records.normalize``: odd
    values filled in, so merging and sorting cannot fail), and why each other one was left out."""
    kept, skipped = [], Counter()
    for value in raw:
        rec = records_module.normalize(value)
        if rec is None:
            skipped[_why(value)] += 1
        else:
            kept.append(rec)
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
    """The run status (``run.json``) of each run directory that has one; a run without it (an
    older harness, a run still going) simply gets no banner."""
    try:
        return records_module.read_run_status(list(dirs))
    except OSError:
        return []


def load(paths: Iterable[str | os.PathLike]) -> Loaded:
    files, dirs, skipped = record_files(paths)
    values, unreadable = read_lines(files)
    recs, unusable = clean(values)
    return Loaded(recs, skipped + unreadable + unusable, read_statuses(dirs))
