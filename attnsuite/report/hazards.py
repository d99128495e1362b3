"""Compile-only performance hazards worth a look before a first run on hardware: an npu grid
that leaves cores idle or oversubscribes them, kernels close to the on-chip buffer (UB)
capacity, and element-wise ("scalarized") or row-gather memory accesses, with their source
lines. Hazards never fail a case; this section lists the flagged ones so they are not buried
in the per-case tables."""
from __future__ import annotations

from typing import Iterable

from attnsuite.report.fields import text
from attnsuite.report.rows import case_anchor, compile_view, filter_attrs


def flagged_hazards(records: Iterable[dict]) -> list[dict]:
    """One row per (record, target) with a flagged hazard: grid and UB flags first, then by
    the number of element-wise accesses."""
    rows = []
    for r in records:
        for view in compile_view(r):
            if not view["flagged"]:
                continue
            rows.append({"case_id": text(r.get("case_id")), "anchor": case_anchor(r),
                         "filters": filter_attrs(r), "impl": text(r.get("impl")), **view})
    rows.sort(key=lambda v: (not (v["grid"] or {}).get("flagged"), not (v["ub"] or {}).get("flagged"),
                             -(v["scalar"] + v["row_gather"]), v["case_id"], v["target"]))
    return rows
