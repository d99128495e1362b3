"""Reproducibility check over two stored benchmark runs:
``python -m attnsuite.bench.compare RUN_A RUN_B [--threshold 0.10]``.

RUN_A / RUN_B are run directories (or .jsonl files) of records, or pytest-benchmark JSON files
(``--benchmark-json``/``--benchmark-autosave``: their ``extra_info`` carries the device time).
For every case benchmarked in both, it prints the kernel's and each baseline's device-time
median in each run and their spread ``|a - b| / min(a, b)``, flags a spread over the threshold,
and exits 1 when anything is flagged (0 otherwise), so CI can run it after two runs.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterable, Optional

from .run import REPEAT_SPREAD


def _from_pytest_benchmark(path: Path) -> dict[str, dict]:
    data = json.loads(path.read_text())
    out = {}
    for b in data.get("benchmarks", []):
        info = b.get("extra_info") or {}
        if "device_median_ms" not in info:
            continue
        lines = {"kernel": (info["device_median_ms"], info.get("device_method"))}
        for key, value in info.items():
            if key.startswith("baselines.") and key.endswith(".device.median_ms"):
                name = key[len("baselines."):-len(".device.median_ms")]
                lines[name] = (value, info.get(f"baselines.{name}.method"))
        out[b.get("fullname") or b.get("name")] = lines
    return out


def _from_records(paths: Iterable[Path]) -> dict[str, dict]:
    from attnsuite.records import read_records

    out = {}
    for rec in read_records(paths):
        bench = rec.get("bench")
        if not bench or "kernel" not in bench or "device" not in bench["kernel"]:
            continue
        lines = {"kernel": (bench["kernel"]["device"]["median_ms"], bench["kernel"].get("method"))}
        for name, b in (bench.get("baselines") or {}).items():
            if "device" in b:
                lines[name] = (b["device"]["median_ms"], b.get("method"))
        out[f"{rec['family']}[{rec['case_id']}]@{rec.get('impl') or ''}@{rec['device']}"] = lines
    return out


def load(path: str) -> dict[str, dict]:
    """case -> {line name: (device median ms, method)}."""
    p = Path(path)
    if p.is_file() and p.suffix == ".json":
        return _from_pytest_benchmark(p)
    return _from_records([p])


def spread(a: float, b: float) -> float:
    lo = min(a, b)
    return abs(a - b) / lo if lo > 0 else float("inf")


def compare(run_a: dict, run_b: dict, threshold: float = REPEAT_SPREAD) -> list[dict]:
    rows = []
    for case in sorted(set(run_a) & set(run_b)):
        for line in sorted(set(run_a[case]) & set(run_b[case]), key=lambda n: (n != "kernel", n)):
            (a, ma), (b, mb) = run_a[case][line], run_b[case][line]
            s = spread(a, b)
            rows.append({"case": case, "line": line, "a_ms": a, "b_ms": b, "spread": s,
                         "flagged": s > threshold,
                         "note": None if ma == mb else f"methods differ: {ma} vs {mb}"})
    return rows


def render(rows: list[dict], threshold: float) -> str:
    out = [f"{'case':70} {'line':14} {'A ms':>10} {'B ms':>10} {'spread':>7}"]
    for r in rows:
        flag = "  FLAG" if r["flagged"] else ""
        note = f"  ({r['note']})" if r["note"] else ""
        out.append(f"{r['case'][:70]:70} {r['line'][:14]:14} {r['a_ms']:10.4f} {r['b_ms']:10.4f} "
                   f"{r['spread'] * 100:6.1f}%{flag}{note}")
    flagged = sum(r["flagged"] for r in rows)
    out.append(f"{len(rows)} lines compared, {flagged} with a device-time spread over "
               f"{threshold * 100:.0f}%")
    return "\n".join(out)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a")
    ap.add_argument("run_b")
    ap.add_argument("--threshold", type=float, default=REPEAT_SPREAD,
                    help="flag a spread |a-b|/min(a,b) above this (default 0.10)")
    args = ap.parse_args(argv)
    a, b = load(args.run_a), load(args.run_b)
    rows = compare(a, b, args.threshold)
    if not rows:
        print(f"no case benchmarked in both runs ({len(a)} in A, {len(b)} in B)")
        return 2
    print(render(rows, args.threshold))
    return 1 if any(r["flagged"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
