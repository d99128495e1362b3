"""Mustafar keys / values kernels against dense fp16 torch on the speed target's shape
(docs/benchmarks.md): B1 Hq32 Hkv8 S_c 32768 D128, 70% sparse, 2-bit and fp16 packing.

One GPU command (from the repository root, on a CUDA machine):

    python scripts/mustafar_bench.py                 # both packings, keys and values
    python scripts/mustafar_bench.py --bits 2 --json out.json

Per call it reports device time (CUDA-graph replay of the launches alone, L2 flushed by
``triton.testing.do_bench_cudagraph`` where it can, else ``do_bench``), the compressed bytes the
kernel reads and the bandwidth that implies, the dense baseline's time (``q @ K^T`` /
``p @ V`` in fp16 on the unpruned cache) and the speedup (dense / kernel; the targets are >= 3 for
keys and >= 2 for values at 2 bits). Then a profiler table of device time per CUDA kernel, so the
values' split launch (chunk partials + merge) shows apart, and the wrapper's latency per call
(validation included, as a user sees it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRY = "--dry" in sys.argv  # a CPU smoke test of this script: interpreter, tiny shape, no timing
if DRY:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402

import kernels.settings as ks  # noqa: E402
from kernels import mustafar as M  # noqa: E402
from kernels._checks import run_plan  # noqa: E402
from kernels.mustafar_format import compress, decompress  # noqa: E402


def sync() -> None:
    if not DRY:
        torch.cuda.synchronize()


def device_ms(fn) -> float:
    if DRY:
        fn()
        return 1.0
    fn()
    torch.cuda.synchronize()
    try:
        return float(triton.testing.do_bench_cudagraph(fn, rep=200))
    except Exception:  # noqa: BLE001 - not capturable: event timing with an L2 flush
        return float(triton.testing.do_bench(fn, warmup=50, rep=300))


def wall_us(fn, n=200) -> float:
    import time
    if DRY:
        n = 1
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - t0) / n * 1e6


def kernel_table(fn, n=20) -> list:
    """(name, device us per call) of every CUDA kernel ``fn`` launches, by the profiler."""
    if DRY:
        return []
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t:
            rows.append((e.key[:60], t / n))
    return sorted(rows, key=lambda r: -r[1])


def measure(op, bits, path, plan, c, dense_ms, dense_bytes, q, p, kc, vc, scores, out, check) -> dict:
    """Time one plan (and with the other warp count), print a line and its kernels."""
    ms = device_ms(lambda: run_plan(plan))
    alt = {}
    for warps in (4, 8):  # the shipped count and the other one: a tuning hint
        base = plan.meta.get("num_warps")
        if warps != base:
            plan.meta["num_warps"] = warps
            alt[warps] = round(device_ms(lambda: run_plan(plan)) * 1e3, 2)
            plan.meta["num_warps"] = base
    call = ((lambda: M.mustafar_keys(q, kc, out=scores)) if op == "keys"
            else (lambda: M.mustafar_values(p, vc, out=out)))
    nbytes = c.nbytes()
    row = dict(op=op, bits=bits, path=path, kernel=getattr(plan.kernel, "__name__", str(plan.kernel)),
               device_us=ms * 1e3, dense_us=dense_ms * 1e3, speedup=dense_ms / ms,
               compressed_mb=nbytes / 1e6, ratio=nbytes / dense_bytes, gbps=nbytes / (ms * 1e-3) / 1e9,
               grid=list(plan.grid), meta=dict(plan.meta), other_warps_us=alt,
               kernels=kernel_table(lambda: run_plan(plan)), wrapper_us=wall_us(call))
    if check:
        B, Hq = q.shape[0], q.shape[1]
        Hkv, S, D = kc.shape[1], kc.shape[2], kc.shape[3]
        run_plan(plan)
        if op == "keys":
            ref = q.float().view(B, Hkv, Hq // Hkv, D) @ decompress(kc).float().transpose(-1, -2)
            row["max_abs_err"] = float((scores - ref.reshape(B, Hq, S)).abs().max())
        else:
            ref = p.float().view(B, Hkv, Hq // Hkv, S) @ decompress(vc).float()
            row["max_abs_err"] = float((out - ref.reshape(B, Hq, D)).abs().max())
    print(f"{op:6s} {bits:2d}-bit {path:8s}: {row['device_us']:8.1f} us device  "
          f"{row['speedup']:5.2f}x dense  {row['compressed_mb']:6.1f} MB ({row['ratio']:.0%} of dense)"
          f" -> {row['gbps']:6.0f} GB/s  wrapper {row['wrapper_us']:8.1f} us/call  grid {row['grid']}"
          f"  warps {plan.meta.get('num_warps')} (other: {alt})"
          + (f"  max|err| {row['max_abs_err']:.2e}" if "max_abs_err" in row else ""))
    for name, us in row["kernels"]:
        print(f"        {us:8.1f} us  {name}")
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, nargs="*", default=[2, 16])
    ap.add_argument("--sparsity", type=float, default=0.7)
    ap.add_argument("--shape", default="1,32,8,32768,128", help="B,Hq,Hkv,S_c,D")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--check", action="store_true", help="compare with a dense decode of the buffers")
    ap.add_argument("--dry", action="store_true", help="CPU smoke test (interpreter, tiny shape)")
    ap.add_argument("--paths", choices=("both", "fast", "portable"), default="both",
                    help="kernel paths to time (fast: the CUDA path, portable: Ascend's)")
    args = ap.parse_args(argv)
    if args.dry:
        args.shape = "1,4,2,256,128"
    B, Hq, Hkv, S, D = (int(x) for x in args.shape.split(","))
    G = Hq // Hkv
    dev = torch.device("cpu" if args.dry else "cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    k = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.float16, generator=gen)
    v = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.float16, generator=gen)
    q = torch.randn(B, Hq, D, device=dev, dtype=torch.float16, generator=gen)
    p = torch.softmax(torch.randn(B, Hq, S, device=dev, generator=gen), -1).to(torch.float16)
    qg, kt = q.view(B, Hkv, G, D), k.transpose(-1, -2)
    pg = p.view(B, Hkv, G, S)
    dense = {"keys": device_ms(lambda: qg @ kt), "values": device_ms(lambda: pg @ v)}
    print(f"{'dry run' if args.dry else torch.cuda.get_device_name()}  triton {triton.__version__}  torch {torch.__version__}")
    print(f"shape B{B} Hq{Hq} Hkv{Hkv} S{S} D{D}, sparsity {args.sparsity}; dense fp16: "
          f"q @ K^T {dense['keys'] * 1e3:.1f} us, p @ V {dense['values'] * 1e3:.1f} us "
          f"({k.numel() * 2 / 1e6:.1f} MB each)")
    results = []
    paths = ["fast", "portable"] if args.paths == "both" else [args.paths]
    for bits in args.bits:
        kc = compress(k, args.sparsity, kind="key", bits=bits)
        vc = compress(v, args.sparsity, kind="value", bits=bits)
        scores = torch.empty(B, Hq, S, device=dev, dtype=torch.float32)
        out = torch.empty(B, Hq, D, device=dev, dtype=torch.float32)
        for path in paths:
            with ks.using(kernel_path=path):
                plans = {"keys": M.mustafar_keys_plan(q, kc, scores),
                         "values": M.mustafar_values_plan(p, vc, out)}
                for op, c in (("keys", kc), ("values", vc)):
                    results.append(measure(op, bits, path, plans[op], c, dense[op], k.numel() * 2,
                                           q, p, kc, vc, scores, out, args.check))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(dense_us={k2: v2 * 1e3 for k2, v2 in dense.items()}, results=results), fh, indent=1)


if __name__ == "__main__":
    main()
