"""Tune every benchmark shape on this GPU and write the shipped tile table
(kernels/tuned/<GPU>.json) that a fresh machine uses without flags.

    python scripts/tune_table.py [FAMILY ...] [--sweeps] [--out DIR] [--dry-run] [--jobs N]

For each family's bench cases (``--sweeps``: also the full profile's sweeps), the kernel call
the benchmarks time is made once inside ``kernels.tuning.retuning()``: every shape it plans is
tuned afresh (the shipped table and the user's cache are ignored, the cache is not written).
The results are checked (every config one of its kernel's candidates), merged into the table
file and printed, each choice against the default candidate. Review the diff, then commit it.

``--jobs N`` first compiles every candidate of every family in N processes at once (their
timings, taken side by side on one GPU, are thrown away; what stays is Triton's on-disk cache),
then times them in this process alone, where each compile is a cache hit: minutes of serial
compiling become one family's worth.
"""
from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", help="default: every registered family")
    ap.add_argument("--sweeps", action="store_true", help="also the full profile's sweep cases")
    ap.add_argument("--out", default=None, help="table directory (default kernels/tuned)")
    ap.add_argument("--dry-run", action="store_true", help="tune and print, write nothing")
    ap.add_argument("--jobs", type=int, default=1, help="compile in N processes first (default 1)")
    ap.add_argument("--quiet", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from attnsuite import registry

    args.families = args.families or list(registry.names())
    if args.jobs > 1:
        precompile(args.families, args.sweeps, args.jobs)

    import torch
    import triton

    from attnsuite.bench.run import prepare
    from attnsuite.devices import open_device
    from kernels import tuning

    device = open_device("cuda", None)
    name = torch.cuda.get_device_name(device.index)
    tags = {"bench", "sweep"} if args.sweeps else {"bench"}
    with tuning.retuning() as found_all:  # one context: a key shared by several cases is tuned once
        for family_name in args.families:
            family = registry.family(family_name)
            impl = family.impls.get("triton")
            if impl is None:  # another project's kernels only: nothing of ours to tune
                print(f"{family_name}: skipped, no project kernel (impls['triton'])")
                continue
            for case in family.cases:
                if not tags & set(case.tags):
                    continue
                before = sum(len(e) for e in found_all.values())
                try:
                    _, _, call = prepare(family, case, device, impl)
                    call()
                    device.synchronize()
                except Exception as exc:  # noqa: BLE001 - one case must not stop the table
                    print(f"{family_name}[{case.id}]: {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}")
                    continue
                if not args.quiet:
                    print(f"{case.id}: {sum(len(e) for e in found_all.values()) - before} new shape(s) tuned")
                torch.cuda.empty_cache()
        found_all = {k: dict(v) for k, v in found_all.items()}
    if args.quiet:
        return 0

    print(f"\n{name}: chosen vs default (first candidate)")
    for kernel, entries in sorted(found_all.items()):
        for key, entry in sorted(entries.items()):
            times = entry.get("candidates_ms") or []
            default_ms = times[0][0] if times else None
            best_ms = min((t for t, _ in times if t is not None), default=None)
            gain = f"{default_ms / best_ms:5.2f}x" if default_ms and best_ms else "  n/a"
            print(f"  {kernel:22} {key:42} {gain}  {entry['config']}")
    if args.dry_run:
        return 0
    made_with = {"triton": triton.__version__, "torch": torch.__version__,
                 "command": "python scripts/tune_table.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "date": dt.date.today().isoformat()}
    out = Path(args.out) if args.out else tuning.TABLE_DIR
    path = tuning.write_table(name, found_all, made_with, out)
    print(f"\nwrote {path}")
    return 0


def precompile(families, sweeps: bool, jobs: int) -> None:
    """Run this script's tuning for each family in its own process, ``jobs`` at a time, writing
    nothing: it fills Triton's cache with every candidate's binary."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--dry-run", "--quiet"] + (["--sweeps"] if sweeps else [])
    pending, running = list(families), []
    while pending or running:
        while pending and len(running) < jobs:
            running.append(subprocess.Popen(cmd + [pending.pop(0)], cwd=ROOT))
        running[0].wait()
        running = [p for p in running if p.poll() is None]
    print(f"precompiled {len(families)} families in up to {jobs} processes")


if __name__ == "__main__":
    raise SystemExit(main())
