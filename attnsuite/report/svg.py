"""Inline SVG charts: line charts on linear or log axes, and heatmaps of ratios.

Knows nothing of records: callers hand over labelled points and cells. The SVG is built here
as text, so escaping happens here too: every piece of caller text goes through ``_esc``/``_attr``
and the finished SVG is returned as ``Markup``. The SVGs carry no xmlns: inline in HTML the
parser puts them in the SVG namespace, and the page stays free of URLs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from xml.sax.saxutils import escape

from markupsafe import Markup

from attnsuite.report.fields import MISSING, text as _str
from attnsuite.report.fmt import fmt_value

# Distinguishable in colour-blind vision too (Okabe-Ito, then a few darker extras).
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#b8860b",
           "#000000", "#6a3d9a", "#8c564b")
DASHES = ("", "6 3", "2 3", "8 3 2 3")


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
            rows: tuple[int, ...], cols: tuple[int, ...], row_label: str, col_label: str) -> Markup:
    """A grid of speedups (white at parity); cells without a number are grey."""
    body = [_text(8, 18, title, weight="bold", size=13),
            _text(HEAT_LEFT + len(cols) * CELL_W / 2, HEAT_TOP - 24, col_label, anchor="middle",
                  weight="bold"),
            _text(8, HEAT_TOP + len(rows) * CELL_H / 2 + 4, row_label, weight="bold")]
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
