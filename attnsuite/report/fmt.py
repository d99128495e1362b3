"""Numbers, times and rates as the report prints them (no HTML here)."""
from __future__ import annotations

import math
from typing import Any

from attnsuite.report.fields import MISSING, num


def fmt_num(value: Any, sig: int = 3) -> str:
    """Three significant digits; "inf" for infinity, "nan" for NaN, an em dash when missing."""
    x = num(value)
    if x is None:
        return MISSING
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{sig}g}"


def fmt_value(value: Any, sig: int = 3) -> str:
    """``sig`` significant digits, without the exponent form for values up to 10^6 (a 7716 ms
    reference reads better as 7716 than 7.72e+03)."""
    x = num(value)
    if x is None or not math.isfinite(x):
        return MISSING if x is None else str(x)
    if 10 ** sig <= abs(x) < 1e6:
        return f"{x:.0f}"
    return f"{x:.{sig}g}"


def fmt_duration(value: Any) -> str:
    s = num(value)
    if s is None or math.isnan(s) or s < 0:
        return MISSING
    if math.isinf(s):
        return "inf"
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.2f} s"
    minutes, seconds = divmod(s, 60)
    if minutes < 60:
        return f"{int(minutes)}m {seconds:02.0f}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h {int(minutes):02d}m"


def fmt_bytes(value: Any) -> str:
    """Byte counts as a kernel engineer reads on-chip buffers: 512 B, 60 KiB, 1.5 MiB."""
    x = num(value)
    if x is None or not math.isfinite(x) or x < 0:
        return MISSING
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= size:
            return f"{fmt_value(x / size)} {unit}"
    return f"{x:.0f} B"


def fmt_speedup(value: float | None) -> str:
    return MISSING if value is None else fmt_value(value) + "×"


def fmt_percent(fraction: Any) -> str:
    x = num(fraction)
    return MISSING if x is None or not math.isfinite(x) else f"{x * 100:.0f}%"


def fmt_median_iqr(stats: dict, unit_key: str = "_ms") -> str:
    """``median ± IQR`` (the spread to two digits: a third is noise); the median alone when the
    IQR is unknown. ``unit_key`` is the suffix of the keys: ``_ms`` for device times
    (``median_ms``, ``iqr_ms``, ``q1_ms``, ``q3_ms``), ``""`` for host times in µs."""
    median = num(stats.get("median" + unit_key))
    if median is None:
        return MISSING
    iqr = num(stats.get("iqr" + unit_key))
    if iqr is None:
        q1, q3 = num(stats.get("q1" + unit_key)), num(stats.get("q3" + unit_key))
        iqr = q3 - q1 if q1 is not None and q3 is not None else None
    return fmt_value(median) if iqr is None else f"{fmt_value(median)} ± {fmt_value(iqr, 2)}"


def stats_title(stats: dict, unit_key: str = "_ms", unit: str = "ms") -> str:
    """The tooltip of a timing cell: quartiles, minimum and run count."""
    parts = []
    for key, label in (("min", "min"), ("q1", "q1"), ("median", "median"), ("q3", "q3")):
        value = num(stats.get(key + unit_key))
        if value is not None:
            parts.append(f"{label} {fmt_value(value)} {unit}")
    runs = num(stats.get("runs"))
    if runs is not None:
        parts.append(f"{int(runs)} runs")
    return ", ".join(parts)


def fmt_context(n: float) -> str:
    """Context lengths as a kernel engineer writes them: 1k, 32k, 128k, 1M."""
    n = int(round(n))
    for unit, size in (("M", 1 << 20), ("k", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)
