"""Host time per call of each kernel wrapper, by family, on the bench cases:

    python scripts/host_overhead.py [FAMILY ...] [--device cpu|cuda] [--runs N] [--cases N]
                                    [--checked] [--profile CASE_SUBSTRING]

* ``--device cpu`` (default; no GPU needed): the wrappers' own Python cost. Kernels run under
  the Triton interpreter's rules (CPU tensors pass validation) with every launch replaced by a
  no-op, so what is timed is validation, the call cache, planning, allocations and the small
  torch ops the wrapper issues. The wrappers plan CUDA's kernels (``kernel_path="fast"``, as
  on a GPU; ``--portable`` for the portable ones). CUDA-only costs (the launch itself, a
  device sync, a torch op's launch) are not in it: count the wrapper's torch ops and syncs.
* ``--device cuda``: the real call, launch included; the device queue is drained before each
  timed call (``attnsuite.bench.host_time``), so a sync inside the wrapper shows as its cost.

The call is the one the benchmarks time (``check_indices=False`` where a wrapper has it;
``--checked`` times the default, data-checked call instead). Per case: the first call and the
median of ``--runs`` repeat calls in microseconds; per family: the median and the largest
repeat figure, against the 60 us target. ``--profile`` runs cProfile over the repeat calls of
the first case whose id contains the substring and prints the top entries.
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOST_LIMIT_US = 60.0


def bench_cases(family, limit: int):
    """Bench cases of one dtype (fp16 where there is one), up to ``limit`` (0: all)."""
    cases = [c for c in family.cases if "bench" in c.tags]
    dtypes = {c.params.get("dtype") for c in cases}
    keep = "fp16" if "fp16" in dtypes else next(iter(sorted(d for d in dtypes if d)), None)
    cases = [c for c in cases if c.params.get("dtype") in (keep, None)]
    return cases[:limit] if limit else cases


def stub_launches() -> None:
    """Every launch a no-op that returns one ``None`` per kernel of the chain (what a launch
    capture returns), so the call cache still binds and repeat calls take the lean path."""
    import kernels._checks as checks
    from kernels._launcher import Launch

    Launch.fire = lambda self, values: None
    checks.run_plan = lambda plan: [None for _ in plan.chain()]


def timed(fn, runs: int, sync) -> tuple[float, float]:
    """(first call, median of ``runs`` repeat calls), microseconds. The objects alive before
    are frozen out of the garbage collector's reach: the case catalogs hold millions, and a
    full collection over them (tens of milliseconds) would land inside some timed call."""
    gc.collect()
    gc.freeze()
    sync()
    t0 = time.perf_counter()
    fn()
    first = (time.perf_counter() - t0) * 1e6
    for _ in range(3):
        fn()
    samples = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    sync()
    gc.unfreeze()
    return first, statistics.median(samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", help="default: every registered family with bench cases")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--cases", type=int, default=0, help="bench cases per family (default: all)")
    ap.add_argument("--checked", action="store_true", help="time the data-checked call")
    ap.add_argument("--profile", metavar="CASE", help="cProfile the repeat calls of this case")
    ap.add_argument("--portable", action="store_true", help="cpu: plan the portable kernels")
    args = ap.parse_args(argv)

    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from attnsuite import registry
    from attnsuite.bench.run import unchecked

    if args.device == "cpu":
        import kernels.settings as ks

        stub_launches()
        ks.configure(kernel_path="auto" if args.portable else "fast")
        device, sync = torch.device("cpu"), (lambda: None)
    else:
        from attnsuite.bench.run import inputs_on
        from attnsuite.devices import open_device

        dev = open_device("cuda", None)
        device, sync = dev.torch_device, dev.synchronize

    worst = 0.0
    summary = []
    for name in args.families or registry.names():
        family = registry.family(name)
        impl = family.impls.get("triton")
        cases = bench_cases(family, args.cases) if impl is not None else []
        if not cases:
            continue
        call_impl = impl if args.checked else unchecked(impl)
        repeats = []
        for case in cases:
            if args.device == "cpu":
                inputs = family.make_inputs(case, case.generator())
            else:
                inputs = inputs_on(family, case, dev)
            outputs = {n: torch.empty(s, dtype=d, device=device)
                       for n, (s, d) in family.output_specs(case, inputs).items()}

            def call():
                return family.call(call_impl, case, inputs, outputs)

            first, repeat = timed(call, args.runs, sync)
            repeats.append(repeat)
            print(f"{name:20} {case.id[len(name) + 1:-1][:60]:60} first {first:9.1f}  repeat {repeat:7.1f} us",
                  flush=True)
            if args.profile and args.profile in case.id:
                import cProfile
                import pstats

                prof = cProfile.Profile()
                prof.enable()
                for _ in range(args.runs):
                    call()
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(25)
                pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
            del inputs, outputs
        med, top = statistics.median(repeats), max(repeats)
        worst = max(worst, top)
        summary.append((name, len(repeats), med, top))

    print(f"\nper family, repeat calls ({args.device}{', launches stubbed' if args.device == 'cpu' else ''}, "
          f"{'checked' if args.checked else 'check_indices=False'}):")
    for name, n, med, top in summary:
        flag = "ok  " if top <= HOST_LIMIT_US else "OVER"
        print(f"  {flag} {name:22} {n:3} cases  median {med:7.1f} us  max {top:7.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
