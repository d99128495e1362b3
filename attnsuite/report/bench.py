"""The benchmark part of the report: records with ``mode == "bench"`` in, per-family tables and
inline SVG charts out.

A bench record carries the common record fields plus ``bench``::

    kernel     {median_ms, q1_ms, q3_ms, iqr_ms, runs, compile_s}
    baselines  {name: {median_ms, q1_ms, q3_ms, iqr_ms, runs, note}} or {name: {unavailable: reason}}
    speedup    {name: baseline median / kernel median}        (> 1: the kernel is faster)
    flops, tflops, bytes, gbps, copy_gbps, copy_fraction       (any may be missing)
    config     the kernel's launch config, or None
    sweep      None or {name: kept_ratio | block_shape | context, series, x}

Like ``sections``, every field is read defensively (a skipped case has no ``bench`` at all).
The charts are built here as SVG text, so escaping happens here too: every piece of record text
goes through ``_esc``/``_attr`` and the finished SVG is handed to the template as ``Markup``.
The SVGs carry no xmlns: inline in HTML the parser puts them in the SVG namespace, and the page
stays free of URLs.
"""
from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from xml.sax.saxutils import escape

from markupsafe import Markup

from attnsuite.report.sections import (
    MISSING,
    _dict,
    _num,
    _str,
    counts_summary,
    fmt_duration,
    is_bad,
    message_view,
    outcome_class,
    slug,
)

BENCH_MODE = "bench"

#: Baselines in the order a reader expects them: the reference first, then the vendor
#: libraries, then the kernel's own dense counterparts. Unknown names follow, sorted.
BASELINE_ORDER = ("reference", "sdpa_flash", "sdpa_cudnn", "npu_fusion_attention",
                  "npu_fused_infer_attention_score", "dense_kernel", "dense_qk")
BASELINE_LABELS = {
    "reference": ("torch reference", "the vectorized PyTorch reference of the family"),
    "sdpa_flash": ("SDPA flash", "torch scaled_dot_product_attention, FLASH_ATTENTION backend"),
    "sdpa_cudnn": ("SDPA cuDNN", "torch scaled_dot_product_attention, CUDNN_ATTENTION backend"),
    "npu_fusion_attention": ("npu_fusion_attention", "torch_npu dense attention operator"),
    "npu_fused_infer_attention_score": ("npu_fused_infer_attention_score",
                                        "torch_npu inference attention operator (dense or paged)"),
    "dense_kernel": ("dense kernel", "the same kernel at sparsity 0"),
    "dense_qk": ("dense q·Kᵀ", "dense fp16 q @ K^T in torch"),
}

#: The block_sparse heatmaps: one per sparsity, over the spec's block sizes.
HEATMAP_SPARSITIES = (0.3, 0.5, 0.8)
BLOCK_SIZES = (128, 256, 512, 1024)
HEATMAP_BASELINE = "dense_kernel"

# Distinguishable in colour-blind vision too (Okabe-Ito, then a few darker extras).
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#b8860b",
           "#000000", "#6a3d9a", "#8c564b")
DASHES = ("", "6 3", "2 3", "8 3 2 3")


# --------------------------------------------------------------------------- record access


def is_bench(rec: dict) -> bool:
    return rec.get("mode") == BENCH_MODE


def _bench(rec: dict) -> dict:
    return _dict(rec.get("bench"))


def _sweep(rec: dict) -> dict:
    return _dict(_bench(rec).get("sweep"))


def _pos(value: Any) -> float | None:
    """A strictly positive finite number, or None: times, rates and speedups that can be drawn
    on a log axis and divided by."""
    x = _num(value)
    return x if x is not None and math.isfinite(x) and x > 0 else None


def kernel_median(rec: dict) -> float | None:
    return _pos(_dict(_bench(rec).get("kernel")).get("median_ms"))


def baseline_median(rec: dict, name: str) -> float | None:
    return _pos(_dict(_dict(_bench(rec).get("baselines")).get(name)).get("median_ms"))


def speedup(rec: dict, name: str) -> float | None:
    """Baseline median / kernel median, as recorded; computed from the medians when the record
    has no speedup for that baseline."""
    recorded = _pos(_dict(_bench(rec).get("speedup")).get(name))
    if recorded is not None:
        return recorded
    kernel, base = kernel_median(rec), baseline_median(rec, name)
    return base / kernel if kernel and base else None


def host(rec: dict) -> str:
    return _str(_dict(rec.get("env")).get("host"))


# --------------------------------------------------------------------------- formatting


def fmt_value(value: Any, sig: int = 3) -> str:
    """``sig`` significant digits, without the exponent form for values up to 10^6 (a 7716 ms
    reference reads better as 7716 than 7.72e+03)."""
    x = _num(value)
    if x is None or not math.isfinite(x):
        return MISSING if x is None else str(x)
    if 10 ** sig <= abs(x) < 1e6:
        return f"{x:.0f}"
    return f"{x:.{sig}g}"


def fmt_speedup(value: float | None) -> str:
    return MISSING if value is None else fmt_value(value) + "×"


def fmt_percent(fraction: Any) -> str:
    x = _num(fraction)
    return MISSING if x is None or not math.isfinite(x) else f"{x * 100:.0f}%"


def fmt_median_iqr(stats: dict) -> str:
    """``median ± IQR`` in ms (the spread to two digits: a third is noise); the median alone
    when the IQR is unknown."""
    median = _num(stats.get("median_ms"))
    if median is None:
        return MISSING
    iqr = _num(stats.get("iqr_ms"))
    if iqr is None:
        q1, q3 = _num(stats.get("q1_ms")), _num(stats.get("q3_ms"))
        iqr = q3 - q1 if q1 is not None and q3 is not None else None
    return fmt_value(median) if iqr is None else f"{fmt_value(median)} ± {fmt_value(iqr, 2)}"


def stats_title(stats: dict) -> str:
    """The tooltip of a timing cell: quartiles and run count."""
    parts = []
    for key, label in (("q1_ms", "q1"), ("median_ms", "median"), ("q3_ms", "q3")):
        if _num(stats.get(key)) is not None:
            parts.append(f"{label} {fmt_value(stats[key])} ms")
    if _num(stats.get("runs")) is not None:
        parts.append(f"{int(_num(stats['runs']))} runs")
    return ", ".join(parts)


def _meta(meta: dict) -> str:
    return " ".join(f"{k}={_str(v)}" for k, v in meta.items())


def config_lines(config: Any) -> list[str]:
    """A launch config as ``BLOCK_M=128 BLOCK_N=64 num_warps=4``. A config per launched kernel
    (``{kernel: {meta}}``, e.g. split-KV decode and its merge) gets a line each, named."""
    config = _dict(config)
    flat = {k: v for k, v in config.items() if not isinstance(v, dict)}
    lines = [_meta(flat)] if flat else []
    return lines + [f"{name}: {_meta(meta)}" for name, meta in config.items() if isinstance(meta, dict)]


def speedup_class(value: float | None) -> str:
    if value is None:
        return ""
    return "faster" if value > 1 else "slower" if value < 1 else ""


def baseline_label(name: str) -> dict:
    label, description = BASELINE_LABELS.get(name, (name, name))
    return {"name": name, "label": label, "description": description}


# --------------------------------------------------------------------------- tables


class Footnotes:
    """Numbered footnotes for one family's table: the same text gets the same number."""

    def __init__(self) -> None:
        self._marks: dict[str, str] = {}

    def mark(self, text: str) -> str:
        if not text:
            return ""
        return self._marks.setdefault(text, str(len(self._marks) + 1))

    def items(self) -> list[dict]:
        return [{"mark": m, "text": t} for t, m in self._marks.items()]


def baselines_present(records: Iterable[dict]) -> list[str]:
    names = {_str(n) for r in records for n in _dict(_bench(r).get("baselines"))}
    known = [n for n in BASELINE_ORDER if n in names]
    return known + sorted(names - set(BASELINE_ORDER))


def baseline_cell(rec: dict, name: str, notes: Footnotes) -> dict:
    """One baseline's median and the kernel's speedup over it, for one row."""
    entry = _dict(_bench(rec).get("baselines")).get(name)
    if not isinstance(entry, dict):
        return {"median": MISSING, "title": "", "speedup": MISSING, "speedup_class": "",
                "unavailable": False, "note_mark": "", "note": ""}
    if "unavailable" in entry:
        reason = _str(entry.get("unavailable")) or "unavailable"
        return {"median": "n/a", "title": reason, "speedup": MISSING, "speedup_class": "",
                "unavailable": True, "note_mark": notes.mark(f"{name} unavailable: {reason}"),
                "note": reason}
    s = speedup(rec, name)
    note = _str(entry.get("note"))
    return {
        "median": fmt_median_iqr(entry),
        "title": stats_title(entry),
        "speedup": fmt_speedup(s),
        "speedup_class": speedup_class(s),
        "unavailable": False,
        "note_mark": notes.mark(f"{name}: {note}") if note else "",
        "note": note,
    }


def throughput(rec: dict) -> dict:
    """TFLOP/s for compute-bound families; GB/s and the fraction of the run's measured
    device-to-device copy bandwidth for memory-bound ones."""
    b = _bench(rec)
    copy = _num(b.get("copy_gbps"))
    fraction = _num(b.get("copy_fraction"))
    gbps = _num(b.get("gbps"))
    if fraction is None and gbps is not None and copy:
        fraction = gbps / copy
    return {
        "tflops": fmt_value(b.get("tflops")),
        "gbps": fmt_value(gbps),
        "copy_fraction": fmt_percent(fraction),
        "copy_title": f"copy bandwidth measured at the start of the run: {fmt_value(copy)} GB/s"
                      if copy else "",
    }


def bench_row(rec: dict, baselines: list[str], notes: Footnotes) -> dict:
    b = _bench(rec)
    kernel = _dict(b.get("kernel"))
    outcome = _str(rec.get("outcome")) or "?"
    index = _str(rec.get("device_index"))
    env = _dict(rec.get("env"))
    return {
        "case_id": _str(rec.get("case_id")),
        "nodeid": _str(rec.get("nodeid")),
        "repro": _str(rec.get("repro")),
        "impl": _str(rec.get("impl")),
        "device": _str(rec.get("device")) + (f":{index}" if index else ""),
        "device_name": _str(env.get("device_name")),
        "host": host(rec),
        "kernel": fmt_median_iqr(kernel),
        "kernel_title": stats_title(kernel),
        "baselines": [baseline_cell(rec, name, notes) for name in baselines],
        **throughput(rec),
        "compile": fmt_duration(kernel.get("compile_s")),
        "config": config_lines(b.get("config")),
        "outcome": outcome,
        "outcome_class": outcome_class(outcome),
        "bad": is_bad(rec),
        "message": message_view(rec.get("message")),
    }


def natural_key(text: str) -> tuple:
    """Numbers inside a case id compare as numbers: S4096 before S16384, kept0.2 before kept1.0.
    re.split alternates text and number, so like positions always hold like types."""
    parts = re.split(r"(\d+(?:\.\d+)?)", text)
    return tuple(float(p) if i % 2 else p for i, p in enumerate(parts))


def _row_key(rec: dict) -> tuple:
    return (natural_key(_str(rec.get("case_id"))), _str(rec.get("device")), host(rec),
            _str(rec.get("impl")))


def family_table(records: list[dict]) -> dict:
    """The three-way table of one family: kernel, then each baseline present (median and
    speedup), throughput, compile time, config and outcome."""
    records = sorted(records, key=_row_key)
    baselines = baselines_present(records)
    notes = Footnotes()
    rows = [bench_row(r, baselines, notes) for r in records]
    return {
        "baselines": [baseline_label(n) for n in baselines],
        "rows": rows,
        "show_impl": len({r["impl"] for r in rows}) > 1,
        "show_tflops": any(r["tflops"] != MISSING for r in rows),
        "show_gbps": any(r["gbps"] != MISSING or r["copy_fraction"] != MISSING for r in rows),
        "notes": notes.items(),
    }


# --------------------------------------------------------------------------- SVG primitives


def _esc(text: Any) -> str:
    return escape(_str(text))


def _attr(text: Any) -> str:
    return escape(_str(text), {'"': "&quot;"})


def _f(x: float) -> str:
    """A coordinate: two decimals are finer than a pixel of any chart here."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _svg(width: float, height: float, body: list[str], label: str, kind: str) -> Markup:
    head = (f'<svg class="chart chart-{kind}" viewBox="0 0 {_f(width)} {_f(height)}" '
            f'width="{_f(width)}" height="{_f(height)}" role="img" aria-label="{_attr(label)}" '
            f'font-family="Helvetica, Arial, sans-serif" font-size="12">')
    return Markup(head + "".join(body) + "</svg>")


def _text(x: float, y: float, text: Any, *, anchor: str = "start", size: int | None = None,
          weight: str | None = None, fill: str = "#1f2328", extra: str = "") -> str:
    style = f' font-size="{size}"' if size else ""
    style += f' font-weight="{weight}"' if weight else ""
    return (f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}" fill="{fill}"{style}{extra}>'
            f"{_esc(text)}</text>")


# --------------------------------------------------------------------------- scales and ticks


@dataclass
class Axis:
    label: str
    log_base: int | None = None  # None: linear
    fmt: Callable[[float], str] = fmt_value
    include: tuple[float, ...] = ()  # values the domain must contain (e.g. 1x parity)


@dataclass
class Scale:
    """Maps data values on one axis to pixels, linearly or on a log scale."""
    lo: float
    hi: float
    px_lo: float
    px_hi: float
    log: bool

    def _t(self, v: float) -> float:
        return math.log(v) if self.log else v

    def __call__(self, v: float) -> float:
        a, b = self._t(self.lo), self._t(self.hi)
        return self.px_lo + (self._t(v) - a) / (b - a) * (self.px_hi - self.px_lo)


def domain(values: list[float], axis: Axis) -> tuple[float, float]:
    """The data range plus a little air; a linear axis starts at zero for positive data."""
    values = list(values) + list(axis.include)
    lo, hi = min(values), max(values)
    if axis.log_base:
        if lo == hi:
            return lo / axis.log_base, hi * axis.log_base
        pad = (hi / lo) ** 0.05
        return lo / pad, hi * pad
    lo = min(lo, 0.0)
    if lo == hi:
        return lo - 1, hi + 1
    return lo, hi + (hi - lo) * 0.08


def linear_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    raw = (hi - lo) / target
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step)
    return [k * step for k in range(first, int(math.floor(hi / step)) + 1)]


def log_ticks(lo: float, hi: float, base: int) -> list[float]:
    """Powers of the base inside [lo, hi]; for base 10 over a short range also 2x and 5x,
    so that a chart from 0.01 to 0.2 still gets several labels."""
    first, last = math.floor(math.log(lo, base) + 1e-9), math.ceil(math.log(hi, base) - 1e-9)
    mults = (1, 2, 5) if base == 10 and hi / lo <= 10 ** 2.5 else (1,)
    ticks = [m * base ** k for k in range(first, last + 1) for m in mults]
    ticks = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    while len(ticks) > 10:  # a long log2 range: every other power
        ticks = ticks[::2]
    return ticks


def ticks(lo: float, hi: float, axis: Axis) -> list[float]:
    return log_ticks(lo, hi, axis.log_base) if axis.log_base else linear_ticks(lo, hi)


def fmt_context(n: float) -> str:
    """Context lengths as a kernel engineer writes them: 1k, 32k, 128k, 1M."""
    n = int(round(n))
    for unit, size in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


# --------------------------------------------------------------------------- line charts


@dataclass
class Line:
    label: str
    points: list[tuple[float, float]] = field(default_factory=list)
    dash: str = ""  # an SVG stroke-dasharray; empty for a solid line
    colour: str = ""  # empty: the palette colour of the line's position


LINE_W, LINE_H = 560, 320
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 62, 16, 30, 46
LEGEND_W = 250
LEGEND_ROW = 17
LEGEND_CHARS = 38


def _usable(points: Iterable[tuple[float, float]], x_axis: Axis, y_axis: Axis) -> list:
    """Points that can be drawn: finite, and positive on a log axis."""
    ok = []
    for x, y in points:
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            continue
        if (x_axis.log_base and x <= 0) or (y_axis.log_base and y <= 0):
            continue
        ok.append((x, y))
    return sorted(ok)


def _axes(xs: Scale, ys: Scale, x_axis: Axis, y_axis: Axis) -> list[str]:
    """Frame, grid lines, tick labels and axis titles."""
    left, right, bottom, top = xs.px_lo, xs.px_hi, ys.px_lo, ys.px_hi
    out = [f'<rect x="{_f(left)}" y="{_f(top)}" width="{_f(right - left)}" '
           f'height="{_f(bottom - top)}" fill="#ffffff" stroke="#8c959f"/>']
    for t in ticks(xs.lo, xs.hi, x_axis):
        x = xs(t)
        out.append(f'<line x1="{_f(x)}" y1="{_f(top)}" x2="{_f(x)}" y2="{_f(bottom)}" stroke="#eaeef2"/>')
        out.append(_text(x, bottom + 15, x_axis.fmt(t), anchor="middle", size=11))
    for t in ticks(ys.lo, ys.hi, y_axis):
        y = ys(t)
        out.append(f'<line x1="{_f(left)}" y1="{_f(y)}" x2="{_f(right)}" y2="{_f(y)}" stroke="#eaeef2"/>')
        out.append(_text(left - 5, y + 4, y_axis.fmt(t), anchor="end", size=11))
    out.append(_text((left + right) / 2, bottom + 34, x_axis.label, anchor="middle"))
    mid = (top + bottom) / 2
    out.append(_text(14, mid, y_axis.label, anchor="middle",
                     extra=f' transform="rotate(-90 14 {_f(mid)})"'))
    return out


def _parity(xs: Scale, ys: Scale) -> list[str]:
    """The 1x line of a speedup chart: above it the kernel wins."""
    if not ys.lo < 1 < ys.hi:
        return []
    y = ys(1.0)
    return [f'<line class="parity" x1="{_f(xs.px_lo)}" y1="{_f(y)}" x2="{_f(xs.px_hi)}" '
            f'y2="{_f(y)}" stroke="#57606a" stroke-dasharray="4 3"/>',
            _text(xs.px_lo + 4, y - 4, "1× parity (above: kernel faster)", size=10, fill="#57606a")]


def _dash(line: Line) -> str:
    return f' stroke-dasharray="{line.dash}"' if line.dash else ""


def _series(line: Line, colour: str, xs: Scale, ys: Scale, x_axis: Axis, y_axis: Axis) -> str:
    coords = " ".join(f"{_f(xs(x))},{_f(ys(y))}" for x, y in line.points)
    dash = _dash(line)
    marks = "".join(
        f'<circle cx="{_f(xs(x))}" cy="{_f(ys(y))}" r="3" fill="{colour}">'
        f"<title>{_esc(line.label)}: {_esc(x_axis.fmt(x))}, {_esc(y_axis.fmt(y))}</title></circle>"
        for x, y in line.points)
    return (f'<g class="series" data-label="{_attr(line.label)}">'
            f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>'
            f"{marks}</g>")


def _legend(lines: list[Line], x: float, y: float) -> list[str]:
    out = []
    for i, line in enumerate(lines):
        colour = line.colour or PALETTE[i % len(PALETTE)]
        row = y + i * LEGEND_ROW
        dash = _dash(line)
        label = line.label if len(line.label) <= LEGEND_CHARS else line.label[:LEGEND_CHARS - 1] + "…"
        out.append(f'<g class="legend-entry"><title>{_esc(line.label)}</title>'
                   f'<line x1="{_f(x)}" y1="{_f(row - 4)}" x2="{_f(x + 20)}" y2="{_f(row - 4)}" '
                   f'stroke="{colour}" stroke-width="2"{dash}/>'
                   + _text(x + 26, row, label, size=11) + "</g>")
    return out


def line_chart(title: str, lines: list[Line], x_axis: Axis, y_axis: Axis, *,
               parity: bool = False) -> Markup | None:
    """A line chart with ticks, axis titles and a legend on the right; None without data."""
    lines = [Line(l.label, _usable(l.points, x_axis, y_axis), l.dash, l.colour) for l in lines]
    lines = [l for l in lines if l.points]
    if not lines:
        return None
    x_lo, x_hi = domain([x for l in lines for x, _ in l.points], x_axis)
    y_lo, y_hi = domain([y for l in lines for _, y in l.points], y_axis)
    height = max(LINE_H, MARGIN_T + len(lines) * LEGEND_ROW + 20)
    xs = Scale(x_lo, x_hi, MARGIN_L, LINE_W - MARGIN_R, bool(x_axis.log_base))
    ys = Scale(y_lo, y_hi, height - MARGIN_B, MARGIN_T, bool(y_axis.log_base))
    body = [_text(MARGIN_L, 18, title, weight="bold", size=13)]
    body += _axes(xs, ys, x_axis, y_axis)
    body += _parity(xs, ys) if parity else []
    body += [_series(l, l.colour or PALETTE[i % len(PALETTE)], xs, ys, x_axis, y_axis)
             for i, l in enumerate(lines)]
    body += _legend(lines, LINE_W + 8, MARGIN_T + 10)
    return _svg(LINE_W + LEGEND_W, height, body, title, "line")


# --------------------------------------------------------------------------- heatmaps


CELL_W, CELL_H = 70, 34
HEAT_LEFT, HEAT_TOP = 70, 62
NO_DATA = "#d0d7de"
SLOWER_RGB, PARITY_RGB, FASTER_RGB = (207, 34, 46), (255, 255, 255), (26, 127, 55)
HEAT_CAP = 3.0  # log2: 8x and 1/8x are the ends of the colour scale


def heat_colour(value: float) -> str:
    """White at parity, red when the kernel is slower, green when faster; log2 scale."""
    t = max(-1.0, min(1.0, math.log2(value) / HEAT_CAP))
    end = FASTER_RGB if t > 0 else SLOWER_RGB
    rgb = [round(p + (e - p) * abs(t)) for p, e in zip(PARITY_RGB, end)]
    return "#" + "".join(f"{c:02x}" for c in rgb)


def _ink(value: float) -> str:
    return "#ffffff" if abs(math.log2(value)) / HEAT_CAP > 0.6 else "#1f2328"


@dataclass
class HeatCell:
    value: float | None
    title: str
    text: str


def _heat_cell(x: float, y: float, cell: HeatCell | None) -> str:
    if cell is None:
        fill, ink, text, title = NO_DATA, "#57606a", MISSING, "not measured"
    elif cell.value is None:
        fill, ink, text, title = NO_DATA, "#57606a", cell.text, cell.title
    else:
        fill, ink, text, title = heat_colour(cell.value), _ink(cell.value), cell.text, cell.title
    missing = ' data-missing="1"' if cell is None or cell.value is None else ""
    return (f'<g class="cell"{missing}><title>{_esc(title)}</title>'
            f'<rect x="{_f(x)}" y="{_f(y)}" width="{CELL_W}" height="{CELL_H}" fill="{fill}" '
            f'stroke="#ffffff"/>' + _text(x + CELL_W / 2, y + CELL_H / 2 + 4, text,
                                         anchor="middle", size=12, fill=ink) + "</g>")


def _heat_legend(x: float, y: float) -> list[str]:
    out = [_text(x, y - 6, "speedup (kernel faster →)", size=10, fill="#57606a")]
    steps = [2.0 ** k for k in range(-3, 4)]
    w = 38
    for i, v in enumerate(steps):
        out.append(f'<rect class="swatch" x="{_f(x + i * w)}" y="{_f(y)}" width="{w}" height="10" '
                   f'fill="{heat_colour(v)}" stroke="#d0d7de"/>')
        out.append(_text(x + i * w + w / 2, y + 22, fmt_value(v) + "×", anchor="middle", size=10))
    out.append(f'<rect class="swatch" x="{_f(x + len(steps) * w + 10)}" y="{_f(y)}" width="{w}" '
               f'height="10" fill="{NO_DATA}"/>')
    out.append(_text(x + len(steps) * w + 10 + w / 2, y + 22, "none", anchor="middle", size=10))
    return out


def heatmap(title: str, cells: dict[tuple[int, int], HeatCell],
            rows: tuple[int, ...] = BLOCK_SIZES, cols: tuple[int, ...] = BLOCK_SIZES) -> Markup:
    """A grid of speedups, rows BQ, columns BKV; cells without a number are grey."""
    body = [_text(8, 18, title, weight="bold", size=13),
            _text(HEAT_LEFT + len(cols) * CELL_W / 2, HEAT_TOP - 24, "BKV", anchor="middle",
                  weight="bold"),
            _text(8, HEAT_TOP + len(rows) * CELL_H / 2 + 4, "BQ", weight="bold")]
    for j, c in enumerate(cols):
        body.append(_text(HEAT_LEFT + j * CELL_W + CELL_W / 2, HEAT_TOP - 6, c, anchor="middle", size=11))
    for i, r in enumerate(rows):
        y = HEAT_TOP + i * CELL_H
        body.append(_text(HEAT_LEFT - 6, y + CELL_H / 2 + 4, r, anchor="end", size=11))
        for j, c in enumerate(cols):
            body.append(_heat_cell(HEAT_LEFT + j * CELL_W, y, cells.get((r, c))))
    legend_y = HEAT_TOP + len(rows) * CELL_H + 24
    body += _heat_legend(HEAT_LEFT - 40, legend_y)
    width = max(HEAT_LEFT + len(cols) * CELL_W + 12, HEAT_LEFT - 40 + 8 * 38 + 20)
    return _svg(width, legend_y + 34, body, title, "heat")


# --------------------------------------------------------------------------- charts from sweeps


def sweep_records(records: Iterable[dict], name: str) -> list[dict]:
    return [r for r in records if _str(_sweep(r).get("name")) == name]


def _group_label(parts: Iterable[str]) -> str:
    return " · ".join(p for p in parts if p)


def _place(rec: dict) -> tuple[str, str]:
    """Where a timing was taken: times from different devices or hosts never share a line."""
    return _str(rec.get("device")), host(rec)


def _place_label(place: tuple[str, str], show: bool) -> str:
    """``cuda@h100-a``, shown only when the chart's records come from more than one place."""
    device, hst = place
    return "" if not show else f"{device}@{hst}" if hst else device


def sweep_groups(records: list[dict]) -> tuple[dict[tuple, list], bool]:
    """Records by (series, place), and whether the places differ (then labels name them)."""
    groups: dict[tuple, list] = defaultdict(list)
    for r in records:
        groups[(_str(_sweep(r).get("series")), _place(r))].append(r)
    return dict(sorted(groups.items())), len({place for _, place in groups}) > 1


def kept_ratio_chart(family: str, records: list[dict]) -> Markup | None:
    """Speedup against kept ratio: one line per (series[, device], baseline). Colour names the
    baseline and the dash pattern the series, so one baseline reads the same across series."""
    groups, show_place = sweep_groups(records)
    baselines = baselines_present(records)
    lines = []
    for g, ((series, place), recs) in enumerate(groups.items()):
        for b, name in enumerate(baselines):
            points = [(_num(_sweep(r).get("x")), speedup(r, name)) for r in recs]
            label = _group_label((series, _place_label(place, show_place),
                                  f"vs {baseline_label(name)['label']}"))
            lines.append(Line(label, points, dash=DASHES[g % len(DASHES)],
                              colour=PALETTE[b % len(PALETTE)]))
    return line_chart(f"{family}: speedup vs kept ratio", lines,
                      Axis("kept ratio", 10), Axis("speedup (baseline / kernel)", 10, include=(1.0,)),
                      parity=True)


def context_charts(family: str, records: list[dict]) -> list[Markup]:
    """Latency against context length, one chart per (series, device): the kernel and each
    baseline as lines."""
    groups, show_place = sweep_groups(records)
    charts = []
    for (series, place), recs in groups.items():
        lines = [Line("kernel", [(_num(_sweep(r).get("x")), kernel_median(r)) for r in recs])]
        lines += [Line(baseline_label(name)["label"],
                       [(_num(_sweep(r).get("x")), baseline_median(r, name)) for r in recs], dash="6 3")
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
    case = _str(rec.get("case_id"))
    if value is None:
        reason = message_view(rec.get("message"))["first_line"] or "no timing"
        return HeatCell(None, f"{case}: {_str(rec.get('outcome'))}: {reason}",
                        _str(rec.get("outcome")) or MISSING)
    detail = (f"{case}: kernel {fmt_value(kernel_median(rec))} ms, {baseline} "
              f"{fmt_value(baseline_median(rec, baseline))} ms, speedup {fmt_speedup(value)}")
    return HeatCell(value, detail, fmt_speedup(value))


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
                charts.append(heatmap(title, cells))
    return charts


def _is_sparsity_label(series: str) -> bool:
    return re.fullmatch(r"s=?[0-9.]+", series) is not None


def heat_cells(records: list[dict], sparsity: float, baseline: str | None) -> dict[tuple, HeatCell]:
    """The (BQ, BKV) cells of one sparsity."""
    cells = {}
    for r in records:
        params = _dict(r.get("params"))
        bq, bkv = _num(params.get("bq")), _num(params.get("bkv"))
        if _same_sparsity(_num(params.get("s")), sparsity) and bq is not None and bkv is not None:
            cells[(int(bq), int(bkv))] = block_shape_cell(r, baseline)
    return cells


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


# --------------------------------------------------------------------------- the section


def bench_families(records: Iterable[dict]) -> dict[str, list[dict]]:
    by_family: dict[str, list] = defaultdict(list)
    for r in records:
        if is_bench(r):
            by_family[_str(r.get("family"))].append(r)
    return dict(sorted(by_family.items()))


def bench_context(records: Iterable[dict]) -> dict:
    """The benchmarks section: one entry per family with its charts and table."""
    by_family = bench_families(records)
    families = []
    for family, recs in by_family.items():
        families.append({
            "family": family,
            "anchor": "bench-" + slug(family),
            "summary": counts_summary(recs),
            **family_table(recs),
            "charts": family_charts(family, recs),
        })
    _dedupe_anchors(families)
    return {"families": families, "total": sum(len(r) for r in by_family.values())}


def _dedupe_anchors(families: list[dict]) -> None:
    """Two family names may slug alike ("paged decode", "paged-decode")."""
    seen: set[str] = set()
    for fam in families:
        base, n = fam["anchor"], 2
        while fam["anchor"] in seen:
            fam["anchor"], n = f"{base}-{n}", n + 1
        seen.add(fam["anchor"])
