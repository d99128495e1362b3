"""Data shaping for the HTML report: records in, plain dicts and lists out.

Every function here takes records (already merged, unless it says otherwise) and returns
plain data the template iterates over; no HTML is produced here and no escaping is needed
(the template autoescapes everything). A record may lack any field except schema, case_id,
family, device and outcome, and any present field may be null or of an unexpected type, so
everything is read through the ``_str``/``_num``/``_dict`` helpers.

A new report section is a new function here plus a line in ``build_context`` and a block in
the template.
"""
from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from typing import Any, Iterable

from attnsuite.records import OUTCOMES, TIGHT_HEADROOM

# Outcomes that mean "something is wrong here": highlighted red, listed first.
BAD_OUTCOMES = ("fail", "error", "crash", "timeout", "xpass")
# Messages longer than this (or with more than one line) go into a <details> block.
LONG_MESSAGE_CHARS = 120

ENV_FIELDS = ("python", "torch", "triton", "triton_backend", "device_name", "driver", "host", "platform")
MISSING = "—"


# --------------------------------------------------------------------------- field access


def _str(value: Any) -> str:
    """A field as display text; None becomes the empty string."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _num(value: Any) -> float | None:
    """A field as a float, or None when it is missing or not a number ("inf"/"nan" strings count)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def outcome_class(outcome: str) -> str:
    """CSS class suffix for an outcome; anything outside the schema shares one class."""
    return outcome if outcome in OUTCOMES else "other"


def slug(text: str) -> str:
    """A fragment identifier for a name (family sections are linked from the matrix)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-") or "x"


def family_anchors(families: Iterable[str]) -> dict[str, str]:
    """A distinct fragment identifier per family, even where two names slug alike."""
    anchors: dict[str, str] = {}
    used: set[str] = set()
    for family in sorted(set(families)):
        base = anchor = "family-" + slug(family)
        n = 2
        while anchor in used:
            anchor, n = f"{base}-{n}", n + 1
        used.add(anchor)
        anchors[family] = anchor
    return anchors


# --------------------------------------------------------------------------- formatting


def fmt_num(value: Any, sig: int = 3) -> str:
    """Three significant digits; "inf" for infinity, "nan" for NaN, an em dash when missing."""
    x = _num(value)
    if x is None:
        return MISSING
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{sig}g}"


def fmt_duration(value: Any) -> str:
    s = _num(value)
    if s is None or math.isnan(s) or s < 0:
        return MISSING
    if math.isinf(s):
        return "inf"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.2f} s"
    minutes, seconds = divmod(s, 60)
    return f"{int(minutes)}m {seconds:02.0f}s"


# --------------------------------------------------------------------------- per-record values


def record_headroom(rec: dict) -> float | None:
    """The record's headroom, or the smallest per-output headroom when the record has none."""
    h = _num(rec.get("headroom"))
    if h is not None:
        return h
    per_output = [_num(_dict(m).get("headroom")) for m in _dict(rec.get("metrics")).values()]
    per_output = [x for x in per_output if x is not None and not math.isnan(x)]
    return min(per_output) if per_output else None


def is_bad(rec: dict) -> bool:
    return _str(rec.get("outcome")) in BAD_OUTCOMES


def _finite_min(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return min(vals) if vals else None


def output_metrics(rec: dict) -> list[dict]:
    """One entry per checked output (o, lse, ...) with its error, allowance and headroom."""
    rows = []
    for name, m in _dict(rec.get("metrics")).items():
        m = _dict(m)
        rows.append({
            "name": _str(name),
            "max_abs_err": fmt_num(m.get("max_abs_err")),
            "allowed": fmt_num(m.get("allowed")),
            "headroom": fmt_num(m.get("headroom")),
        })
    return rows


def message_view(value: Any) -> dict:
    """The message split for display: its first line, the full text, and whether it is long."""
    text = _str(value).rstrip()
    lines = text.splitlines()
    first = lines[0] if lines else ""
    long = len(lines) > 1 or len(text) > LONG_MESSAGE_CHARS
    if long and len(first) > LONG_MESSAGE_CHARS:
        first = first[:LONG_MESSAGE_CHARS] + "…"
    return {"text": text, "first_line": first, "long": long}


def known_failure_view(value: Any) -> dict | None:
    kf = _dict(value)
    if not kf:
        return None
    return {
        "id": _str(kf.get("id")) or "known",
        "reason": _str(kf.get("reason")),
        "versions": _str(kf.get("versions")),
        # The report lives in reports/; the notes at the repository root.
        "note_href": f"../porting_notes.md#{slug(_str(kf.get('note')))}" if kf.get("note") else "",
    }


def column(rec: dict) -> str:
    """The report column of a record: its device, marked when it is a compile-only record."""
    device = _str(rec.get("device"))
    return f"{device} compile" if rec.get("mode") == "compile" else device


def compile_view(rec: dict) -> list[dict]:
    """Per compile target: did every launch compile, where the first failure stopped, and how
    many element-wise (scalarized) memory accesses the Ascend adapter produced (a hazard)."""
    views = []
    for target, links in _dict(rec.get("compile")).items():
        links = [_dict(x) for x in links] if isinstance(links, list) else []
        failed = [x for x in links if x.get("outcome") != "pass"]
        scalar = sum(int(x.get("scalar_accesses") or 0) for x in links)
        summary = [line for x in links for line in (x.get("scalar_summary") or [])]
        views.append({
            "target": _str(target),
            "outcome": "fail" if failed else "pass",
            "class": outcome_class("fail" if failed else "pass"),
            "stage": _str(failed[0].get("stage")) if failed else "",
            "scalar": scalar,
            "scalar_summary": "; ".join(map(_str, summary)),
        })
    return views


def case_row(rec: dict) -> dict:
    """Everything the per-case table shows for one record, as display strings."""
    outcome = _str(rec.get("outcome")) or "?"
    metrics = output_metrics(rec)
    return {
        "case_id": _str(rec.get("case_id")),
        "nodeid": _str(rec.get("nodeid")),
        "impl": _str(rec.get("impl")),
        "device": column(rec),
        "device_index": _str(rec.get("device_index")),
        "compiles": compile_view(rec),
        "dtype": _str(rec.get("dtype")),
        "run_id": _str(rec.get("run_id")),
        "outcome": outcome,
        "outcome_class": outcome_class(outcome),
        "bad": is_bad(rec),
        "stage": _str(rec.get("stage")),
        "metrics": metrics,
        "show_metric_names": len(metrics) > 1,
        "headroom": fmt_num(record_headroom(rec)),
        "duration": fmt_duration(rec.get("duration_s")),
        "message": message_view(rec.get("message")),
        "known_failure": known_failure_view(rec.get("known_failure")),
        "repro": _str(rec.get("repro")),
    }


# --------------------------------------------------------------------------- sections


def outcome_counts(records: Iterable[dict]) -> list[dict]:
    """Every schema outcome in schema order (zeros included), then any unexpected ones."""
    counts = Counter(_str(r.get("outcome")) or "?" for r in records)
    order = list(OUTCOMES) + sorted(o for o in counts if o not in OUTCOMES)
    return [{"outcome": o, "count": counts.get(o, 0), "class": outcome_class(o)} for o in order]


def counts_summary(records: Iterable[dict]) -> str:
    """Nonzero outcome counts as one line of text, e.g. "40 pass · 2 xfail · 1 fail"."""
    return " · ".join(f"{c['count']} {c['outcome']}" for c in outcome_counts(records) if c["count"])


def run_summaries(raw_records: list[dict], merged: list[dict]) -> list[dict]:
    """Every run read (before merging), and how many of its records are still the latest."""
    read = Counter(_str(r.get("run_id")) or "(no run id)" for r in raw_records)
    kept = Counter(_str(r.get("run_id")) or "(no run id)" for r in merged)
    devices: dict[str, set] = defaultdict(set)
    profiles: dict[str, set] = defaultdict(set)
    finished: dict[str, str] = {}
    for r in raw_records:
        run = _str(r.get("run_id")) or "(no run id)"
        devices[run].add(column(r))
        if r.get("profile"):
            profiles[run].add(_str(r.get("profile")))
        f = _str(r.get("finished_at"))
        if f > finished.get(run, ""):
            finished[run] = f
    return [
        {
            "run_id": run,
            "devices": ", ".join(sorted(devices[run])),
            "profiles": ", ".join(sorted(profiles[run])),
            "records_read": read[run],
            "records_shown": kept.get(run, 0),
            "last_finished": finished.get(run, ""),
        }
        for run in sorted(read)
    ]


def _env_fingerprint(rec: dict) -> tuple:
    env = _dict(rec.get("env"))
    return (_str(rec.get("device")),) + tuple(_str(env.get(k)) for k in ENV_FIELDS)


def environment_rows(records: Iterable[dict]) -> list[dict]:
    """One row per distinct (device, environment), with how many cases ran in it and in which runs."""
    cases: Counter = Counter()
    runs: dict[tuple, set] = defaultdict(set)
    for r in records:
        fp = _env_fingerprint(r)
        cases[fp] += 1
        if r.get("run_id"):
            runs[fp].add(_str(r.get("run_id")))
    rows = []
    for fp in sorted(cases):
        values = dict(zip(("device",) + ENV_FIELDS, fp))
        triton = values["triton"]
        if values["triton_backend"]:
            triton = f"{triton} ({values['triton_backend']})" if triton else values["triton_backend"]
        rows.append({
            "device": values["device"],
            "python": values["python"] or MISSING,
            "torch": values["torch"] or MISSING,
            "triton": triton or MISSING,
            "device_name": values["device_name"] or MISSING,
            "driver": values["driver"] or MISSING,
            "host": values["host"] or MISSING,
            "platform": values["platform"] or MISSING,
            "cases": cases[fp],
            "runs": ", ".join(sorted(runs[fp])),
        })
    return rows


def devices_present(records: Iterable[dict]) -> list[str]:
    return sorted({column(r) for r in records})


def families_present(records: Iterable[dict]) -> list[str]:
    return sorted({_str(r.get("family")) for r in records})


def matrix_cell(records: list[dict]) -> dict:
    """Counts by outcome and the smallest passing headroom for one family on one device."""
    if not records:
        return {"empty": True, "total": 0, "counts": [], "min_headroom": MISSING,
                "bad": False, "tight": False}
    counts = [c for c in outcome_counts(records) if c["count"]]
    min_h = _finite_min(record_headroom(r) for r in records if r.get("outcome") == "pass")
    return {
        "empty": False,
        "total": len(records),
        "counts": counts,
        "min_headroom": fmt_num(min_h),
        "bad": any(is_bad(r) for r in records),
        "tight": min_h is not None and min_h < TIGHT_HEADROOM,
    }


def family_device_matrix(records: list[dict]) -> dict:
    """Rows are families (one row per implementation where a family has several, so they can be
    compared), columns the devices present; each cell is a ``matrix_cell``."""
    devices = devices_present(records)
    by_cell: dict[tuple, list] = defaultdict(list)
    impls: dict[str, set] = defaultdict(set)
    for r in records:
        family, impl = _str(r.get("family")), _str(r.get("impl"))
        by_cell[(family, impl, column(r))].append(r)
        impls[family].add(impl)
    families = families_present(records)
    anchors = family_anchors(families)
    rows = []
    for family in families:
        for impl in sorted(impls[family]):
            rows.append({
                "family": family,
                "impl": impl if len(impls[family]) > 1 else None,
                "anchor": anchors[family],
                "cells": [dict(matrix_cell(by_cell.get((family, impl, d), [])), device=d) for d in devices],
            })
    return {"devices": devices, "rows": rows}


def tight_cases(records: Iterable[dict], threshold: float = TIGHT_HEADROOM) -> list[dict]:
    """Passing cases whose headroom is below ``threshold``, tightest first."""
    tight = []
    for r in records:
        h = record_headroom(r)
        if r.get("outcome") == "pass" and h is not None and h < threshold:
            tight.append((h, case_row(r)))
    tight.sort(key=lambda t: (t[0], t[1]["case_id"], t[1]["impl"], t[1]["device"]))
    return [row for _, row in tight]


def _case_sort_key(rec: dict) -> tuple:
    return (0 if is_bad(rec) else 1, _str(rec.get("case_id")), _str(rec.get("impl")), column(rec))


def case_groups(records: Iterable[dict]) -> list[dict]:
    """The per-case table, one group per family: failures first, then the rest by case id."""
    by_family: dict[str, list] = defaultdict(list)
    for r in records:
        by_family[_str(r.get("family"))].append(r)
    anchors = family_anchors(by_family)
    groups = []
    for family in sorted(by_family):
        recs = sorted(by_family[family], key=_case_sort_key)
        groups.append({
            "family": family,
            "anchor": anchors[family],
            "summary": counts_summary(recs),
            "bad": any(is_bad(r) for r in recs),
            "rows": [case_row(r) for r in recs],
        })
    return groups


#: Quality columns shown first, in this order (records store keys sorted).
QUALITY_FIRST = ("op", "sparsity", "bits", "compression_ratio", "max_abs_err", "mean_abs_err",
                 "rel_err", "cosine")


def quality_groups(records: Iterable[dict]) -> list[dict]:
    """Approximation figures (Family.quality), one table per family. Kept apart from
    conformance: these are never pass/fail."""
    by_family: dict[str, list] = defaultdict(list)
    for r in records:
        if isinstance(r.get("quality"), dict) and r["quality"]:
            by_family[_str(r.get("family"))].append(r)
    groups = []
    for family in sorted(by_family):
        recs = sorted(by_family[family], key=_case_sort_key)
        keys = {k for r in recs for k in r["quality"]}
        columns = [k for k in QUALITY_FIRST if k in keys] + sorted(keys - set(QUALITY_FIRST))
        rows = [{"case_id": _str(r.get("case_id")), "device": _str(r.get("device")),
                 "impl": _str(r.get("impl")), "outcome": _str(r.get("outcome")),
                 "outcome_class": outcome_class(_str(r.get("outcome"))),
                 "cells": [_quality_cell(r["quality"].get(c)) for c in columns]} for r in recs]
        groups.append({"family": family, "columns": columns, "rows": rows})
    return groups


def _quality_cell(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt_num(value, 4)
    return MISSING if value is None else _str(value)


def build_context(raw_records: list[dict], merged: list[dict], *, title: str, generated_at: str) -> dict:
    """Everything the template needs. ``raw_records`` are as read; ``merged`` one per key."""
    # Imported here: bench.py builds on this module's helpers.
    from attnsuite.report.bench import bench_context, is_bench
    # Benchmark records are timings, not conformance cases: they count in the runs, the
    # environments and their own section only.
    cases = [r for r in merged if not is_bench(r)]
    return {
        "title": title,
        "outcome_classes": list(OUTCOMES) + ["other"],
        "generated_at": generated_at,
        "total": len(cases),
        "runs": run_summaries(raw_records, merged),
        "devices": devices_present(merged),
        "environments": environment_rows(merged),
        "outcome_counts": outcome_counts(cases),
        "matrix": family_device_matrix(cases),
        "tight_threshold": fmt_num(TIGHT_HEADROOM),
        "tight_cases": tight_cases(cases),
        "case_groups": case_groups(cases),
        "quality_groups": quality_groups(cases),
        "bench": bench_context(merged),
    }
