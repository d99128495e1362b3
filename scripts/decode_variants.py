"""Tile and split variants of the decode-family kernels beside their baselines, in one process:
each variant is checked against a float64 reference and timed by CUDA-graph replay
with a cold L2 (``attnsuite.bench.graph_time``, the benchmarks' method), and one table is printed:

    shape | variant | us | ratio to the section's baseline | GB/s of K/V read | max abs error

Sections (in priority order; ``--only NAME`` runs some of them): ``dense`` (decode B1 Hq32 Hkv8
D128 S 1024-8192, vs SDPA cuDNN), ``sparse`` (sparse_decode kept 2%, vs SDPA cuDNN over a dense
cache of the kept tokens), ``sparse_paged`` (the sparse paged bench cache kept 2%, vs the same
kind of SDPA; MagicPIG vs our sparse paged decode), ``paged`` (S32000 pages of 16 and 256 vs our
contiguous decode), ``bench`` (decode's two bench shapes). A variant is a config handed straight
to the planner (``*_plan(config=...)``, ``num_splits``); ``wrapper`` rows are the public call as
it plans by itself (shipped table, defaults). Needs a CUDA GPU:

    python scripts/decode_variants.py [--only dense,sparse] [--runs 10] [--budget-s 220]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if "--dry-cpu" in sys.argv:  # before triton is imported: it reads this once
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from attnsuite.bench.graph_time import GraphBackend, graph_time  # noqa: E402
from kernels import settings  # noqa: E402
from kernels._checks import run_plan  # noqa: E402

T0 = time.time()
ROWS: list = []


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="dense,sparse,sparse_paged,paged,bench")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=220.0,
                    help="stop starting new variants after this many seconds")
    ap.add_argument("--dry-cpu", action="store_true",
                    help="smoke test without a GPU: tiny shapes in the Triton interpreter, two "
                         "variants a section, no timing (us = 1)")
    return ap.parse_args()


ARGS = parse()
DRY = ARGS.dry_cpu
if DRY:  # the CUDA fast paths, as on the GPU
    settings.configure(kernel_path="fast")
DEV = "cpu" if DRY else "cuda"


def size(n: int) -> int:
    """A length as given, or a 64th of it in the dry run."""
    return max(1, n // 64) if DRY else n


def few(variants: list) -> list:
    return variants[:2] if DRY else variants
BACKEND = GraphBackend(torch.cuda, "cuda")
FLUSH = None


def sync() -> None:
    if not DRY:
        torch.cuda.synchronize()


def dev_us(fn) -> float:
    """Median device microseconds of ``fn`` (cold L2) by graph replay."""
    global FLUSH
    if DRY:
        fn()
        return 1.0
    if FLUSH is None:
        FLUSH = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=DEV)
    fn()
    sync()
    t = graph_time(None, fn, flush=FLUSH.zero_, runs=ARGS.runs, backend=BACKEND)
    return t.timing.median_ms * 1e3


def over_budget() -> bool:
    return time.time() - T0 > ARGS.budget_s


def err(got, ref) -> float:
    return float((got.double() - ref.double()).abs().max())


def row(shape, variant, us, base_us, nbytes, e):
    ratio = us / base_us if base_us else float("nan")
    gbs = nbytes / (us * 1e-6) / 1e9 if us == us else float("nan")
    line = f"{shape:<34} {variant:<44} {us:8.1f} {ratio:6.2f} {gbs:7.0f} {e:9.2e}"
    ROWS.append(line)
    print(line, flush=True)


def measure(shape, variant, fn, check, base_us, nbytes):
    """Run ``fn`` once, check it (``check()`` -> max error), time it, print a row."""
    if over_budget():
        return None
    try:
        fn()
        sync()
        e = check()
        us = dev_us(fn)
    except Exception as exc:  # noqa: BLE001 - a variant that does not fit is reported, not fatal
        print(f"{shape:<34} {variant:<44} failed: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
        return None
    row(shape, variant, us, base_us, nbytes, e)
    return us


def cudnn(q4, k, v):
    """SDPA pinned to cuDNN (GQA via enable_gqa, as the benchmarks' baseline)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gqa = k.shape[1] != q4.shape[1]
    backend = SDPBackend.MATH if DRY else SDPBackend.CUDNN_ATTENTION

    def call():
        with sdpa_kernel(backend):  # host side only: the graph holds the bare kernel
            return torch.nn.functional.scaled_dot_product_attention(q4, k, v, enable_gqa=gqa)
    return call


# ----------------------------------------------------------------------------- dense decode

def dense_inputs(B, Hq, Hkv, S, D, dtype=torch.float16):
    g = torch.Generator(device=DEV).manual_seed(S)
    q = torch.randn(B, Hq, 1, D, dtype=dtype, device=DEV, generator=g)
    k = torch.randn(B, Hkv, S, D, dtype=dtype, device=DEV, generator=g)
    v = torch.randn(B, Hkv, S, D, dtype=dtype, device=DEV, generator=g)
    return q, k, v


def dense_section(B, Hq, Hkv, S, D, lse_on, variants):
    from kernels.decode import decode, decode_plan
    from references.attention import decode_reference

    q, k, v = dense_inputs(B, Hq, Hkv, S, D)
    shape = f"decode B{B} Hq{Hq} Hkv{Hkv} S{S} D{D}{' lse' if lse_on else ''}"
    ro, rl = decode_reference(q, k, v, compute_dtype=torch.float64)
    nbytes = 2 * k.numel() * k.element_size()
    base = measure(shape, "SDPA cuDNN (baseline)", cudnn(q, k, v), lambda: 0.0, None, nbytes)
    out = torch.empty_like(q)
    lse = torch.empty(B, Hq, 1, dtype=torch.float32, device=DEV) if lse_on else None

    def check():
        e = err(out, ro)
        return max(e, err(lse, rl)) if lse_on else e

    scale = 1.0 / math.sqrt(D)
    best = measure(shape, "wrapper (table/default)",
                   lambda: decode(q, k, v, return_lse=lse_on, out=out, lse=lse), check, base, nbytes)
    for bn, warps, stages, splits in variants:
        if S // splits < bn and splits > 1:
            continue
        cfg = dict(BLOCK_N=bn, num_warps=warps, num_stages=stages, TARGET=0)
        plan = decode_plan(q, k, v, out, lse, scale=scale, num_splits=splits, config=cfg)
        us = measure(shape, f"BN{bn} w{warps} s{stages} splits{splits} ({plan.grid[0] * plan.grid[1]} progs)",
                     lambda: run_plan(plan), check, base, nbytes)
        if us is not None and (best is None or us < best):
            best = us
    return base, best


TILES_SHORT = [(128, 4, 3), (64, 4, 3)]


def dense_short():
    results = {}
    for S in map(size, (1024, 2048, 4096, 8192)):
        variants = []
        for per in (512, 256, 128):  # keys per split
            splits = max(1, S // per)
            variants += [(bn, w, st, splits) for bn, w, st in TILES_SHORT]
        results[S] = dense_section(1, 32, 8, S, 128, False, few(variants))
    return results


def dense_bench():
    v32 = [(bn, w, st, sp) for sp in (16,) for bn, w, st in ((64, 4, 3), (128, 4, 3), (64, 4, 5))]
    dense_section(1, 32, 8, size(32000), 128, True, few(v32))
    v8 = [(128, 4, 3, 1), (128, 8, 3, 1)]
    dense_section(8, 64, 16, size(1024), 64, False, few(v8))


# ----------------------------------------------------------------------------- sparse decode

def keep_rows(B, Hq, n, keep, seed=0):
    """[B, Hq, L] distinct random positions < n per row (L = round(keep n)), int32, and nnz."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    count = max(1, round(keep * n))
    ind = torch.rand(B, Hq, n, device=DEV, generator=g).argsort(-1)[..., :count].to(torch.int32)
    nnz = torch.full((B, Hq), count, dtype=torch.int32, device=DEV)
    return ind.contiguous(), nnz


def sparse_section():
    from kernels.sparse_decode import sparse_decode, sparse_decode_plan
    from references.sparse import sparse_decode_reference

    for B, D in ((1, 128), (4, 256)):
        Hq, Hkv, S = 32, 8, size(32000)
        q, k, v = dense_inputs(B, Hq, Hkv, S, D)
        ind, nnz = keep_rows(B, Hq, S, 0.02)
        L = ind.shape[-1]
        shape = f"sparse_decode B{B} S{S} D{D} kept 2%"
        ro, _ = sparse_decode_reference(q, k, v, ind, nnz, compute_dtype=torch.float64)
        nbytes = 2 * B * Hq * L * D * 2
        kd = torch.randn(B, Hq, L, D, dtype=q.dtype, device=DEV)
        base = measure(shape, "SDPA cuDNN dense kept (baseline)", cudnn(q, kd, torch.randn_like(kd)),
                       lambda: 0.0, None, nbytes)
        out = torch.empty_like(q)
        check = lambda: err(out, ro)  # noqa: E731
        measure(shape, "wrapper (fast path)", lambda: sparse_decode(q, k, v, ind, nnz, out=out,
                                                                    check_indices=False),
                check, base, nbytes)
        with settings.using(kernel_path="portable"):
            plan = sparse_decode_plan(q, k, v, ind, nnz, out, None, scale=1 / math.sqrt(D))
        measure(shape, "portable kernel + merge launch (before)", lambda: run_plan(plan), check, base,
                nbytes)
        for bn, warps, stages, target in few([(64, 4, 2, 512), (32, 2, 2, 1024), (32, 2, 2, 512),
                                              (64, 4, 2, 256), (64, 2, 2, 512), (32, 4, 2, 512)]):
            cfg = dict(BLOCK_N=bn, num_warps=warps, num_stages=stages, TARGET=target)
            plan = sparse_decode_plan(q, k, v, ind, nnz, out, None, scale=1 / math.sqrt(D), config=cfg)
            splits = plan.grid[1]
            measure(shape, f"BN{bn} w{warps} s{stages} T{target} ({B * Hq * splits} progs)",
                    lambda: run_plan(plan), check, base, nbytes)


# ----------------------------------------------------------------------------- paged inputs

def paged_cache(lengths, P, Hkv, D, pool=None, dtype=torch.float16, seed=1):
    """HND cache with each sequence's pages scattered over a pool; (cache, indptr, indices, last)."""
    g = torch.Generator(device=DEV).manual_seed(seed)
    pages = [-(-n // P) for n in lengths]
    total = sum(pages)
    pool = max(pool or total, total)
    perm = torch.randperm(pool, device=DEV, generator=g)[:total].to(torch.int32)
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0)), dtype=torch.int32, device=DEV)
    last = torch.tensor([n - (p - 1) * P for n, p in zip(lengths, pages)], dtype=torch.int32, device=DEV)
    cache = torch.randn(pool, 2, Hkv, P, D, dtype=dtype, device=DEV, generator=g)
    return cache, indptr, perm.contiguous(), last


def sparse_paged_section():
    from kernels.magicpig_decode import magicpig_decode
    from kernels.sparse_paged_decode import sparse_kernel_plan, sparse_paged_decode
    from references.magicpig import magicpig_decode_reference
    from references.paged import sparse_paged_decode_reference

    lengths = tuple(map(size, (256 * 269 + 63, 256 * 349 + 22, 256 * 320 + 55)))
    B, Hq, Hkv, D, P = 3, 32, 8, 256, 256
    cache, indptr, indices, last = paged_cache(lengths, P, Hkv, D, pool=1024)
    g = torch.Generator(device=DEV).manual_seed(3)
    q = torch.randn(B, Hq, D, dtype=torch.float16, device=DEV, generator=g)
    rows = [keep_rows(1, Hq, n, 0.02, seed=10 + b) for b, n in enumerate(lengths)]
    L = max(r[0].shape[-1] for r in rows)
    ind = torch.full((B, Hq, L), -1, dtype=torch.int32, device=DEV)
    nnz = torch.zeros(B, Hq, dtype=torch.int32, device=DEV)
    for b, (i, n) in enumerate(rows):
        ind[b, :, :i.shape[-1]] = i[0]
        nnz[b] = n[0]
    shape = "sparse_paged bench kept 2%"
    nbytes = int(nnz.sum()) * D * 2 * 2
    ro, _ = sparse_paged_decode_reference(q, cache, indptr, indices, ind, nnz, layout="HND")
    kd = torch.randn(B, Hq, L, D, dtype=q.dtype, device=DEV)
    base = measure(shape, "SDPA cuDNN dense kept (baseline)", cudnn(q[:, :, None], kd, torch.randn_like(kd)),
                   lambda: 0.0, None, nbytes)
    out = torch.empty_like(q)
    check = lambda: err(out, ro)  # noqa: E731
    args = (q, cache, indptr, indices, ind, nnz)
    ours = measure(shape, "wrapper (table/default)",
                   lambda: sparse_paged_decode(*args, kv_last_page_len=last, out=out, check_indices=False),
                   check, base, nbytes)
    # (BLOCK_N, warps, stages, target programs, least slots a split, -)
    variants = [(16, 2, 2, 8192, 32, False), (16, 1, 2, 8192, 32, False), (16, 1, 2, 16384, 16, False),
                (16, 2, 2, 16384, 16, False), (8, 1, 2, 16384, 16, False), (32, 1, 2, 8192, 32, False),
                (16, 2, 1, 8192, 32, False), (16, 4, 2, 8192, 32, False), (32, 2, 2, 4096, 64, False),
                (16, 1, 1, 16384, 16, False), (8, 1, 2, 32768, 8, False), (16, 2, 2, 4096, 64, False)]
    for bn, warps, stages, target, least, _ in few(variants):
        cfg = dict(BLOCK_N=bn, BLOCK_D=256, num_warps=warps, num_stages=stages, TARGET=target,
                   MIN_SPLIT=least)
        plan = sparse_kernel_plan(*args, out, None, layout="HND", scale=1 / math.sqrt(D), config=cfg,
                                  interpret=False)
        us = measure(shape, f"BN{bn} w{warps} s{stages} T{target} min{least}"
                     f" ({plan.grid[0] * plan.grid[1]} progs)", lambda: run_plan(plan), check, base, nbytes)
        if us is not None and ours is not None:
            ours = min(ours, us)

    K = torch.full((B, Hq), 10.0, device=DEV)
    Lh = torch.full((B, Hq), 150.0, device=DEV)
    mo, _ = magicpig_decode_reference(q, cache, indptr, indices, ind, nnz, K, Lh, layout="HND")
    mshape = "magicpig bench 2% (vs sp best)"
    mcheck = lambda: err(out, mo)  # noqa: E731
    measure(mshape, "wrapper (table/default)",
            lambda: magicpig_decode(*args, K, Lh, kv_last_page_len=last, out=out, check_indices=False),
            mcheck, ours, nbytes)
    for bn, warps, stages, target, least, _ in few([
            (32, 4, 2, 512, 256, False), (16, 2, 2, 2048, 64, False),
            (16, 2, 2, 4096, 32, False), (16, 1, 2, 4096, 32, False), (16, 1, 2, 8192, 16, False),
            (16, 2, 2, 8192, 16, False), (16, 4, 2, 2048, 64, False), (32, 2, 2, 2048, 64, False),
            (8, 1, 2, 8192, 16, False), (16, 2, 1, 2048, 64, False), (32, 4, 2, 1024, 128, False)]):
        cfg = dict(BLOCK_N=bn, BLOCK_D=256, num_warps=warps, num_stages=stages, TARGET=target,
                   MIN_SPLIT=least)
        plan = sparse_kernel_plan(*args, out, None, layout="HND", scale=1 / math.sqrt(D), K=K, L=Lh,
                                  config=cfg, interpret=False)
        measure(mshape, f"BN{bn} w{warps} s{stages} T{target} min{least}"
                f" ({plan.grid[0] * plan.grid[1]} progs)", lambda: run_plan(plan), mcheck, ours, nbytes)


def paged_section():
    from kernels.decode import decode
    from kernels.paged_decode import _flat_plan, paged_decode
    from references.paged import paged_decode_reference

    B, Hq, Hkv, S, D = 1, 32, 8, size(32000), 128
    q4, k, v = dense_inputs(B, Hq, Hkv, S, D)
    nbytes = 2 * k.numel() * k.element_size()
    dout = torch.empty_like(q4)
    base = measure(f"decode B1 S{S} D{D} (paged baseline)", "our contiguous decode wrapper",
                   lambda: decode(q4, k, v, out=dout), lambda: 0.0, None, nbytes)
    q = q4[:, :, 0].contiguous()
    for P in (16, 256):
        cache, indptr, indices, last = paged_cache((S,), P, Hkv, D)
        shape = f"paged S{S} P{P}"
        ro, _ = paged_decode_reference(q, cache, indptr, indices, last, layout="HND")
        out = torch.empty_like(q)
        check = lambda: err(out, ro)  # noqa: E731
        measure(shape, "wrapper (table/default)",
                lambda: paged_decode(q, cache, indptr, indices, last, out=out, check_indices=False),
                check, base, nbytes)
        for bn, warps, stages, splits in few([(64, 4, 5, 16), (128, 4, 3, 16), (64, 4, 4, 16),
                                              (64, 4, 6, 16), (32, 4, 5, 16)]):
            if P == 16 and bn > 64 and stages > 3:
                continue
            cfg = dict(BLOCK_N=bn, num_warps=warps, num_stages=stages, TARGET=0)
            plan = _flat_plan(q, cache, indptr, indices, last, out, None, layout="HND",
                              scale=1 / math.sqrt(D), num_splits=splits, max_pages=None, config=cfg)
            measure(shape, f"BN{bn} w{warps} s{stages} splits{splits}", lambda: run_plan(plan), check,
                    base, nbytes)


def copy_bandwidth() -> float:
    n = 2**29
    src = torch.ones(n // 2, dtype=torch.float16, device=DEV)
    dst = torch.empty_like(src)
    us = dev_us(lambda: torch.mul(src, 1, out=dst))
    return 2 * n / (us * 1e-6) / 1e9


def main():
    if not DRY and not torch.cuda.is_available():
        sys.exit("decode_variants: needs a CUDA GPU (or --dry-cpu)")
    import triton

    only = set(ARGS.only.split(","))
    name = "dry run (interpreter)" if DRY else torch.cuda.get_device_name()
    print(f"# {name} torch {torch.__version__} triton {triton.__version__}; "
          f"cold L2, graph replay, {ARGS.runs} runs a line, medians", flush=True)
    if not DRY:
        print(f"# copy bandwidth {copy_bandwidth():.0f} GB/s", flush=True)
    print(f"{'shape':<34} {'variant':<44} {'us':>8} {'ratio':>6} {'GB/s':>7} {'max err':>9}", flush=True)
    sections = [("sparse", sparse_section), ("dense", dense_short), ("sparse_paged", sparse_paged_section),
                ("bench", dense_bench), ("paged", paged_section)]
    for name, fn in sections:
        if name in only and not over_budget():
            fn()
    print(f"# {time.time() - T0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
