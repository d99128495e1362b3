"""Mustafar fast-path variants against dense fp16 on the speed target's shape:
B1 Hq32 Hkv8 S_c 32768 D128, 70% sparse, 2-bit and 16-bit packing, keys and values.

One GPU command (from the repository root, on a CUDA machine; about 2 minutes):

    python scripts/mustafar_variants.py            # every variant, one table
    python scripts/mustafar_variants.py --dry      # CPU smoke test: interpreter, tiny shape

Each variant is checked against the fp32 reference on the same buffers
(``kernels.mustafar_format.decompress`` + torch) and timed by CUDA-graph replay with the L2
flushed before every call (``attnsuite.bench.timing.device_time``), beside the dense fp16 product
(``q @ K^T`` / ``p @ V`` on the unpruned cache) in the same process. Columns: variant, device us,
the ratio kernel / dense (below 1 is faster than dense; the target is <= 1, the goal 0.5), GB/s
of the compressed bytes the kernel reads, max abs error and that error over max|ref|.
``old`` is the fast path before kernels/mustafar_fast.py (``_mustafar_keys_fast`` / ``_mustafar_values_fast``);
``new*`` are ``kernels/mustafar_fast.py``: ``new`` its shipped config (``FAST`` with
``FAST_BY``), the others with the overrides shown. With env OUT set the
rows also go to $OUT/mustafar_variants.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DRY = "--dry" in sys.argv
if DRY:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels import mustafar as M  # noqa: E402
from kernels._checks import DOT_INPUT_PRECISION, LaunchPlan, cdiv, next_pow2, run_plan  # noqa: E402
from kernels.mustafar_format import TILE, compress, decompress  # noqa: E402

# --- the earlier fast path (kernels/mustafar.py at 43468e5), kept here as the baseline ---

@triton.jit
def _old_split_fp16(a):
    """a (fp32) as hi + lo fp16 parts times a power of two (returned), so that a dot of both parts
    with exact fp16 operands keeps ~22 bits of a over fp32's whole range."""
    m = tl.max(tl.max(tl.abs(a), 1), 0)
    e = tl.maximum((m.to(tl.int32, bitcast=True) >> 23) & 0xFF, 15)
    a = a * ((268 - e) << 23).to(tl.float32, bitcast=True)  # max |a| now below 2^15
    hi = a.to(tl.float16)
    lo = (a - hi.to(tl.float32)).to(tl.float16)
    return hi, lo, ((e - 14) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _old_tiles_by_row(v, NT: tl.constexpr):
    """[8, NT * 8] decode (element axis outer) -> fp16 [NT, 64], row t = tile t: exact, as the
    values are 2-bit codes minus zero (|.| <= 3) or fp16 values."""
    return tl.reshape(tl.permute(tl.reshape(v, (8, NT, 8)), (1, 2, 0)), (NT, 64)).to(tl.float16)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hkv", "n_tblocks"])
def _mustafar_keys_fast(
    Q, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, O,
    stride_qb, stride_qh, stride_ob, stride_oh, Hkv, D, n_tblocks,
    G: tl.constexpr, BITS: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_G: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    bk = tl.program_id(0) // n_tblocks
    t = tl.program_id(0) % n_tblocks
    b = (bk // Hkv).to(tl.int64)
    heads = (bk % Hkv).to(tl.int64) * G + tl.arange(0, BLOCK_G)
    g_ok = (tl.arange(0, BLOCK_G) < G)[:, None]
    tile0 = (bk.to(tl.int64) * n_tblocks + t) * D
    acc = tl.zeros([BLOCK_G, 64], dtype=tl.float32)
    for c0 in range(0, D, BLOCK_C):
        chans = c0 + tl.arange(0, BLOCK_C)
        c_ok = chans < D
        k = _old_tiles_by_row(M._decode_tiles(BITMAPS, OFFSETS, PACKED, ZERO, tile0 + c0, D - c0,
                                        BLOCK_C, BITS, True), BLOCK_C)
        q = tl.load(Q + b * stride_qb + heads[:, None] * stride_qh + chans[None, :],
                    mask=g_ok & c_ok[None, :], other=0.0).to(tl.float32)
        if BITS == 2:
            q = q * tl.load(SCALE + tile0 + chans, mask=c_ok, other=0.0)[None, :]
        hi, lo, unit = _old_split_fp16(q)
        acc += (tl.dot(hi, k, input_precision=DOT_PRECISION)
                + tl.dot(lo, k, input_precision=DOT_PRECISION)) * unit
    tl.store(O + b * stride_ob + heads[:, None] * stride_oh + t.to(tl.int64) * 64
             + tl.arange(0, 64)[None, :], acc, mask=g_ok)


# sizes and LSE strides unspecialized: see kernels/__init__.py
@triton.jit(do_not_specialize=["Hkv", "S", "chunk", "n_chunks"])
def _mustafar_values_fast(
    P, BITMAPS, OFFSETS, PACKED, SCALE, ZERO, O,
    stride_pb, stride_ph, stride_os, stride_ob, stride_oh, Hkv, S, chunk, n_chunks,
    G: tl.constexpr, BITS: tl.constexpr, NC: tl.constexpr, BLOCK_S: tl.constexpr,
    BLOCK_G: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    NT: tl.constexpr = BLOCK_S * NC
    bk = tl.program_id(0) // n_chunks
    ch = tl.program_id(0) % n_chunks
    b = (bk // Hkv).to(tl.int64)
    heads = (bk % Hkv).to(tl.int64) * G + tl.arange(0, BLOCK_G)
    g_ok = (tl.arange(0, BLOCK_G) < G)[:, None]
    tt = tl.arange(0, NT)
    cbs = tl.arange(0, NC)[:, None, None]
    acc = tl.zeros([NC, BLOCK_G, 64], dtype=tl.float32)
    s_end = tl.minimum(ch * chunk + chunk, S)
    for s0 in range(ch * chunk, s_end, BLOCK_S):
        tile0 = (bk.to(tl.int64) * S + s0) * NC
        t_ok = tt < (s_end - s0) * NC
        v = _old_tiles_by_row(M._decode_tiles(BITMAPS, OFFSETS, PACKED, ZERO, tile0, (s_end - s0) * NC,
                                        NT, BITS, True), NT)
        # Row t of v is token s0 + t // NC, channel block t % NC: p per tile, one dot per block.
        p = tl.load(P + b * stride_pb + heads[:, None] * stride_ph + s0 + tt[None, :] // NC,
                    mask=g_ok & t_ok[None, :], other=0.0).to(tl.float32)
        if BITS == 2:
            p = p * tl.load(SCALE + tile0 + tt, mask=t_ok, other=0.0)[None, :]
        for cb in tl.static_range(NC):
            hi, lo, unit = _old_split_fp16(tl.where((tt % NC == cb)[None, :], p, 0.0))
            part = (tl.dot(hi, v, input_precision=DOT_PRECISION)
                    + tl.dot(lo, v, input_precision=DOT_PRECISION)) * unit
            acc += tl.where(cbs == cb, part[None, :, :], 0.0)
    dst = O + ch * stride_os + b * stride_ob + heads[None, :, None] * stride_oh
    tl.store(dst + cbs * 64 + tl.arange(0, 64)[None, None, :], acc.to(O.dtype.element_ty),
             mask=g_ok[None, :, :])


#: name -> config overrides of kernels.mustafar.FAST (None: the earlier fast path).
VARIANTS = {
    "old": None,
    "new": {},
    "new/T1": {"TRANS": 1},
    "new/T0": {"TRANS": 0},
    "new/noPF": {"PREFETCH": False},
    "new/r0": {"maxnreg": None},
    "new/r128": {"maxnreg": 128},
    "new/g8": {"gmin": 8},
    "new/g16": {"gmin": 16},
    "new/pps4": {"programs_per_sm": 4},
    "new/pps8": {"programs_per_sm": 8},
    "new/pps16": {"programs_per_sm": 16},
}
#: Variants that only make sense for some ops or packings (none now).
ONLY: dict = {}


def old_plan(op, x, c, out):
    """The fast path as it was at 43468e5 (kernels/mustafar.py's _mustafar_*_fast launches)."""
    B, Hkv, S, D = c.shape
    Hq = x.shape[1]
    G = Hq // Hkv
    if op == "keys":
        n_tblocks = S // TILE
        args = (x, *M._buffers(c), out, x.stride(0), x.stride(1), out.stride(0), out.stride(1),
                Hkv, D, n_tblocks)
        meta = dict(G=G, BITS=c.bits, BLOCK_C=min(next_pow2(D), 128), BLOCK_G=max(16, next_pow2(G)),
                    DOT_PRECISION=DOT_INPUT_PRECISION, num_warps=4, num_stages=1)
        return LaunchPlan(kernel=_mustafar_keys_fast, grid=(B * Hkv * n_tblocks,), args=args, meta=meta)
    cfg = M.mustafar_values_config(S, D, G, c.bits, False, False)
    cfg.update(BLOCK_G=max(16, cfg["BLOCK_G"]), num_warps=4)
    step = cfg["BLOCK_S"]
    chunk = cdiv(min(S, 512), step) * step
    n_chunks = cdiv(S, chunk)
    if n_chunks == 1:
        dst, strides = out, (0, out.stride(0), out.stride(1))
    else:
        dst = torch.empty((n_chunks, B, Hq, D), dtype=torch.float32, device=x.device)
        strides = dst.stride()[:3]
    args = (x, *M._buffers(c), dst, x.stride(0), x.stride(1), *strides, Hkv, S, chunk, n_chunks)
    meta = dict(G=G, BITS=c.bits, NC=D // TILE, DOT_PRECISION=DOT_INPUT_PRECISION, **cfg)
    then = None
    if n_chunks > 1:
        block_h = min(next_pow2(Hq), 16)
        then = LaunchPlan(kernel=M._sum_chunks, grid=(B, cdiv(Hq, block_h)),
                          args=(dst, out, n_chunks, dst.stride(0), dst.stride(1), out.stride(0),
                                out.stride(1), Hq), meta=dict(D=D, BLOCK_H=block_h))
    return LaunchPlan(kernel=_mustafar_values_fast, grid=(B * Hkv * n_chunks,), args=args,
                      meta=meta, then=then)


def timer():
    if DRY:
        return lambda fn: float("nan")
    from attnsuite.bench.timing import device_time
    from attnsuite.devices import open_device
    device = open_device("cuda", None)

    def time_ms(fn):
        fn()
        torch.cuda.synchronize()
        return device_time(device, fn, runs=20).timing.median_ms
    return time_ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dry", action="store_true", help="CPU smoke test (interpreter, tiny shape)")
    ap.add_argument("--shape", default="1,32,8,32768,128", help="B,Hq,Hkv,S_c,D")
    ap.add_argument("--sparsity", type=float, default=0.7)
    ap.add_argument("--bits", type=int, nargs="*", default=[2, 16])
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--portable", action="store_true", help="time the portable kernels too")
    args = ap.parse_args(argv)
    if args.dry:
        args.shape = "1,8,2,256,128"
    B, Hq, Hkv, S, D = (int(x) for x in args.shape.split(","))
    G = Hq // Hkv
    dev = torch.device("cpu" if args.dry else "cuda")
    gen = torch.Generator(device=dev).manual_seed(0)
    k = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.float16, generator=gen)
    v = torch.randn(B, Hkv, S, D, device=dev, dtype=torch.float16, generator=gen)
    q = torch.randn(B, Hq, D, device=dev, dtype=torch.float16, generator=gen)
    p = torch.softmax(torch.randn(B, Hq, S, device=dev, generator=gen), -1).to(torch.float16)
    time_ms = timer()
    qg, kt, pg = q.view(B, Hkv, G, D), k.transpose(-1, -2), p.view(B, Hkv, G, S)
    dense = {"keys": time_ms(lambda: qg @ kt), "values": time_ms(lambda: pg @ v)}
    dense_bytes = k.numel() * 2
    head = (f"{'dry run (interpreter)' if args.dry else torch.cuda.get_device_name()}  triton "
            f"{triton.__version__}  torch {torch.__version__}\nshape B{B} Hq{Hq} Hkv{Hkv} S{S} D{D}, "
            f"s={args.sparsity}; dense fp16 q@K^T {dense['keys'] * 1e3:.1f} us, p@V "
            f"{dense['values'] * 1e3:.1f} us ({dense_bytes / 1e6:.1f} MB each)")
    print(head, flush=True)
    print(f"{'op':6s} {'bits':>4s} {'variant':12s} {'us':>8s} {'/dense':>7s} {'GB/s':>6s} "
          f"{'max err':>9s} {'rel err':>8s}  note", flush=True)
    rows = []
    t_start = time.time()
    for bits in args.bits:
        kc = compress(k, args.sparsity, kind="key", bits=bits)
        vc = compress(v, args.sparsity, kind="value", bits=bits)
        ref = {"keys": (q.float().view(B, Hkv, G, D) @ decompress(kc).float().transpose(-1, -2)
                        ).reshape(B, Hq, S),
               "values": (p.float().view(B, Hkv, G, S) @ decompress(vc).float()).reshape(B, Hq, D)}
        for op, c, x in (("keys", kc, q), ("values", vc, p)):
            out = torch.empty_like(ref[op])
            names = list(args.variants) + (["portable"] if args.portable else [])
            for name in names:
                only = ONLY.get(name, {})
                if bits not in only.get("bits", (bits,)) or op not in only.get("op", (op,)):
                    continue
                row = dict(op=op, bits=bits, variant=name, compressed_mb=c.nbytes() / 1e6,
                           dense_us=dense[op] * 1e3)
                try:
                    t0 = time.time()
                    if name == "portable":
                        import kernels.settings as ks
                        with ks.using(kernel_path="portable"):
                            plan = (M.mustafar_keys_plan(x, c, out) if op == "keys"
                                    else M.mustafar_values_plan(x, c, out))
                    elif VARIANTS[name] is None:
                        plan = old_plan(op, x, c, out)
                    else:
                        plan = (M.mustafar_keys_fast_plan(x, c, out, VARIANTS[name]) if op == "keys"
                                else M.mustafar_values_fast_plan(x, c, out, VARIANTS[name]))
                    out.fill_(float("nan"))
                    run_plan(plan)
                    if not args.dry:
                        torch.cuda.synchronize()
                    row["first_call_s"] = time.time() - t0
                    err = (out - ref[op]).abs().max().item()
                    row["max_err"] = err
                    row["rel_err"] = err / max(1.0, ref[op].abs().max().item())
                    ms = time_ms(lambda: run_plan(plan))
                    row.update(us=ms * 1e3, ratio=ms / dense[op], gbps=c.nbytes() / (ms * 1e-3) / 1e9,
                               grid=list(plan.grid),
                               meta={kk: vv for kk, vv in plan.meta.items() if kk != "DOT_PRECISION"})
                    note = "" if row["rel_err"] < 1e-4 else "WRONG"
                    print(f"{op:6s} {bits:4d} {name:12s} {row['us']:8.1f} {row['ratio']:7.2f} "
                          f"{row['gbps']:6.0f} {err:9.2e} {row['rel_err']:8.1e}  {note}"
                          f" grid {row['grid']} first {row['first_call_s']:.1f}s", flush=True)
                except Exception as exc:  # noqa: BLE001 - one failing variant must not hide the rest
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                    print(f"{op:6s} {bits:4d} {name:12s} ERROR {row['error'][:200]}", flush=True)
                    traceback.print_exc(limit=3)
                rows.append(row)
    print(f"total {time.time() - t_start:.0f} s", flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "mustafar_variants.json"), "w") as fh:
            json.dump(dict(head=head, dense_us={kk: vv * 1e3 for kk, vv in dense.items()}, rows=rows),
                      fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
