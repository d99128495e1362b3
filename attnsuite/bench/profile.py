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
import importlib
import json
from collections import defaultdict

import torch

from ..devices import open_device
from .run import prepare
from .host_time import host_time
from .timing import device_time, l2_flusher

FAMILIES = ("prefill", "prefill_varlen", "decode", "paged_decode", "sparse_decode",
            "sparse_paged_decode", "magicpig_decode", "block_sparse", "mustafar")


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


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", default=list(FAMILIES))
    ap.add_argument("--tag", default="bench", help="cases with this tag (default: bench)")
    ap.add_argument("--match", default="", help="only case ids containing this text")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    device = open_device("cuda", None)
    out = []
    for name in args.families:
        family = importlib.import_module(f"cases.{name}").FAMILY
        impl = next(iter(family.impls.values()))
        for case in family.cases:
            if args.tag not in case.tags or args.match not in case.id:
                continue
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


if __name__ == "__main__":
    main()
