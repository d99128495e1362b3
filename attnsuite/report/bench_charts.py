"""The benchmark charts drawn from sweeps: speedup against kept ratio, latency against context
length, and block-shape heatmaps of ``block_sparse``. Which records a chart takes, and what its
lines and cells mean; the drawing itself is ``svg``'s."""
from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable

from markupsafe import Markup

from attnsuite.report.bench_records import (
    baseline_label,
    baseline_median,
    baselines_present,
    host,
    kernel_median,
    speedup,
    sweep,
)
from attnsuite.report.fields import MISSING, mapping, num, text
from attnsuite.report.fmt import fmt_context, fmt_speedup, fmt_value
from attnsuite.report.rows import message_view
from attnsuite.report.svg import DASHES, PALETTE, Axis, HeatCell, Line, heatmap, line_chart

#: The block_sparse heatmaps: one per sparsity, over the spec's block sizes.
HEATMAP_SPARSITIES = (0.3, 0.5, 0.8)
BLOCK_SIZES = (128, 256, 512, 1024)
HEATMAP_BASELINE = "dense_kernel"


def sweep_records(records: Iterable[dict], name: str) -> list[dict]:
    return [r for r in records if text(sweep(r).get("name")) == name]


def _group_label(parts: Iterable[str]) -> str:
    return " · ".join(p for p in parts if p)


def _place(rec: dict) -> tuple[str, str]:
    """Where a timing was taken: times from different devices or hosts never share a line."""
    return text(rec.get("device")), host(rec)


def _place_label(place: tuple[str, str], show: bool) -> str:
    """``cuda@h100-a``, shown only when the chart's records come from more than one place."""
    device, hst = place
    return "" if not show else f"{device}@{hst}" if hst else device


def sweep_groups(records: list[dict]) -> tuple[dict[tuple, list], bool]:
    """Records by (series, place), and whether the places differ (then labels name them)."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        groups[(text(sweep(r).get("series")), _place(r))].append(r)
    return dict(sorted(groups.items())), len({place for _, place in groups}) > 1


def kept_ratio_chart(family: str, records: list[dict]) -> Markup | None:
    """Speedup against kept ratio: one line per (series[, device], baseline). Colour names the
    baseline and the dash pattern the series, so one baseline reads the same across series."""
    groups, show_place = sweep_groups(records)
    baselines = baselines_present(records)
    lines = []
    for g, ((series, place), recs) in enumerate(groups.items()):
        for b, name in enumerate(baselines):
            points = [(num(sweep(r).get("x")), speedup(r, name)) for r in recs]
            label = _group_label((series, _place_label(place, show_place),
                                  f"vs {baseline_label(name)['label']}"))
            lines.append(Line(label, points, dash=DASHES[g % len(DASHES)],
                              colour=PALETTE[b % len(PALETTE)]))
    return line_chart(f"{family}: speedup vs kept ratio", lines,
                      Axis("kept ratio", 10), Axis("speedup (baseline / kernel)", 10, include=(1.0,)),
                      parity=True)


def context_charts(family: str, records: list[dict]) -> list[Markup]:
    """Device time against context length, one chart per (series, device): the kernel and each
    baseline as lines."""
    groups, show_place = sweep_groups(records)
    charts = []
    for (series, place), recs in groups.items():
        lines = [Line("kernel", [(num(sweep(r).get("x")), kernel_median(r)) for r in recs])]
        lines += [Line(baseline_label(name)["label"],
                       [(num(sweep(r).get("x")), baseline_median(r, name)) for r in recs], dash="6 3")
                  for name in baselines_present(recs)]
        where = _group_label((series, _place_label(place, show_place)))
        title = f"{family}: latency vs context length" + (f" ({where})" if where else "")
        chart = line_chart(title, lines, Axis("context length (tokens)", 2, fmt=fmt_context),
                           Axis("median latency (ms)", 10))
        if chart is not None:
            charts.append(chart)
    return charts


def _same_sparsity(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) < 1e-6


def heatmap_baseline(records: list[dict]) -> str | None:
    """``dense_kernel`` when any record has it, else the first baseline present."""
    names = baselines_present(records)
    return HEATMAP_BASELINE if HEATMAP_BASELINE in names else (names[0] if names else None)


def block_shape_cell(rec: dict, baseline: str | None) -> HeatCell:
    value = speedup(rec, baseline) if baseline else None
    case = text(rec.get("case_id"))
    if value is None:
        reason = message_view(rec.get("message"))["first_line"] or "no timing"
        return HeatCell(None, f"{case}: {text(rec.get('outcome'))}: {reason}",
                        text(rec.get("outcome")) or MISSING)
    detail = (f"{case}: kernel {fmt_value(kernel_median(rec))} ms, {baseline} "
              f"{fmt_value(baseline_median(rec, baseline))} ms, speedup {fmt_speedup(value)}")
    return HeatCell(value, detail, fmt_speedup(value))


def _is_sparsity_label(series: str) -> bool:
    return re.fullmatch(r"s=?[0-9.]+", series) is not None


def heat_cells(records: list[dict], sparsity: float, baseline: str | None) -> dict[tuple, HeatCell]:
    """The (BQ, BKV) cells of one sparsity."""
    cells = {}
    for r in records:
        params = mapping(r.get("params"))
        bq, bkv = num(params.get("bq")), num(params.get("bkv"))
        if _same_sparsity(num(params.get("s")), sparsity) and bq is not None and bkv is not None:
            cells[(int(bq), int(bkv))] = block_shape_cell(r, baseline)
    return cells


def block_shape_heatmaps(family: str, records: list[dict]) -> list[Markup]:
    """One heatmap per (series, device, sparsity in HEATMAP_SPARSITIES)."""
    groups, show_place = sweep_groups(records)
    charts = []
    for (series, place), recs in groups.items():
        baseline = heatmap_baseline(recs)
        # A series that only names the sparsity would repeat the title.
        named = "" if _is_sparsity_label(series) else series
        where = _place_label(place, show_place)
        for s in HEATMAP_SPARSITIES:
            cells = heat_cells(recs, s, baseline)
            if cells:
                title = _group_label((f"{family} s={s:g}", f"vs {baseline or MISSING}", named, where))
                charts.append(heatmap(title, cells, BLOCK_SIZES, BLOCK_SIZES, "BQ", "BKV"))
    return charts


def family_charts(family: str, records: list[dict]) -> list[dict]:
    charts = []
    kept = kept_ratio_chart(family, sweep_records(records, "kept_ratio"))
    if kept is not None:
        charts.append({"kind": "kept_ratio", "svg": kept})
    charts += [{"kind": "block_shape", "svg": svg}
               for svg in block_shape_heatmaps(family, sweep_records(records, "block_shape"))]
    charts += [{"kind": "context", "svg": svg}
               for svg in context_charts(family, sweep_records(records, "context"))]
    return charts
