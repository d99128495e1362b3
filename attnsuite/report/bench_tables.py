"""The per-family benchmark table: the kernel's device time, host time and call latency, each
baseline's device time and the kernel's speedup over it, throughput, compile time, launch
config and outcome. Footnotes collect the baselines' notes and unavailability reasons."""
from __future__ import annotations

import re
from typing import Any

from attnsuite.report.bench_records import (
    baseline_entry,
    baseline_label,
    baselines_present,
    bench,
    device_stats,
    host,
    host_stats,
    kernel_entry,
    latency_ms,
    method,
    method_label,
    repeat,
    speedup,
)
from attnsuite.report.fields import MISSING, mapping, num, text
from attnsuite.report.fmt import (
    fmt_duration,
    fmt_median_iqr,
    fmt_percent,
    fmt_speedup,
    fmt_value,
    stats_title,
)
from attnsuite.report.rows import case_anchor, filter_attrs, is_bad, message_view, outcome, outcome_class


class Footnotes:
    """Numbered footnotes for one family's table: the same text gets the same number."""

    def __init__(self) -> None:
        self._marks: dict[str, str] = {}

    def mark(self, note: str) -> str:
        if not note:
            return ""
        return self._marks.setdefault(note, str(len(self._marks) + 1))

    def items(self) -> list[dict]:
        return [{"mark": m, "text": t} for t, m in self._marks.items()]


def _meta(meta: dict) -> str:
    return " ".join(f"{k}={text(v)}" for k, v in meta.items())


def config_lines(config: Any) -> list[str]:
    """A launch config as ``BLOCK_M=128 BLOCK_N=64 num_warps=4``. A config per launched kernel
    (``{kernel: {meta}}``, e.g. split-KV decode and its merge) gets a line each, named."""
    config = mapping(config)
    flat = {k: v for k, v in config.items() if not isinstance(v, dict)}
    lines = [_meta(flat)] if flat else []
    return lines + [f"{name}: {_meta(meta)}" for name, meta in config.items() if isinstance(meta, dict)]


def speedup_class(value: float | None) -> str:
    if value is None:
        return ""
    return "faster" if value > 1 else "slower" if value < 1 else ""


def timing_method(rec: dict, entry: Any) -> str:
    """How an entry's device time was taken. Schema 1 records name no method: they were all
    timed with device events."""
    name = method(entry)
    if not name and rec.get("schema") == 1 and device_stats(entry):
        name = "events"
    return name


def baseline_cell(rec: dict, name: str, notes: Footnotes) -> dict:
    """One baseline's device median and the kernel's speedup over it, for one row."""
    entry = baseline_entry(rec, name)
    if not isinstance(entry, dict):
        return {"median": MISSING, "title": "", "speedup": MISSING, "speedup_class": "",
                "unavailable": False, "note_mark": "", "note": ""}
    if "unavailable" in entry:
        reason = text(entry.get("unavailable")) or "unavailable"
        return {"median": "n/a", "title": reason, "speedup": MISSING, "speedup_class": "",
                "unavailable": True, "note_mark": notes.mark(f"{name} unavailable: {reason}"),
                "note": reason}
    s = speedup(rec, name)
    note = text(entry.get("note"))
    title = stats_title(device_stats(entry))
    extra = [f"host {fmt_value(host_stats(entry).get('median'))} µs" if host_stats(entry) else "",
             f"latency {fmt_value(latency_ms(entry))} ms" if latency_ms(entry) else "",
             method_label(timing_method(rec, entry))]
    return {
        "median": fmt_median_iqr(device_stats(entry)),
        "title": "; ".join(p for p in [title, *extra] if p),
        "speedup": fmt_speedup(s),
        "speedup_class": speedup_class(s),
        "unavailable": False,
        "note_mark": notes.mark(f"{name}: {note}") if note else "",
        "note": note,
    }


def throughput(rec: dict) -> dict:
    """TFLOP/s for compute-bound families; GB/s and the fraction of the run's measured
    device-to-device copy bandwidth for memory-bound ones. All from device time."""
    b = bench(rec)
    copy = num(b.get("copy_gbps"))
    fraction = num(b.get("copy_fraction"))
    gbps = num(b.get("gbps"))
    if fraction is None and gbps is not None and copy:
        fraction = gbps / copy
    return {
        "tflops": fmt_value(b.get("tflops")),
        "gbps": fmt_value(gbps),
        "copy_fraction": fmt_percent(fraction),
        "copy_title": f"copy bandwidth measured at the start of the run: {fmt_value(copy)} GB/s"
                      if copy else "",
    }


def repeat_view(rec: dict) -> dict | None:
    rep = repeat(rec)
    if rep is None:
        return None
    medians = " and ".join(f"{fmt_value(m)} ms" for m in rep["medians"])
    return {"flagged": rep["flagged"], "spread": fmt_percent(rep["spread"]),
            "title": f"timed twice in this session: {medians or 'two medians'}, "
                     f"{fmt_percent(rep['spread'])} apart"
                     + (" (over 10%: this timing is not stable)" if rep["flagged"] else "")}


def bench_row(rec: dict, baselines: list[str], notes: Footnotes) -> dict:
    kernel = kernel_entry(rec)
    name = outcome(rec)
    index = text(rec.get("device_index"))
    env = mapping(rec.get("env"))
    host_us = host_stats(kernel)
    latency = latency_ms(kernel)
    return {
        "case_id": text(rec.get("case_id")),
        "anchor": case_anchor(rec),
        "filters": filter_attrs(rec),
        "nodeid": text(rec.get("nodeid")),
        "repro": text(rec.get("repro")),
        "impl": text(rec.get("impl")),
        "device": text(rec.get("device")) + (f":{index}" if index else ""),
        "device_name": text(env.get("device_name")),
        "host": host(rec),
        "kernel": fmt_median_iqr(device_stats(kernel)),
        "kernel_title": "; ".join(p for p in (stats_title(device_stats(kernel)),
                                              method_label(timing_method(rec, kernel))) if p),
        "method": timing_method(rec, kernel),
        "host_us": fmt_median_iqr(host_us, "") if host_us else MISSING,
        "host_title": stats_title(host_us, "", "µs"),
        "latency": fmt_value(latency) if latency is not None else MISSING,
        "repeat": repeat_view(rec),
        "baselines": [baseline_cell(rec, b, notes) for b in baselines],
        **throughput(rec),
        "compile": fmt_duration(kernel.get("compile_s")),
        "config": config_lines(bench(rec).get("config")),
        "outcome": name,
        "outcome_class": outcome_class(name),
        "bad": is_bad(rec),
        "message": message_view(rec.get("message")),
    }


def natural_key(value: str) -> tuple:
    """Numbers inside a case id compare as numbers: S4096 before S16384, kept0.2 before kept1.0.
    re.split alternates text and number, so like positions always hold like types."""
    parts = re.split(r"(\d+(?:\.\d+)?)", value)
    return tuple(float(p) if i % 2 else p for i, p in enumerate(parts))


def _row_key(rec: dict) -> tuple:
    return (natural_key(text(rec.get("case_id"))), text(rec.get("device")), host(rec),
            text(rec.get("impl")))


def family_table(records: list[dict]) -> dict:
    """The table of one family: the kernel's times, then each baseline present (device median
    and speedup), throughput, compile time, config and outcome. Host time and latency get
    columns only where some record has them (records schema 2)."""
    records = sorted(records, key=_row_key)
    baselines = baselines_present(records)
    notes = Footnotes()
    rows = [bench_row(r, baselines, notes) for r in records]
    methods = sorted({(r["method"], text(rec.get("device"))) for r, rec in zip(rows, records) if r["method"]})
    return {
        "baselines": [baseline_label(n) for n in baselines],
        "rows": rows,
        "methods": [{"method": method_label(m), "device": d} for m, d in methods],
        "show_impl": len({r["impl"] for r in rows}) > 1,
        "show_host": any(r["host_us"] != MISSING for r in rows),
        "show_latency": any(r["latency"] != MISSING for r in rows),
        "show_tflops": any(r["tflops"] != MISSING for r in rows),
        "show_gbps": any(r["gbps"] != MISSING or r["copy_fraction"] != MISSING for r in rows),
        "unstable": [r for r in rows if r["repeat"] and r["repeat"]["flagged"]],
        "notes": notes.items(),
    }
