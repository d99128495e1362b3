"""Which host and which device ran what: outcomes and time per (host, device), so a run over
several GPUs or hosts shows a faulty card as one row full of failures or crashes instead of
failures scattered over the families.

A record names its device by kind, index and UUID (``device_index``, ``device_uuid``) and its
host in ``env.host``. The records xdist's controller writes itself (a crash, a case never run)
have no device open; a crash is placed on the device its worker used in the same run, read off
that worker's other records."""
from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from typing import Iterable

from attnsuite.report.bench_records import is_bench
from attnsuite.report.fields import mapping, text
from attnsuite.report.fmt import fmt_duration, fmt_percent
from attnsuite.report.rows import OUTCOMES, case_anchor, case_seconds, is_bad, outcome, outcome_class



def place(rec: dict) -> tuple[str, str, str, str]:
    """(host, device kind, device index, device uuid) of one record, as text."""
    index = rec.get("device_index")
    return (text(mapping(rec.get("env")).get("host")), text(rec.get("device")),
            "" if index is None else text(index), text(rec.get("device_uuid")))


def _worker_places(records: Iterable[dict]) -> dict[tuple[str, str], tuple]:
    """(run id, worker) -> the place its records with a device name."""
    found = {}
    for r in records:
        if r.get("device_index") is not None and r.get("worker"):
            found.setdefault((text(r.get("run_id")), text(r.get("worker"))), place(r))
    return found


def placement_rows(records: list[dict]) -> list[dict]:
    """One row per (host, device): conformance outcomes, benchmarks, case time (total, share of
    all case time, median, slowest case) and the workers that ran there."""
    workers = _worker_places(records)
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        key = place(r)
        if key[2] == "":  # written by the controller: the device of the worker that ran it, if known
            key = workers.get((text(r.get("run_id")), text(r.get("worker"))), key)
        groups[key].append(r)
    all_seconds = sum(case_seconds(r) or 0.0 for r in records if not is_bench(r))
    rows = []
    for (host, kind, index, uuid), recs in sorted(groups.items()):
        cases = [r for r in recs if not is_bench(r)]
        counts = Counter(outcome(r) for r in cases)
        seconds = [s for s in (case_seconds(r) for r in cases) if s is not None]
        slowest = max(cases, key=lambda r: case_seconds(r) or 0.0) if seconds else None
        rows.append({
            "host": host or "(unknown host)",
            "device": f"{kind}:{index}" if index else f"{kind} (no device: written by the controller)",
            "name": text(mapping(recs[0].get("env")).get("device_name")),
            "uuid": uuid,
            "workers": ", ".join(sorted({text(r.get("worker")) for r in recs if r.get("worker")})),
            "cases": len(cases),
            "benchmarks": len(recs) - len(cases),
            "counts": [{"outcome": o, "count": counts[o], "class": outcome_class(o)}
                       for o in list(OUTCOMES) + sorted(set(counts) - set(OUTCOMES)) if counts[o]],
            "bad": sum(1 for r in cases if is_bad(r)),
            "total": fmt_duration(sum(seconds)) if seconds else "",
            "share": fmt_percent(sum(seconds) / all_seconds) if seconds and all_seconds > 0 else "",
            "median": fmt_duration(statistics.median(seconds)) if seconds else "",
            "slowest": text(slowest.get("case_id")) if slowest else "",
            "slowest_anchor": case_anchor(slowest) if slowest else "",
        })
    return rows
