"""Tile sweep of the dense-core CUDA fast path (kernels/attn_fast.py) against cuDNN, on a GPU.

    python scripts/dense_core_sweep.py [--quick] [--only NAME,...]

For each dense-core headline shape (prefill, block-sparse) it times, in one process: SDPA pinned to cuDNN, the suite's
current wrapper, and the fast kernels over a list of (BLOCK_M, BLOCK_N, warps, stages) x
(descriptor loads or pointer loads). Device time: ``triton.testing.do_bench`` medians (events,
L2 flushed before each call). Each variant's output is checked against cuDNN's first.
Writes a JSON table to $OUT/dense_core_sweep.json when OUT is set.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernels import attn_fast  # noqa: E402
from kernels.block_sparse import block_counts, block_sparse  # noqa: E402
from kernels.prefill import prefill  # noqa: E402
from attnsuite.sparsity import block_index  # noqa: E402

LOG2E = 1.4426950408889634
TMA_CHOICES = (True, False)


def _alloc(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=120, return_mode="median") * 1e3  # us


def cudnn(q, k, v, causal):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


def prefill_fast(q, k, v, o, causal, cfg, tma):
    B, Hq, S, D = q.shape
    bm, bn, w, st = cfg[:4]
    grid = (triton.cdiv(S, bm), B * Hq)
    scale = 1 / math.sqrt(D)
    return lambda: attn_fast._prefill_fast[grid](
        q, k, v, o, o, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], 0, 0,
        Hq, S, D, Hq // k.shape[1], scale * LOG2E,
        CAUSAL=causal, RETURN_LSE=False, DOT_PRECISION="ieee", BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_D=max(16, triton.next_power_of_2(D)), USE_TMA=tma, NEG_SCALE=False, EVEN_D=D == max(16, triton.next_power_of_2(D)),
        num_warps=w, num_stages=st)


def bs_fast(q, k, v, sabi, counts, o, shape, cfg, tma):
    B, H, S, D = q.shape
    bm, bn, w, st = cfg[:4]
    bm, bn = min(bm, shape[0]), min(bn, shape[1])
    grid = (triton.cdiv(S, bm), B * H)
    scale = 1 / math.sqrt(D)
    return lambda: attn_fast._block_sparse_fast[grid](
        q, k, v, o, o, sabi, counts, *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *o.stride()[:3], 0, 0, *sabi.stride(), H, S, D, shape[0], shape[1], sabi.shape[2],
        scale * LOG2E, RETURN_LSE=False, DOT_PRECISION="ieee", BLOCK_M=bm, BLOCK_N=bn,
        BLOCK_D=max(16, triton.next_power_of_2(D)), USE_TMA=tma, NEG_SCALE=False, EVEN_D=D == max(16, triton.next_power_of_2(D)),
        num_warps=w, num_stages=st)


def dense_ref_from_sabi(q, k, v, sabi, shape):
    """cuDNN with a boolean block mask (only for checking; S small enough)."""
    B, H, S, D = q.shape
    n_cols = triton.cdiv(S, shape[1])
    keep = torch.zeros(B, H, sabi.shape[2], n_cols + 1, dtype=torch.bool, device=q.device)
    keep.scatter_(-1, sabi.long().clamp(max=n_cols), True)  # padding lands in the extra column
    mask = keep[..., :n_cols].repeat_interleave(shape[0], 2).repeat_interleave(shape[1], 3)[:, :, :S, :S]
    return torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)


def run_shape(name, q, k, v, causal, configs, rows, sabi=None, shape=None):
    o = torch.empty_like(q)
    flops = 4 * q.shape[0] * q.shape[1] * q.shape[2] * q.shape[2] * q.shape[3] * (0.5 if causal else 1.0)
    ref = None
    if sabi is None:
        ref = cudnn(q, k, v, causal)
        t_ref = bench(lambda: cudnn(q, k, v, causal))
        cur = lambda: prefill(q, k, v, causal=causal, out=o)
    else:
        n_listed = (sabi != 65535).sum().item()
        flops = 4 * q.shape[3] * n_listed * shape[0] * shape[1]
        dense_flops = 4 * q.shape[0] * q.shape[1] * q.shape[2] ** 2 * q.shape[3]
        t_ref = bench(lambda: cudnn(q, k, v, False))
        if q.shape[2] <= 4096:
            ref = dense_ref_from_sabi(q, k, v, sabi, shape).to(q.dtype)
        elif n_listed == sabi.numel():
            ref = cudnn(q, k, v, False)
        cur = lambda: block_sparse(q, k, v, sabi, block_shape=shape, out=o, check_indices=False)
    t_cur = bench(cur)
    rows.append(dict(shape=name, variant="cudnn", us=t_ref, ratio=1.0))
    rows.append(dict(shape=name, variant="current", us=t_cur, ratio=t_cur / t_ref,
                     tflops=flops / t_cur / 1e6))
    print(f"{name}: cudnn {t_ref:.1f} us, current {t_cur:.1f} us ({t_cur / t_ref:.3f}x)", flush=True)
    counts = block_counts(sabi) if sabi is not None else None
    for tma in TMA_CHOICES:
        for cfg in configs:
            try:
                fn = (prefill_fast(q, k, v, o, causal, cfg, tma) if sabi is None
                      else bs_fast(q, k, v, sabi, counts, o, shape, cfg, tma))
                o.fill_(float("nan"))
                fn()
                torch.cuda.synchronize()
                err = float((o.float() - ref.float()).abs().max()) if ref is not None else float("nan")
                if o.isnan().any():
                    err = float("inf")
                t = bench(fn)
                row = dict(shape=name, variant=f"{'tma' if tma else 'ptr'} {cfg}", us=t,
                           ratio=t / t_ref, tflops=flops / t / 1e6, err=err)
            except Exception as e:  # noqa: BLE001 - a config that does not compile is a finding
                row = dict(shape=name, variant=f"{'tma' if tma else 'ptr'} {cfg}", error=str(e)[-300:])
            rows.append(row)
            print("   ", {k2: (round(v2, 4) if isinstance(v2, float) else v2) for k2, v2 in row.items()},
                  flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--big", default="", help="configs for the long shapes, e.g. '128,128,8,3;128,64,8,3'")
    ap.add_argument("--small", default="", help="configs for the prefill bench shape")
    ap.add_argument("--tma", default="1,0", help="load paths to try: 1 descriptors, 0 pointers")
    args = ap.parse_args()
    triton.set_allocator(_alloc)
    torch.manual_seed(0)
    dev = "cuda"
    rows = []
    only = set(args.only.split(",")) if args.only else None
    big = [(128, 128, 8, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 64, 4, 3), (128, 128, 4, 3),
           (64, 128, 4, 3), (128, 64, 8, 4), (256, 64, 8, 3)]
    small = [(64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 4),
             (128, 32, 4, 3), (64, 32, 4, 3), (128, 128, 8, 2)]
    if args.quick:
        big, small = big[:3], small[:3]

    def parse(text):
        return [tuple(int(x) if x.isdigit() else x for x in c.split(",")) for c in text.split(";")]

    if args.big:
        big = parse(args.big)
    if args.small:
        small = parse(args.small)
    global TMA_CHOICES
    TMA_CHOICES = tuple(bool(int(x)) for x in args.tma.split(","))

    def want(n):
        return only is None or n in only

    if want("prefill_bench"):
        q = torch.randn(8, 64, 1024, 64, device=dev, dtype=torch.float16)
        k = torch.randn(8, 16, 1024, 64, device=dev, dtype=torch.float16)
        v = torch.randn_like(k)
        run_shape("prefill_bench", q, k, v, True, small, rows)
    if want("prefill_16k"):
        q = torch.randn(1, 32, 16384, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, 8, 16384, 128, device=dev, dtype=torch.bfloat16)
        v = torch.randn_like(k)
        run_shape("prefill_16k", q, k, v, True, big, rows)
    if want("dense_32k"):
        q = torch.randn(1, 3, 32768, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn_like(q)
        v = torch.randn_like(q)
        run_shape("dense_32k", q, k, v, False, big, rows)
    for S, H, bshape, s in ((32768, 3, (128, 512), 0.0), (16384, 3, (128, 128), 0.0),
                            (16384, 3, (1024, 1024), 0.0), (16384, 3, (128, 512), 0.5),
                            (4096, 16, (128, 512), 0.5)):
        name = f"bs_S{S}_H{H}_{bshape[0]}x{bshape[1]}_s{s}"
        if not want(name) and not want("bs"):
            continue
        q = torch.randn(1, H, S, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn_like(q)
        v = torch.randn_like(q)
        nr, nc = triton.cdiv(S, bshape[0]), triton.cdiv(S, bshape[1])
        g = torch.Generator().manual_seed(1)
        sabi = block_index(nr, nc, s, generator=g, batch_heads=(1, H)).to(dev)
        run_shape(name, q, k, v, False, big, rows, sabi=sabi, shape=bshape)
    print("\nshape | variant | us | x cudnn | TFLOP/s | err")
    for r in rows:
        if "error" in r:
            print(f"{r['shape']} | {r['variant']} | ERROR {r['error'][-120:]}")
        else:
            print(f"{r['shape']} | {r['variant']} | {r['us']:.1f} | {r['ratio']:.3f} | "
                  f"{r.get('tflops', float('nan')):.0f} | {r.get('err', float('nan')):.2e}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "dense_core_sweep.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
