"""Everything the page template needs, assembled from the section builders. The only module
that knows every section; none of them imports it."""
from __future__ import annotations

from collections import Counter
from typing import Iterable

from attnsuite.records import TIGHT_HEADROOM
from attnsuite.report.bench import bench_context
from attnsuite.report.bench_records import is_bench
from attnsuite.report.fields import num, text
from attnsuite.report.fmt import fmt_num
from attnsuite.report.hazards import flagged_hazards
from attnsuite.report.known import known_failures
from attnsuite.report.placement import placement_rows
from attnsuite.report.rows import FILTER_DIMS, OUTCOMES, filter_attrs, outcome
from attnsuite.report.sections import (
    case_groups,
    devices_present,
    environment_rows,
    family_device_matrix,
    outcome_counts,
    quality_groups,
    run_summaries,
    tight_cases,
)
from attnsuite.report.side_by_side import side_by_side
from attnsuite.report.timing import timing_context

FILTER_LABELS = {"family": "Family", "device": "Device", "impl": "Implementation",
                 "outcome": "Outcome", "mode": "Mode"}


def filter_options(records: Iterable[dict]) -> list[dict]:
    """The filter bar: per dimension, every value present with how many records have it
    (outcomes in their usual order, the rest sorted)."""
    counts = {dim: Counter() for dim in FILTER_DIMS}
    for r in records:
        for dim, value in filter_attrs(r).items():
            counts[dim][value] += 1
    dims = []
    for dim in FILTER_DIMS:
        values = sorted(counts[dim])
        if dim == "outcome":
            values = [o for o in OUTCOMES if o in counts[dim]] + [v for v in values if v not in OUTCOMES]
        dims.append({"name": dim, "label": FILTER_LABELS[dim],
                     "options": [{"value": v, "count": counts[dim][v]} for v in values]})
    return dims


def status_banners(statuses: Iterable[dict]) -> list[dict]:
    """A line for each run that did not record every case it collected."""
    banners = []
    for s in statuses:
        collected, recorded = num(s.get("collected")), num(s.get("recorded"))
        interrupted = text(s.get("interrupted"))
        reason = text(s.get("not_run_reason"))
        short = collected is not None and recorded is not None and recorded < collected
        if not (interrupted or short or reason):
            continue
        counted = (f"{fmt_num(recorded)} of {fmt_num(collected)} cases recorded"
                   if collected is not None and recorded is not None else "")
        banners.append({"run_id": text(s.get("run_id")) or "(no run id)",
                        "state": f"interrupted ({interrupted})" if interrupted else "incomplete",
                        "counted": counted, "reason": reason,
                        "finished_at": text(s.get("finished_at"))})
    return banners


def skipped_notes(skipped: Counter) -> list[dict]:
    return [{"reason": reason, "count": n} for reason, n in sorted(skipped.items()) if n]


def build_context(raw_records: list[dict], merged: list[dict], *, title: str, generated_at: str,
                  run_status: Iterable[dict] = (), skipped: Counter | None = None, base_dir=None) -> dict:
    """Everything the template needs. ``raw_records`` are as read (cleaned); ``merged`` one per
    (case, implementation, device, mode); ``base_dir``: the page's directory (links to files
    beside it, the repro scripts, are made relative to it)."""
    # Benchmark records are timings, not conformance cases: they count in the runs, the
    # environments, the filters and their own section only.
    cases = [r for r in merged if not is_bench(r)]
    timing = timing_context(merged)
    return {
        "title": title,
        "outcome_classes": list(OUTCOMES) + ["other"],
        "generated_at": generated_at,
        "total": len(cases),
        "runs": run_summaries(raw_records, merged),
        "banners": status_banners(run_status),
        "skipped": skipped_notes(skipped or Counter()),
        "devices": devices_present(merged),
        "filters": filter_options(merged),
        "environments": environment_rows(merged),
        "outcome_counts": outcome_counts(cases),
        "unknown_outcomes": sorted({outcome(r) for r in merged} - set(OUTCOMES)),
        "matrix": family_device_matrix(cases),
        "side_by_side": side_by_side(merged, base_dir),
        "placement": placement_rows(merged),
        "tight_threshold": fmt_num(TIGHT_HEADROOM),
        "tight_cases": tight_cases(cases),
        "hazards": flagged_hazards(cases),
        "timing": timing,
        "known_failures": known_failures(cases),
        "case_groups": case_groups(cases),
        "quality_groups": quality_groups(cases),
        "bench": bench_context(merged),
    }
