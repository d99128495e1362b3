"""Reading the ``bench`` payload of a benchmark record (mode ``bench``), whatever its schema.

Schema 1 kept one set of device-event statistics per timed callable::

    kernel     {median_ms, q1_ms, q3_ms, iqr_ms, runs, compile_s}
    baselines  {name: {median_ms, ..., note} | {unavailable: reason}}

Schema 2 separates what a call costs on the device from what it costs the host::

    kernel     {device: {median_ms, q1_ms, q3_ms, iqr_ms, min_ms, runs}, method,
                host_us: {median, q1, q3, runs}, latency_ms, compile_s, l2, note}
    baselines  {name: the same without compile_s | {unavailable: reason}}
    repeat     {device_median_ms: [a, b], spread, flagged}

Both also carry ``speedup`` (baseline / kernel device median), throughput (``tflops``,
``gbps``, ``copy_gbps``, ``copy_fraction``), ``config`` and ``sweep``. The accessors below give
the same answers for both, so the tables and charts never look at the schema.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from attnsuite.report.fields import mapping, num, text

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

#: How device time was taken, in words (the method names of records schema 2).
METHODS = {
    "cudagraph": "CUDA graph replay",
    "profiler": "profiler kernel time",
    "events": "device events",
    "npu-graph": "NPU graph replay",
    "npu-profiler": "NPU profiler kernel time",
}


def is_bench(rec: dict) -> bool:
    return rec.get("mode") == BENCH_MODE


def bench(rec: dict) -> dict:
    return mapping(rec.get("bench"))


def sweep(rec: dict) -> dict:
    return mapping(bench(rec).get("sweep"))


def positive(value: Any) -> float | None:
    """A strictly positive finite number, or None: times, rates and speedups that can be drawn
    on a log axis and divided by."""
    x = num(value)
    return x if x is not None and math.isfinite(x) and x > 0 else None


def kernel_entry(rec: dict) -> dict:
    return mapping(bench(rec).get("kernel"))


def baseline_entry(rec: dict, name: str) -> Any:
    """A baseline's entry as recorded (a dict, or anything odd a producer wrote)."""
    return mapping(bench(rec).get("baselines")).get(name)


def device_stats(entry: Any) -> dict:
    """The device-time statistics of a timed callable: ``entry["device"]`` in schema 2, the
    entry itself in schema 1."""
    entry = mapping(entry)
    inner = entry.get("device")
    return inner if isinstance(inner, dict) else entry


def host_stats(entry: Any) -> dict:
    """Host time per call in µs (schema 2), or {}."""
    return mapping(mapping(entry).get("host_us"))


def latency_ms(entry: Any) -> float | None:
    """Device median + host median: what one call costs its caller."""
    entry = mapping(entry)
    recorded = positive(entry.get("latency_ms"))
    if recorded is not None:
        return recorded
    device, host = positive(device_stats(entry).get("median_ms")), positive(host_stats(entry).get("median"))
    return device + host / 1000 if device is not None and host is not None else None


def method(entry: Any) -> str:
    return text(mapping(entry).get("method"))


def method_label(name: str) -> str:
    return METHODS.get(name, name)


def kernel_median(rec: dict) -> float | None:
    return positive(device_stats(kernel_entry(rec)).get("median_ms"))


def baseline_median(rec: dict, name: str) -> float | None:
    return positive(device_stats(baseline_entry(rec, name)).get("median_ms"))


def speedup(rec: dict, name: str) -> float | None:
    """Baseline device median / kernel device median, as recorded; computed from the medians
    when the record has no speedup for that baseline."""
    recorded = positive(mapping(bench(rec).get("speedup")).get(name))
    if recorded is not None:
        return recorded
    kernel, base = kernel_median(rec), baseline_median(rec, name)
    return base / kernel if kernel and base else None


def repeat(rec: dict) -> dict | None:
    """The case's two timings when it was timed twice in one session, or None."""
    rep = mapping(bench(rec).get("repeat"))
    medians = [positive(x) for x in rep.get("device_median_ms") or []] \
        if isinstance(rep.get("device_median_ms"), list) else []
    spread = num(rep.get("spread"))
    if spread is None and len(medians) == 2 and all(medians):
        spread = abs(medians[0] - medians[1]) / min(medians)
    if spread is None:
        return None
    flagged = rep.get("flagged")
    return {"medians": [m for m in medians if m is not None], "spread": spread,
            "flagged": bool(flagged) if isinstance(flagged, bool) else spread > 0.10}


def host(rec: dict) -> str:
    return text(mapping(rec.get("env")).get("host"))


def baselines_present(records: Iterable[dict]) -> list[str]:
    names = {text(n) for r in records for n in mapping(bench(r).get("baselines"))}
    known = [n for n in BASELINE_ORDER if n in names]
    return known + sorted(names - set(BASELINE_ORDER))


def baseline_label(name: str) -> dict:
    label, description = BASELINE_LABELS.get(name, (name, name))
    return {"name": name, "label": label, "description": description}
