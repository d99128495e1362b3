"""The benchmarks section: records with ``mode == "bench"``, one block per family with its
charts (``bench_charts``) and table (``bench_tables``)."""
from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from attnsuite.report.bench_charts import family_charts
from attnsuite.report.bench_records import is_bench
from attnsuite.report.bench_tables import family_table
from attnsuite.report.fields import text, unique_anchors
from attnsuite.report.sections import counts_summary

__all__ = ["bench_context", "is_bench"]


def bench_families(records: Iterable[dict]) -> dict[str, list[dict]]:
    by_family: dict[str, list] = defaultdict(list)
    for r in records:
        if is_bench(r):
            by_family[text(r.get("family"))].append(r)
    return dict(sorted(by_family.items()))


def bench_context(records: Iterable[dict]) -> dict:
    """The benchmarks section: one entry per family with its charts and table."""
    by_family = bench_families(records)
    anchors = unique_anchors(by_family, "bench-")
    families = []
    for family, recs in by_family.items():
        table = family_table(recs)
        families.append({"family": family, "anchor": anchors[family], "summary": counts_summary(recs),
                         **table, "charts": family_charts(family, recs)})
    unstable = [row for fam in families for row in fam["unstable"]]
    return {"families": families, "total": sum(len(r) for r in by_family.values()),
            "unstable": unstable}
