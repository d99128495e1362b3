"""Mustafar compressed sparse KV (docs/contract.md section 9): four operations on one format
(kernels/mustafar_format.py), each a case axis ``op``:

* ``compress``: the compressor's round trip ``decompress(compress(x))`` for keys and values
  against pruning / 2-bit quantisation written on the dense tensor (references/mustafar.py), and
  its buffers read with the format of docs/contract.md section 9 (``references.mustafar.decode_buffers``)
  against the same (``k_format``, ``v_format``): the format is an interchange format, so a
  compressor and kernels that agree only with each other (a private bit order) fail;
* ``keys``: unscaled scores ``q . k`` over compressed keys -> [B, Hq, S_c] fp32;
* ``values``: ``p @ V`` over compressed values -> [B, Hq, D] fp32;
* ``decode``: ``softmax(scale * scores) @ V`` -> [B, Hq, D] fp16, built from the two kernels.

The compute operations run on buffers written by the reference compressor
(``references.mustafar.encode_buffers``, not the implementation's own), and conformance compares
each kernel with the same math on the cache those buffers describe (exact decode). Separately,
``FAMILY.quality`` reports how far the compressed result is from dense attention on the unpruned
cache, and the compression ratio: figures, never pass/fail.

``init="edge"`` plants tiles whose kept values are all zero or that keep nothing (channels set to
0), tiles that keep every element (large channels), and flat tiles (min == max, scale 1): see
``plant_edge_tiles``; tests/test_mustafar_format.py checks the buffers really contain them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from attnsuite.case import make_cases, unique
from attnsuite.family import Family
from attnsuite.interfaces import SCALE_NOTE, Interface
from attnsuite.pairwise import pairwise
from kernels import mustafar as kernels_mustafar
from kernels.mustafar_format import Compressed, compress, decompress
from attnsuite.result import CaseFailure
from references.mustafar import (approximation, attention_reference, compressed_reference, decode_buffers,
                                 encode_buffers, kept_from_bitmaps, on_buffers, scores_reference,
                                 values_reference)

from ._attention import randn, score_bound
from ._dims import (CONTIG, EXTREMES, RANDN, SHIFTS, VALUES, cancel_values, case_scale, dense_values,
                    dims_label, draw_classes, draw_vals, effective_scale, embed, fused_rows, large_queries, late_mask,
                    offset_values, pairwise_legal, scale_late, second_half, seq_slice, shift_scores)

#: One view kind: q from a fused projection, p rows of a longer buffer, and the caches the
#: compressor reads windows of a longer cache.
MUSTAFAR_VIEWS = ("slice",)

OPS = ("compress", "keys", "values", "decode")


@dataclass(frozen=True)
class MustafarOps:
    """A Mustafar implementation: the compressor pair and the three compute operations.
    Calling it runs one operation by name (so it can be passed as ``--impl mustafar=...``)."""
    compress: Callable
    decompress: Callable
    keys: Callable
    values: Callable
    decode: Callable

    def __call__(self, op: str, *args, **kwargs):
        return getattr(self, op)(*args, **kwargs)


TRITON = MustafarOps(compress=compress, decompress=decompress, keys=kernels_mustafar.mustafar_keys,
                     values=kernels_mustafar.mustafar_values, decode=kernels_mustafar.mustafar_decode)


def label(p) -> str:
    edge = "-edge" if p["init"] == "edge" else ""
    return (f"{p['op']}-{p['bits']}bit-s{p['s']}-B{p['B']}-Hq{p['Hq']}-Hkv{p['Hkv']}-S{p['S']}"
            f"-D{p['D']}{edge}{dims_label(p)}")


def case(op, bits=2, s=0.7, B=1, Hq=4, Hkv=1, S=256, D=64, init="randn", view=CONTIG, vals=RANDN, scale=None):
    return dict(op=op, dtype="fp16", bits=bits, s=s, B=B, Hq=Hq, Hkv=Hkv, S=S, D=D, init=init, view=view,
                vals=vals, scale=scale)


ORIGIN = dict(B=2, Hq=4, Hkv=4, D=128, S=256, s=0.7, bits=2)   # the origin's failing shape

#: Decode: every pair of a softmax scale, a length (the shortest, 64; past two 128-key tiles), the
#: format, the pruned share, q of a fused projection or not, a value distribution, a GQA group (non-
#: powers of two; several KV heads) and the batch. The score ranges run unpruned (pruning would
#: drop part of their shift).
PAIRWISE = [case("decode", bits=r["bits"], s=r["s"], B=r["B"], Hq=r["heads"][0], Hkv=r["heads"][1], S=r["S"],
                 view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "S": (64, 128, 320), "bits": (2, 16),
                               "s": (0.0, 0.5), "view": (CONTIG, "slice"), "vals": (RANDN, "large", "pm80"),
                               "heads": ((6, 2), (7, 1), (4, 2)), "B": (1, 2)},
                              # (one sequence's one KV head, sliced from a longer buffer, is contiguous: no view;
                              # the longest rows, the costliest, for one sequence: the hand-picked cases run
                              # two over 256 tokens and more)
                              lambda r: pairwise_legal(r) and not (r.get("vals") in SHIFTS and r.get("s", 0.0) > 0)
                              and not (r.get("view") == "slice" and r.get("B") == 1 and r.get("heads", (0, 2))[1] == 1)
                              and not (r.get("S") == 320 and r.get("B") == 2))]

QUICK = (
    [case("compress", bits=b, s=s, Hq=2, Hkv=2) for b in (16, 2) for s in (0.0, 0.5, 0.7)]
    + [case("compress", bits=b, s=0.5, Hq=2, Hkv=2, D=128, init="edge") for b in (16, 2)]
    + [case(op, bits=b, s=s, Hq=hq, D=d) for op in ("keys", "values") for b in (16, 2)
       for s in (0.5, 0.7) for (hq, d) in ((1, 64), (4, 128))]
    + [case(op, bits=b, s=0.0, S=512) for op in ("keys", "values") for b in (16, 2)]
    + [case(op, bits=b, s=0.5, D=128, init="edge") for op in ("keys", "values", "decode") for b in (16, 2)]
    + [case(op, **ORIGIN) for op in ("keys", "values", "decode")]
    + [case("decode", bits=b, s=s, B=2, Hq=8, Hkv=2) for b in (16, 2) for s in (0.0, 0.5)]
    # S_c a multiple of 64 but not of 256 (docs/contract.md: any multiple of 64), every op.
    + [case(op, bits=b, s=0.5, S=S, Hq=2) for op in ("keys", "values", "decode")
       for b, S in ((16, 192), (2, 320), (2, 64))]
    + [case("compress", bits=b, s=0.5, Hq=2, Hkv=2, S=192) for b in (16, 2)]
    # Legal views: q of a fused projection, p rows of a longer buffer, K/V the compressor reads
    # as windows of a longer cache.
    + [case(op, bits=2, s=0.5, Hq=4, Hkv=2, S=192, view="slice") for op in OPS]
    # Value distributions: V offset (values, decode and the compressor), late and large scores.
    + [case(op, bits=b, s=0.5, Hq=2, S=512, vals=vl)
       for op, b, vl in (("values", 16, "offset"), ("values", 2, "cancel"), ("decode", 2, "offset"),
                         ("decode", 16, "cancel"), ("decode", 16, "late"), ("decode", 2, "large"))]
    + [case("compress", bits=2, s=0.5, Hq=2, Hkv=2, S=128, vals="offset")]
    # GQA groups that are not powers of two (query heads of one group contiguous), every op (decode's
    # 3 and 7 in PAIRWISE).
    + [case(op, bits=b, s=0.5, Hq=hq, Hkv=hkv, S=128)
       for op, b, hq, hkv in (("keys", 2, 6, 2), ("values", 16, 5, 1), ("decode", 16, 6, 1))]
    # Decode: score ranges at the edges of the exponent (unpruned: pruning would drop part of the
    # shift), zero vectors (zero keys and values keep nothing once pruned), and softmax scales
    # other than 1/sqrt(D).
    + [case("decode", bits=b, s=s, B=2, Hq=2, S=128, vals=vl)
       for b, s, vl in zip((16, 2, 2), (0.0, 0.0, 0.5), EXTREMES)]
    + [case("keys", bits=2, s=0.5, Hq=2, S=128, vals="zeros")]
    + [case("decode", bits=b, s=sp, Hq=2, S=128, vals=vl, scale=sc)
       for b, sp, sc, vl in ((2, 0.5, "mla", "large"), (16, 0.5, "hot", "late"), (2, 0.0, "one", "pm80"))]
    # Every pair of scale x length x format x pruned share x view x values x GQA group x batch
    # (PAIRWISE): negative and zero scales meet the shortest length, q of a fused projection and
    # the score ranges.
    + PAIRWISE
    # The compressor over several sequences and KV heads at once (B > 1 with Hkv > 1), both formats.
    + [case("compress", bits=b, s=0.5, B=2, Hq=4, Hkv=2, S=128) for b in (16, 2)]
)

FULL = (
    [case(op, bits=b, s=s, B=2, Hq=hq, Hkv=2, S=S, D=d) for op in ("keys", "values", "decode")
     for b in (16, 2) for s in (0.0, 0.5, 0.7) for hq in (2, 8) for S in (1024, 4096)
     for d in (64, 128)]
    + [case("compress", bits=b, s=s, B=2, Hq=4, Hkv=4, S=1024, D=128) for b in (16, 2)
       for s in (0.0, 0.5, 0.7)]
    + [case(op, bits=b, s=0.7, B=2, Hq=8, Hkv=2, S=S, D=128, view=vw, vals=vl) for op in OPS for b in (16, 2)
       for S in (1088, 4160) for vw, vl in ((CONTIG, RANDN), ("slice", RANDN), *((CONTIG, v) for v in VALUES))]
)

# The speed target's shape (docs/benchmarks.md): key formulation at S_c = 32768, 70%, 2-bit.
BENCH = [case(op, bits=b, s=0.7, B=1, Hq=32, Hkv=8, S=32768, D=128) for op in ("keys", "values") for b in (2, 16)]


#: Where ``call`` leaves, for the reference, which elements the implementation's compressor kept.
CHOSEN = "chosen_"


def chosen_mask(packed, shape, kind):
    """The keep mask of an implementation's compressed buffers, read through the format's
    bitmaps (docs/contract.md section 9); None when the object has no bitmaps to read."""
    bitmaps = getattr(packed, "bitmaps", None)
    if not isinstance(bitmaps, torch.Tensor):
        return None
    try:
        return kept_from_bitmaps(kind, tuple(shape), bitmaps)
    except (IndexError, RuntimeError):  # malformed bitmaps: the default tie-break judges them
        return None


def format_decode(packed, kind: str, bits: int, shape) -> torch.Tensor:
    """The dense cache an implementation's compressed buffers describe, read with the format of
    docs/contract.md section 9 (the reference decoder), whatever the implementation's own decompress
    reads; a contract failure when the object does not carry the format's buffers."""
    names = ("bitmaps", "offsets", "packed") + (("scale", "zero") if bits == 2 else ())
    buffers = {n: getattr(packed, n, None) for n in names}
    missing = [n for n, t in buffers.items() if not isinstance(t, torch.Tensor)]
    if missing:
        raise CaseFailure("contract", f"compressed buffers: the compressor's result has no {', '.join(missing)} "
                                      "tensor(s) of the interchange format (docs/contract.md section 9)")
    try:
        return decode_buffers(kind, bits, tuple(shape), **buffers)
    except (IndexError, RuntimeError) as exc:
        raise CaseFailure("numeric", f"compressed buffers do not decode with the format of docs/contract.md section 9 "
                                     f"({type(exc).__name__}: {exc})") from exc


def plant_edge_tiles(k: torch.Tensor, v: torch.Tensor) -> None:
    """In place, on the first 64 tokens. Keys: channels 0-3 zero (tiles that keep nothing once
    pruned, or keep zeros at s = 0), 4-7 large (every token keeps them: full tiles), 8 constant
    (a flat tile). Values (D = 128): token 0 keeps channels 0-63 (large) and drops 64-127 (zero);
    token 1 has channels 0-63 constant (a full, flat tile)."""
    k[:, :, :64, 0:4] = 0
    k[:, :, :64, 4:8] *= 50
    k[:, :, :64, 8] = 3.0
    if v.shape[-1] >= 128:
        v[:, :, 0, 0:64] *= 50
        v[:, :, 0, 64:] = 0
        v[:, :, 1, 0:64] = 3.0
        v[:, :, 1, 64:] *= 0.1


class Mustafar(Family):
    name = "mustafar"
    interface = Interface(
        (), (), "see MustafarOps in cases/mustafar.py", methods=("compress", "decompress", "keys", "values", "decode"),
        arguments=("compress(x [B, Hkv, S_c, D] fp16, s, kind='key'|'value', bits=16|2) -> Compressed "
                   "(kernels/mustafar_format.py); decompress(Compressed) -> dense x with pruned entries 0",
                   "keys(q [B, Hq, D], keys: Compressed, out=[B, Hq, S_c] fp32) -> unscaled q . k",
                   "values(p [B, Hq, S_c], values: Compressed, out=[B, Hq, D] fp32) -> p @ V",
                   "decode(q, keys, values, scale=None, out=[B, Hq, D] q's dtype) -> softmax(scale * q . k) @ V; "
                   "GQA: query heads of one group are contiguous"),
        notes="S_c is any multiple of 64; ties at the pruning threshold may be broken either way; keys are "
              "unscaled, decode's " + SCALE_NOTE)
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": TRITON}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        op = rng.choice(OPS)
        Hkv = rng.choice((1, 2))
        D = rng.choice((64, 128))
        return case(op, bits=rng.choice((16, 2)), s=rng.choice((0.0, 0.3, 0.5, 0.7, 0.9)),
                    B=rng.randint(1, 2), Hq=Hkv * rng.choice((1, 2, 4)), Hkv=Hkv, S=64 * rng.randint(1, 8), D=D,
                    init="edge" if D == 128 and rng.random() < 0.2 else "randn",
                    view=rng.choice((CONTIG, "slice")), vals=draw_vals(rng))

    def fuzz_classes(self, params, rng):
        return draw_classes(rng, params, gqa=True)

    def make_inputs(self, case, gen, device=None):
        B, Hq, Hkv, S, D = (case[x] for x in ("B", "Hq", "Hkv", "S", "D"))
        q = randn(gen, (B, Hq, D), case.dtype, device)
        k, v = randn(gen, (B, Hkv, S, D), case.dtype, device), randn(gen, (B, Hkv, S, D), case.dtype, device)
        if case["init"] == "edge":
            plant_edge_tiles(k, v)
        vals = case.params.get("vals", RANDN)
        if vals == "offset":
            v = offset_values(v)
        elif vals == "cancel":
            v = cancel_values(v, second_half(torch.arange(S, device=v.device)[:, None], S)[..., 0])
        elif vals == "large":
            q = large_queries(q)
        elif vals == "late":
            k = scale_late(k, late_mask(torch.arange(S, device=k.device), torch.tensor(S)))
        elif vals in SHIFTS:
            q, k = shift_scores(vals, q, k, effective_scale(case, D))
        elif vals == "zeros":
            q, k, v = dense_values(vals, q, k, v)
        if case.params.get("view", CONTIG) == "slice":
            q = fused_rows(q, q.new_full((B, 2 * Hkv, D), float("nan")))[0]
            k, v = seq_slice(k, v)
        inputs = {"q": q, "k": k, "v": v}
        # Buffers of the reference compressor: what the compute ops read (the compress op builds
        # its own; these give its compression ratio).
        # On the run's device when there is one: at S_c = 32768 the compressor took 11 s of a
        # GPU host's CPU and takes milliseconds there. The keep masks, bitmaps and 16-bit
        # buffers are the same bits on any device (ranks from a stable sort, packing by integer
        # sums); 2-bit scales may differ by an ulp (torch on CUDA divides by a scalar through
        # its reciprocal), and with them a code at a rounding tie. Either way the reference
        # decodes the very buffers the implementation reads.
        work = (lambda t: t.to(device)) if device is not None else (lambda t: t)
        inputs.update({"kc_" + n: t for n, t in encode_buffers(work(k), case["s"], "key", case["bits"]).items()})
        inputs.update({"vc_" + n: t for n, t in encode_buffers(work(v), case["s"], "value", case["bits"]).items()})
        if case["op"] == "values":
            p = torch.softmax(2 * torch.randn((B, Hq, S), generator=gen), -1).to(case.dtype)
            if case.params.get("view", CONTIG) == "slice":
                p = embed(p, (B, Hq, S + 64), (..., slice(0, S)), float("nan"))
            inputs["p"] = p
        return inputs

    def output_specs(self, case, inputs):
        B, Hq, D = inputs["q"].shape
        S = inputs["k"].shape[2]
        if case["op"] == "compress":
            dt = torch.float16 if case["bits"] == 16 else torch.float32
            return {"k": (tuple(inputs["k"].shape), dt), "v": (tuple(inputs["v"].shape), dt),
                    "k_format": (tuple(inputs["k"].shape), torch.float32),
                    "v_format": (tuple(inputs["v"].shape), torch.float32)}
        if case["op"] == "keys":
            return {"scores": ((B, Hq, S), torch.float32)}
        return {"o": ((B, Hq, D), torch.float32 if case["op"] == "values" else case.dtype)}

    @staticmethod
    def _buffers(case, inputs, kind) -> Compressed:
        return Compressed.from_tensors(kind, case["bits"], inputs["k"].shape, inputs,
                                       prefix="kc_" if kind == "key" else "vc_")

    def call(self, impl, case, inputs, outputs):
        op, bits, s = case["op"], case["bits"], case["s"]
        if op == "compress":
            for name, kind in (("k", "key"), ("v", "value")):
                packed = impl("compress", inputs[name], s, kind=kind, bits=bits)
                outputs[name].copy_(impl("decompress", packed))
                outputs[name + "_format"].copy_(format_decode(packed, kind, bits, inputs[name].shape))
                # Ties at the pruning threshold may go either way (docs/contract.md, "Pruning ties"):
                # the reference follows the implementation's choice where that choice is legal.
                inputs[CHOSEN + name] = chosen_mask(packed, inputs[name].shape, kind)
            return outputs
        kc, vc = self._buffers(case, inputs, "key"), self._buffers(case, inputs, "value")
        if op == "keys":
            return {"scores": impl("keys", inputs["q"], kc, out=outputs["scores"])}
        if op == "values":
            return {"o": impl("values", inputs["p"], vc, out=outputs["o"])}
        return {"o": impl("decode", inputs["q"], kc, vc, scale=case_scale(case), out=outputs["o"])}

    def reference(self, case, inputs, compute_dtype):
        op = case["op"]
        if op == "compress":
            ref = {name: compressed_reference(inputs[name], case["s"], kind, case["bits"],
                                              inputs.get(CHOSEN + name)).to(compute_dtype)
                   for name, kind in (("k", "key"), ("v", "value"))}
            return {**ref, "k_format": ref["k"], "v_format": ref["v"]}
        k = on_buffers(self._buffers(case, inputs, "key").tensors(), "key", case["bits"], inputs["k"].shape,
                       compute_dtype)
        v = on_buffers(self._buffers(case, inputs, "value").tensors(), "value", case["bits"],
                       inputs["v"].shape, compute_dtype)
        if op == "keys":
            return {"scores": scores_reference(inputs["q"], k, compute_dtype)}
        if op == "values":
            return {"o": values_reference(inputs["p"], v, compute_dtype)}
        return {"o": attention_reference(inputs["q"], k, v, compute_dtype, scale=case_scale(case))}

    def vendor_problem(self, case, inputs):
        if case["op"] != "decode":
            return None
        return {"q": inputs["q"][:, :, None, :], "k": inputs["k"], "v": inputs["v"], "causal": False,
                "note": "dense fp16 attention on the unpruned cache"}

    def work(self, case, inputs):
        reads = {"keys": ("kc_",), "values": ("vc_",), "decode": ("kc_", "vc_")}.get(case["op"], ())
        return {"bytes": sum(t.numel() * t.element_size() for n, t in inputs.items() if n.startswith(reads))}

    def extra_baselines(self, case, inputs, impl):
        """The speed targets' yardsticks on the unpruned cache, in torch fp16: keys against dense
        ``q @ K^T``, values against dense ``p @ V``."""
        B, Hkv, S, D = inputs["k"].shape
        G = inputs["q"].shape[1] // Hkv
        if case["op"] == "keys":
            qg, kt = inputs["q"].view(B, Hkv, G, D), inputs["k"].transpose(-1, -2)
            return {"dense_qk": (lambda: qg @ kt, "torch fp16 q @ K^T on the dense cache")}
        if case["op"] == "values":
            pg, v = inputs["p"].view(B, Hkv, G, S), inputs["v"]
            return {"dense_pv": (lambda: pg @ v, "torch fp16 p @ V on the dense cache")}
        return {}

    def score_bound(self, case, inputs):
        if case["op"] != "decode":
            return None  # keys: raw scores; values: p @ V; compress: no softmax
        return score_bound(inputs["q"], inputs["k"], effective_scale(case, case["D"]))

    def launches_kernel(self, case):
        return case["op"] != "compress"  # the compressor is vectorized torch

    def quality(self, case, inputs, produced):
        """The compressed result against the same op on the unpruned fp16 cache (fp64), and the
        bytes of the buffers the op reads over the dense fp16 bytes they replace."""
        op = case["op"]
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        if op == "compress":
            out = torch.cat([produced["k"].flatten(), produced["v"].flatten()])
            truth = torch.cat([k.flatten(), v.flatten()])
        elif op == "keys":
            out, truth = produced["scores"], scores_reference(q, k, torch.float64)
        elif op == "values":
            out, truth = produced["o"], values_reference(inputs["p"], v, torch.float64)
        else:
            out, truth = produced["o"], attention_reference(q, k, v, torch.float64)
        reads = {"compress": ("kc_", "vc_"), "keys": ("kc_",), "values": ("vc_",), "decode": ("kc_", "vc_")}[op]
        packed = sum(t.numel() * t.element_size() for n, t in inputs.items() if n.startswith(reads))
        dense = k.numel() * k.element_size() * len(reads)
        return {"op": op, "sparsity": case["s"], "bits": case["bits"],
                "compression_ratio": packed / dense, **approximation(out, truth)}


FAMILY = Mustafar()
