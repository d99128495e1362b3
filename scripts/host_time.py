"""Host time and device time per call of every kernel wrapper and of SDPA, on one GPU:

    python scripts/host_time.py [FAMILY ...] [--runs N] [--json PATH]
    python scripts/host_time.py --cpu-stub [FAMILY ...]      # no GPU: the wrappers' own cost

GPU mode, per family's bench cases (the calls the benchmarks time, ``check_indices=False``):
* ``host_us``: wall time of one Python call with the device idle before it (the host, not the
  kernel), median over ``--runs``; for the kernel also with the JIT dispatch path
  (``settings.direct_launch=False``) and with the data checks on (``check_indices=True``);
* ``dev_ms``: device time by graph replay, cold L2 (``attnsuite.bench.timing.device_time``),
  or the profiler when the call cannot be captured (the method is printed);
* SDPA on the case's dense equivalent, called plainly (torch picks the backend) and inside
  ``sdpa_kernel(CUDNN)`` / ``sdpa_kernel(FLASH)``.
It ends with the host-time targets: every wrapper's host time <= 60 us; decode's <= 1.25x
SDPA's (plain call). Families default to every registered one; one without the project's own
kernel (``triton``) or without bench cases is skipped, saying so.

``--cpu-stub`` runs the wrappers under the Triton interpreter with every launch stubbed out:
validation, planning and the lean path's lookups, no kernel, no JIT dispatch. It shows the
first (full) call and a repeat call apart.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOST_LIMIT_US = 60.0
DECODE_VS_SDPA = 1.25


def families_to_time(names):
    """(family, its ``triton`` implementation) for each name (default: every registered family),
    the ones with nothing to time left out with the reason printed."""
    from attnsuite import registry

    out = []
    for name in names or registry.names():
        family = registry.family(name)
        impl = family.impls.get("triton")
        if impl is None or not bench_cases(family, 1):
            print(f"{name}: skipped, " + ("no project kernel (impls['triton'])" if impl is None else "no bench cases"))
            continue
        out.append((family, impl))
    return out


def bench_cases(family, limit: int):
    """Up to ``limit`` bench cases of different shapes: one dtype (fp16 where there is one),
    so decode gives both its bench shapes rather than one shape twice."""
    cases = [c for c in family.cases if "bench" in c.tags]
    dtypes = {c.params.get("dtype") for c in cases}
    keep = "fp16" if "fp16" in dtypes else next(iter(sorted(d for d in dtypes if d)), None)
    return [c for c in cases if c.params.get("dtype") in (keep, None)][:limit]


def sdpa_calls(problem):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = problem["q"], problem["k"], problem["v"]
    causal = problem.get("causal", False) and q.shape[2] > 1
    gqa = k.shape[1] != q.shape[1]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def plain():
        return sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)

    def pinned(backend):
        def call():
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=causal, enable_gqa=gqa)
        return call

    return {"sdpa": plain, "sdpa[cudnn]": pinned(SDPBackend.CUDNN_ATTENTION),
            "sdpa[flash]": pinned(SDPBackend.FLASH_ATTENTION)}


def gpu(families, runs: int, cases_per_family: int) -> list[dict]:
    import torch

    import kernels.settings as ks
    from attnsuite.bench.host_time import host_time
    from attnsuite.bench.run import prepare
    from attnsuite.bench.timing import device_time
    from attnsuite.devices import open_device

    device = open_device("cuda", None)
    rows = []
    for family, impl in families:
        name = family.name
        for case in bench_cases(family, cases_per_family):
            inputs, outputs, call = prepare(family, case, device, impl)
            calls = {"kernel": call}
            checked = lambda: family.call(impl, case, inputs, outputs)  # noqa: E731
            problem = family.vendor_problem(case, inputs)
            if problem and problem.get("q") is not None:
                calls.update(sdpa_calls(problem))
            row = {"case": f"{name}[{case.id}]"}
            for label, fn in calls.items():
                try:
                    fn()
                    device.synchronize()
                    host = host_time(fn, sync=device.synchronize, runs=runs)["median"]
                    dev = device_time(device, fn, runs=20)
                    row[label] = {"host_us": host, "dev_ms": dev.timing.median_ms, "method": dev.method}
                except Exception as exc:  # noqa: BLE001 - a baseline that cannot run here
                    row[label] = {"error": f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:100]}"}
            if "error" in row["kernel"]:
                rows.append(row)
                print_row(row)
                continue
            with ks.using(direct_launch=False):
                call()
                row["kernel"]["host_us_jit"] = host_time(call, sync=device.synchronize, runs=runs)["median"]
            try:
                checked()
                row["kernel"]["host_us_checked"] = host_time(checked, sync=device.synchronize,
                                                             runs=max(10, runs // 4))["median"]
            except Exception as exc:  # noqa: BLE001
                row["kernel"]["host_us_checked"] = f"{type(exc).__name__}"
            rows.append(row)
            print_row(row)
            del inputs, outputs
            torch.cuda.empty_cache()
    return rows


def print_row(row: dict) -> None:
    k = row["kernel"]
    print(f"{row['case'][:78]}")
    if "error" in k:
        print(f"    kernel       {k['error']}")
        return
    print(f"    kernel       host {k['host_us']:7.1f} us (jit path {k.get('host_us_jit', float('nan')):7.1f}, "
          f"checked {k.get('host_us_checked')})  device {k['dev_ms'] * 1e3:8.1f} us [{k['method']}]")
    for label in ("sdpa", "sdpa[cudnn]", "sdpa[flash]"):
        r = row.get(label)
        if r is None:
            continue
        if "error" in r:
            print(f"    {label:12} {r['error']}")
        else:
            print(f"    {label:12} host {r['host_us']:7.1f} us  device {r['dev_ms'] * 1e3:8.1f} us [{r['method']}]")


def verdict(rows: list[dict]) -> int:
    bad = 0
    print("\ntargets: host <= 60 us per wrapper; decode host <= 1.25x SDPA (plain call)")
    for row in rows:
        if "error" in row["kernel"]:
            bad += 1
            print(f"  MISS {row['case'][:70]:70} {row['kernel']['error']}")
            continue
        host = row["kernel"]["host_us"]
        ok = host <= HOST_LIMIT_US
        line = f"  {'ok  ' if ok else 'MISS'} {row['case'][:70]:70} host {host:6.1f} us"
        if row["case"].startswith("decode[") and "host_us" in row.get("sdpa", {}):
            ratio = host / row["sdpa"]["host_us"]
            ok = ok and ratio <= DECODE_VS_SDPA
            line += f"  {ratio:4.2f}x SDPA's host"
            line = ("  ok  " if ok else "  MISS") + line[6:]
        bad += not ok
        print(line)
    return bad


def cpu_stub(families, runs: int, cases_per_family: int) -> None:
    """Wrapper cost without kernels: interpreter mode (CPU tensors pass validation), every
    launch a no-op."""
    os.environ["TRITON_INTERPRET"] = "1"
    import gc
    import statistics
    import time

    import torch

    import kernels._checks as checks
    import kernels.settings as ks
    from attnsuite.bench.run import unchecked

    from kernels._launcher import Launch

    Launch.fire = lambda self, values: None
    checks.run_plan = lambda plan: [None for _ in plan.chain()]

    with ks.using(kernel_path="fast"):
        for family, impl in families:
            name, impl = family.name, unchecked(impl)
            for case in bench_cases(family, cases_per_family):
                inputs = family.make_inputs(case, case.generator())
                outputs = {n: torch.empty(s, dtype=d) for n, (s, d) in family.output_specs(case, inputs).items()}
                call = lambda: family.call(impl, case, inputs, outputs)  # noqa: E731
                t0 = time.perf_counter()
                call()
                first = (time.perf_counter() - t0) * 1e6
                for _ in range(5):
                    call()
                # The catalogs are many small objects: a full collection over them would land
                # inside a timed call, so they are kept out of the collector's reach meanwhile.
                gc.collect()
                gc.freeze()
                ts = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    call()
                    ts.append((time.perf_counter() - t0) * 1e6)
                gc.unfreeze()
                print(f"{name:20} {case.id[:58]:58} first {first:9.1f} us  repeat {statistics.median(ts):7.1f} us")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*", help="default: every registered family")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--cases", type=int, default=2, help="bench cases per family (default 2)")
    ap.add_argument("--json", help="write the GPU rows here")
    ap.add_argument("--cpu-stub", action="store_true", help="no GPU: wrapper cost with launches stubbed")
    args = ap.parse_args(argv)
    if args.cpu_stub:
        cpu_stub(families_to_time(args.families), args.runs, args.cases)
        return 0
    rows = gpu(families_to_time(args.families), args.runs, args.cases)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if verdict(rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
