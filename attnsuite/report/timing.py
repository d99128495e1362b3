"""Where the time of a run goes: totals per device and family, the phase totals of numeric
cases (inputs, first call, implementation, reference, comparison), and the slowest cases.

On ``cpu`` every duration is the Triton interpreter executing a kernel in Python: it says
where a CI run spends its time, and nothing about the kernel. ``device_timing_note`` says so
on a page without any device records.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from attnsuite.report.fields import text
from attnsuite.report.fmt import fmt_duration, fmt_percent
from attnsuite.report.rows import (
    PHASE_LABELS,
    PHASES,
    case_anchor,
    case_seconds,
    column,
    filter_attrs,
    outcome,
    outcome_class,
    phases,
)

#: How many of the slowest cases the section lists.
SLOWEST = 10
#: Devices whose durations are interpreter time, not kernel time.
INTERPRETED = ("cpu",)


def interpreted_only(records: Iterable[dict]) -> bool:
    """True when no record on the page ran on an accelerator (compile-only records do not count:
    they never launch anything)."""
    devices = {text(r.get("device")) for r in records if text(r.get("mode")) != "compile"}
    return bool(devices) and devices <= set(INTERPRETED)


def _share(part: float, whole: float) -> str:
    return fmt_percent(part / whole) if whole > 0 else ""


def phase_totals(records: list[dict]) -> list[dict]:
    """Per device column, the seconds spent in each phase summed over its cases, and what the
    phases do not cover (set-up, teardown, the harness)."""
    out = []
    by_column: dict[str, list] = defaultdict(list)
    for r in records:
        if phases(r):
            by_column[column(r)].append(r)
    for col, recs in sorted(by_column.items()):
        sums: dict[str, float] = defaultdict(float)
        for r in recs:
            for name, seconds in phases(r).items():
                sums[name] += seconds
        total = sum(case_seconds(r) or 0.0 for r in recs)
        covered = sum(sums.values())
        names = [p for p in PHASES if p in sums] + sorted(set(sums) - set(PHASES))
        items = [{"name": PHASE_LABELS.get(n, n), "seconds": fmt_duration(sums[n]),
                  "share": _share(sums[n], max(total, covered))} for n in names]
        if total > covered:
            items.append({"name": "outside the phases (set-up, teardown, harness)",
                          "seconds": fmt_duration(total - covered), "share": _share(total - covered, total)})
        out.append({"device": col, "cases": len(recs), "total": fmt_duration(max(total, covered)),
                    "interpreted": text(recs[0].get("device")) in INTERPRETED, "phases": items})
    return out


def family_totals(records: list[dict]) -> list[dict]:
    """Per (family, device column): cases, total seconds, share of the column, slowest case."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        if case_seconds(r) is not None:
            groups[(text(r.get("family")), column(r))].append(r)
    column_totals: dict[str, float] = defaultdict(float)
    for (_, col), recs in groups.items():
        column_totals[col] += sum(case_seconds(r) for r in recs)
    rows = []
    for (family, col), recs in groups.items():
        total = sum(case_seconds(r) for r in recs)
        slowest = max(recs, key=case_seconds)
        rows.append({"family": family, "device": col, "cases": len(recs), "seconds": total,
                     "total": fmt_duration(total), "share": _share(total, column_totals[col]),
                     "slowest": text(slowest.get("case_id")), "slowest_anchor": case_anchor(slowest),
                     "slowest_time": fmt_duration(case_seconds(slowest))})
    rows.sort(key=lambda r: (r["device"], -r["seconds"], r["family"]))
    return rows


def slowest_cases(records: list[dict], n: int = SLOWEST) -> list[dict]:
    """The slowest cases of each device column: interpreter seconds and GPU seconds never
    share a ranking."""
    by_column: dict[str, list] = defaultdict(list)
    for r in records:
        if case_seconds(r) is not None:
            by_column[column(r)].append(r)
    tables = []
    for col, timed in sorted(by_column.items()):
        timed.sort(key=lambda r: (-case_seconds(r), text(r.get("case_id"))))
        rows = []
        for r in timed[:n]:
            ph = phases(r)
            rows.append({"case_id": text(r.get("case_id")), "anchor": case_anchor(r),
                         "filters": filter_attrs(r), "device": col, "impl": text(r.get("impl")),
                         "outcome": outcome(r), "outcome_class": outcome_class(outcome(r)),
                         "total": fmt_duration(case_seconds(r)),
                         "phases": [fmt_duration(ph[p]) if p in ph else "" for p in PHASES]})
        tables.append({"device": col, "interpreted": text(timed[0].get("device")) in INTERPRETED,
                       "rows": rows, "show_phases": any(any(row["phases"]) for row in rows)})
    return tables


def timing_context(records: list[dict]) -> dict:
    """The "where the time goes" section."""
    slow = slowest_cases(records)
    return {
        "interpreted_only": interpreted_only(records),
        "phase_totals": phase_totals(records),
        "families": family_totals(records),
        "slowest": slow,
        "phase_names": [PHASE_LABELS[p] for p in PHASES],
    }
