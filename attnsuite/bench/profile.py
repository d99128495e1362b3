"""Where a benchmark case's time goes: ``python -m attnsuite.bench.profile [FAMILY ...]``.

For each headline case (tag ``bench``, or ``--tag``) on a GPU it prints
* the event time of the whole eager call (L2 flushed before each call; the old benchmark method,
  which counts host time the device waits for);
* the device time as the benchmarks now take it (graph replay, or the profiler; method named);
* the device time of each kernel the call launches, from the torch profiler (flush excluded);
* the host time of one call (the device idle before it).
A call whose event time is far above its device time is bound by the host (launch overhead,
a device sync in validation), not by its kernels. This is the profiler evidence the closing
notes cite; it never asserts anything.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

import torch

from .. import registry
from ..devices import DeviceUnavailable, open_device
from .run import prepare
from .host_time import host_time
from .timing import device_time, l2_flusher


def _kernel_names(fn, runs: int) -> dict[str, float]:
    """Device microseconds per call of every kernel ``fn`` launches, by kernel name."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    per = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name] += ev.device_time / runs
    return dict(per)


def profile_call(device, fn, runs: int = 20) -> dict:
    """Event time, per-kernel device time (flush kernels removed) and host time of ``fn``."""
    flush = l2_flusher(device)
    fn()
    device.synchronize()
    event = device_time(device, fn, method="events", runs=runs, flush=flush).timing
    dev = device_time(device, fn, runs=runs, flush=flush)
    flush_only = _kernel_names(flush, runs)

    def flushed():
        flush()
        fn()

    kernels = {k: v for k, v in _kernel_names(flushed, runs).items() if k not in flush_only}
    host = host_time(fn, sync=device.synchronize, runs=runs)
    return {"event_ms": event.median_ms, "device_ms": dev.timing.median_ms, "method": dev.method,
            "kernels_us": kernels, "kernel_sum_ms": sum(kernels.values()) / 1e3,
            "host_ms": host["median"] * 1e-3}


def _cases(family, tag: str, match: str) -> tuple[list, str | None]:
    """The family's cases to profile, or why it has none (no implementation, no such case)."""
    if not family.impls:
        return [], "no implementation to profile"
    cases = [c for c in family.cases if tag in c.tags and match in c.id]
    if not cases:
        return [], f"no case tagged {tag!r}" + (f" matching {match!r}" if match else "")
    return cases, None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m attnsuite.bench.profile", description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", help="families to profile (default: every registered one)")
    ap.add_argument("--tag", default="bench", help="cases with this tag (default: bench)")
    ap.add_argument("--match", default="", help="only case ids containing this text")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    unknown = [name for name in args.families if name not in registry.names()]
    if unknown:
        ap.error(f"unknown family {unknown[0]!r}; registered: {', '.join(registry.names())}")
    # One line and no traceback without a GPU, as every GPU entry point of the suite stops.
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        print(f"{ap.prog}: needs a CUDA GPU; torch {torch.__version__} ({build}) sees none", file=sys.stderr)
        return 2
    try:
        device = open_device("cuda", None)
    except DeviceUnavailable as exc:
        print(f"{ap.prog}: {exc}", file=sys.stderr)
        return 2
    families = [registry.family(name) for name in args.families or registry.names()]
    out = []
    for family in families:
        cases, why = _cases(family, args.tag, args.match)
        if why:
            print(f"{family.name}: skipped, {why}")
            continue
        impl = next(iter(family.impls.values()))
        for case in cases:
            _, _, fn = prepare(family, case, device, impl)
            try:
                r = profile_call(device, fn, args.runs)
            except Exception as exc:  # noqa: BLE001 - one failing case must not end the survey
                print(f"{case.family}[{case.id}]: {type(exc).__name__}: {exc}")
                continue
            out.append({"case": f"{case.family}[{case.id}]", **r})
            top = sorted(r["kernels_us"].items(), key=lambda kv: -kv[1])[:4]
            print(f"{case.family}[{case.id}]  event {r['event_ms']:.4f} ms  device "
                  f"{r['device_ms']:.4f} ms ({r['method']})  kernels "
                  f"{r['kernel_sum_ms']:.4f} ms  host {r['host_ms']:.4f} ms")
            for k, us in top:
                print(f"    {us:9.1f} us  {k[:110]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
