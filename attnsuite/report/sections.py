"""The conformance sections of the report: runs, environments, outcome counts, the
family x device matrix, tight cases, the per-case tables and the approximation figures.

Records in (already merged, unless a function says otherwise), plain dicts and lists out; no
HTML is produced here (the template autoescapes everything). Every figure that names a case
carries that case's anchor (``rows.case_anchor``), and every count a filter (``filter_href``),
so the page can link from a summary to the rows behind it.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable
from urllib.parse import urlencode

from attnsuite.records import TIGHT_HEADROOM
from attnsuite.report.fields import MISSING, mapping, text, unique_anchors
from attnsuite.report.fmt import fmt_num
from attnsuite.report.rows import (
    NO_IMPL,
    OUTCOMES,
    case_anchor,
    case_row,
    column,
    is_bad,
    is_warn,
    mode,
    outcome,
    outcome_class,
    param_columns,
    record_headroom,
    sort_key,
)

ENV_FIELDS = ("python", "torch", "triton", "triton_backend", "device_name", "driver", "host", "platform")
#: A table with more rows than this starts folded (its summary line says what it holds).
FOLD_ROWS = 24


def filter_href(**values: str) -> str:
    """A link that opens the page with the filter bar set to these values."""
    return "?" + urlencode({k: v for k, v in values.items() if v})


def family_anchors(families: Iterable[str]) -> dict[str, str]:
    return unique_anchors(families, "family-")


# --------------------------------------------------------------------------- counts


def outcome_counts(records: Iterable[dict]) -> list[dict]:
    """Every known outcome in order (zeros included), then any unexpected ones."""
    counts = Counter(outcome(r) for r in records)
    order = list(OUTCOMES) + sorted(o for o in counts if o not in OUTCOMES)
    return [{"outcome": o, "count": counts.get(o, 0), "class": outcome_class(o),
             "href": filter_href(outcome=o)} for o in order]


def counts_summary(records: Iterable[dict]) -> str:
    """Nonzero outcome counts as one line of text, e.g. "40 pass · 2 xfail · 1 fail"."""
    return " · ".join(f"{c['count']} {c['outcome']}" for c in outcome_counts(records) if c["count"])


# --------------------------------------------------------------------------- runs, environments


def run_summaries(raw_records: list[dict], merged: list[dict]) -> list[dict]:
    """Every run read (before merging), and how many of its records are still the latest."""
    def run_of(r: dict) -> str:
        return text(r.get("run_id")) or "(no run id)"

    read = Counter(map(run_of, raw_records))
    kept = Counter(map(run_of, merged))
    devices: dict[str, set] = defaultdict(set)
    profiles: dict[str, set] = defaultdict(set)
    finished: dict[str, str] = {}
    for r in raw_records:
        run = run_of(r)
        devices[run].add(column(r))
        if r.get("profile"):
            profiles[run].add(text(r.get("profile")))
        f = text(r.get("finished_at"))
        if f > finished.get(run, ""):
            finished[run] = f
    return [{"run_id": run, "devices": ", ".join(sorted(devices[run])),
             "profiles": ", ".join(sorted(profiles[run])), "records_read": read[run],
             "records_shown": kept.get(run, 0), "last_finished": finished.get(run, "")}
            for run in sorted(read)]


def _env_fingerprint(rec: dict) -> tuple:
    env = mapping(rec.get("env"))
    return (text(rec.get("device")),) + tuple(text(env.get(k)) for k in ENV_FIELDS)


def environment_rows(records: Iterable[dict]) -> list[dict]:
    """One row per distinct (device, environment), with how many cases ran in it and in which runs."""
    cases: Counter = Counter()
    runs: dict[tuple, set] = defaultdict(set)
    for r in records:
        fp = _env_fingerprint(r)
        cases[fp] += 1
        if r.get("run_id"):
            runs[fp].add(text(r.get("run_id")))
    rows = []
    for fp in sorted(cases):
        values = dict(zip(("device",) + ENV_FIELDS, fp))
        triton = values["triton"]
        if values["triton_backend"]:
            triton = f"{triton} ({values['triton_backend']})" if triton else values["triton_backend"]
        rows.append({
            "device": values["device"], "python": values["python"] or MISSING,
            "torch": values["torch"] or MISSING, "triton": triton or MISSING,
            "device_name": values["device_name"] or MISSING, "driver": values["driver"] or MISSING,
            "host": values["host"] or MISSING, "platform": values["platform"] or MISSING,
            "cases": cases[fp], "runs": ", ".join(sorted(runs[fp])),
        })
    return rows


def devices_present(records: Iterable[dict]) -> list[str]:
    return sorted({column(r) for r in records})


def families_present(records: Iterable[dict]) -> list[str]:
    return sorted({text(r.get("family")) for r in records})


# --------------------------------------------------------------------------- the matrix


def matrix_cell(records: list[dict], family: str = "", device: str = "") -> dict:
    """Counts by outcome and the smallest passing headroom (linked to its case) for one family
    on one device column."""
    if not records:
        return {"empty": True, "total": 0, "counts": [], "min_headroom": MISSING, "min_anchor": "",
                "bad": False, "warn": False, "tight": False, "numeric": False}
    modes = {mode(r) for r in records}
    where = {"family": family, "device": text(records[0].get("device")),
             "mode": modes.pop() if len(modes) == 1 else ""}
    counts = [dict(c, href=filter_href(**where, outcome=c["outcome"]))
              for c in outcome_counts(records) if c["count"]]
    passing = [(h, r) for r in records if outcome(r) == "pass"
               for h in [record_headroom(r)] if h is not None and h == h]
    least = min(passing, key=lambda t: t[0]) if passing else None
    return {
        "empty": False,
        "total": len(records),
        "counts": counts,
        "min_headroom": fmt_num(least[0] if least else None),
        "min_anchor": case_anchor(least[1]) if least else "",
        "bad": any(is_bad(r) for r in records),
        "warn": any(is_warn(r) for r in records),
        "tight": least is not None and least[0] < TIGHT_HEADROOM,
        # Compile-only cells have no errors to bound.
        "numeric": any(mode(r) != "compile" for r in records),
    }


def family_device_matrix(records: list[dict]) -> dict:
    """Rows are families (one row per implementation where a family has several, so they can be
    compared), columns the devices present; each cell is a ``matrix_cell``."""
    devices = devices_present(records)
    by_family: dict[str, list] = defaultdict(list)
    for r in records:
        by_family[text(r.get("family"))].append(r)
    anchors = family_anchors(by_family)
    rows = []
    for family in sorted(by_family):
        by_cell: dict[tuple, list] = defaultdict(list)
        impls = set()
        for r in by_family[family]:
            impl = text(r.get("impl"))
            impls.add(impl)
            by_cell[(impl, column(r))].append(r)
        for impl in sorted(impls):
            rows.append({
                "family": family,
                "impl": (impl or NO_IMPL) if len(impls) > 1 else None,
                "anchor": anchors[family],
                "cells": [dict(matrix_cell(by_cell.get((impl, d), []), family, d), device=d)
                          for d in devices],
            })
    return {"devices": devices, "rows": rows}


# --------------------------------------------------------------------------- case lists


def tight_cases(records: Iterable[dict], threshold: float = TIGHT_HEADROOM) -> list[dict]:
    """Passing cases whose headroom is below ``threshold``, tightest first."""
    tight = []
    for r in records:
        h = record_headroom(r)
        if outcome(r) == "pass" and h is not None and h < threshold:
            tight.append((h, case_row(r)))
    tight.sort(key=lambda t: (t[0], t[1]["case_id"], t[1]["impl"], t[1]["device"]))
    return [row for _, row in tight]


def case_groups(records: Iterable[dict]) -> list[dict]:
    """The per-case tables, one group per family. Rows that need a look (anything but a pass)
    come first and stay open; the passing rows are folded below them. Parameters that vary
    within the family get a column each; the ones every case shares are said once."""
    by_family: dict[str, list] = defaultdict(list)
    for r in records:
        by_family[text(r.get("family"))].append(r)
    anchors = family_anchors(by_family)
    groups = []
    for family in sorted(by_family):
        recs = sorted(by_family[family], key=sort_key)
        keys, constant = param_columns(recs)
        rows = [case_row(r, keys) for r in recs]
        impls = {row["impl"] for row in rows}
        devices = {row["device"] for row in rows}
        shared = [{"name": name, "value": next(iter(values))}
                  for name, values in (("impl", impls), ("device", devices))
                  if len(values) == 1 and next(iter(values))]
        groups.append({
            "family": family,
            "anchor": anchors[family],
            "summary": counts_summary(recs),
            "bad": any(is_bad(r) for r in recs),
            "param_keys": keys,
            "constant_params": shared + constant,
            "show_impl": len(impls) > 1,
            "show_device": len(devices) > 1,
            "attention": [row for row in rows if row["outcome"] != "pass"],
            "passing": [row for row in rows if row["outcome"] == "pass"],
            "rows": rows,
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
        if mapping(r.get("quality")):
            by_family[text(r.get("family"))].append(r)
    groups = []
    for family in sorted(by_family):
        recs = sorted(by_family[family], key=sort_key)
        keys = {text(k) for r in recs for k in r["quality"]}
        columns = [k for k in QUALITY_FIRST if k in keys] + sorted(keys - set(QUALITY_FIRST))
        rows = [dict(case_row(r), cells=[_quality_cell(r["quality"].get(c)) for c in columns])
                for r in recs]
        groups.append({"family": family, "columns": columns, "rows": rows,
                       "folded": len(rows) > FOLD_ROWS})
    return groups


def _quality_cell(value) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt_num(value, 4)
    return MISSING if value is None else text(value)
