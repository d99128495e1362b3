"""The benchmark records of a run as text: ``python -m attnsuite.bench.show RUN_DIR [...]``.

One block per benchmarked case: the kernel's device time (median and IQR, the method that
produced it, the L2 state), host time per call and call latency; every baseline the same way
with the kernel's speedup over it; the repeat spread when the case was timed twice; the launch
config and where its tiles came from (table, cache, tuned, default). What a closing note quotes,
read from the records rather than retyped.
"""
from __future__ import annotations

import argparse
from typing import Optional


def _line(name: str, b: dict, speedup: Optional[float] = None) -> str:
    if "unavailable" in b:
        return f"    {name:16} unavailable: {b['unavailable']}"
    d, h = b["device"], b["host_us"]
    sp = f"  speedup {speedup:5.2f}x" if speedup is not None else ""
    note = f"  ({b['note']})" if b.get("note") else ""
    return (f"    {name:16} device {d['median_ms'] * 1e3:9.1f} us (IQR {d['iqr_ms'] * 1e3:6.1f}) "
            f"[{b['method']}, L2 {b['l2']}]  host {h['median']:7.1f} us  latency "
            f"{b['latency_ms'] * 1e3:9.1f} us{sp}{note}")


def render(records: list[dict]) -> str:
    out = []
    for rec in records:
        bench = rec.get("bench")
        if not bench or "kernel" not in bench or "device" not in bench["kernel"]:
            continue
        out.append(f"{rec['family']}[{rec['case_id']}]  ({rec.get('impl')}, {rec['device']})")
        out.append(_line("kernel", bench["kernel"]))
        for name, b in sorted((bench.get("baselines") or {}).items()):
            out.append(_line(name, b, (bench.get("speedup") or {}).get(name)))
        rep = bench.get("repeat")
        if rep:
            a, b = rep["device_median_ms"]
            out.append(f"    repeat           {a * 1e3:.1f} / {b * 1e3:.1f} us, spread {rep['spread'] * 100:.1f}%"
                       f"{'  FLAGGED' if rep['flagged'] else ''}")
        for kernel, cfg in (bench.get("config") or {}).items():
            tiles = ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "tuning")
            out.append(f"    config {kernel}: {cfg.get('tuning')}: {tiles}")
        extra = [f"{k} {bench[k]:.3g}" for k in ("tflops", "gbps", "copy_fraction") if bench.get(k)]
        if extra:
            out.append("    " + ", ".join(extra) + " (device time)")
    return "\n".join(out)


def main(argv=None) -> int:
    from attnsuite.records import merge_latest, read_records

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run directories or .jsonl files")
    args = ap.parse_args(argv)
    text = render(merge_latest(read_records(args.runs)))
    print(text or "no benchmark records")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
