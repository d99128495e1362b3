"""Dense prefill (docs/contract.md section 1): q [B, Hq, S, D], k/v [B, Hkv, S, D], causal or not,
GQA, optional natural-log LSE."""
from __future__ import annotations

from attnsuite.case import grid, make_cases, unique
from attnsuite.pairwise import pairwise
from attnsuite.ecosystem import implementations
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface
from kernels.prefill import prefill
from references.attention import prefill_reference

from ._attention import attention_outputs, heads, lse_if, qkv, score_bound
from ._dims import (CONTIG, DENSE_VIEWS, EXTREMES, LONG_RESIDUES, RANDN, SIGNED_SCALES, TILE_RESIDUES, VALUES,
                    case_scale, dense_values, dense_views, dims_label, draw_classes, draw_dtype, draw_head_dim,
                    draw_heads, draw_length, draw_vals, draw_view, effective_scale, pairwise_legal)


def label(p) -> str:
    mask = "causal" if p["causal"] else "noncausal"
    lse = "-lse" if p["lse"] else ""
    qs = f"-qs{p['qscale']}" if p.get("qscale") else ""
    return f"{p['dtype']}-{heads(p['B'], p['Hq'], p['Hkv'])}-S{p['S']}-D{p['D']}-{mask}{lse}{qs}{dims_label(p)}"


def _gqa(B, Hkv, G):
    return {"B": B, "Hq": Hkv * G, "Hkv": Hkv}


#: Every pair of: a softmax scale, a legal view (the contiguous layout meets every other factor
#: in the hand-picked cases), one query / a ragged tile / past a 64-wide tile, the mask, a value
#: distribution, a GQA group (non-powers of two), the batch and the LSE on or off.
PAIRWISE = [dict(dtype="fp16", **_gqa(r["B"], *r["heads"]), S=r["S"], D=64, causal=r["causal"], lse=r["lse"],
                 view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "view": DENSE_VIEWS,
                               "vals": (RANDN, "large", "pm80"), "S": (1, 17, 65), "causal": (True, False),
                               "heads": ((2, 3), (1, 5), (1, 7)), "lse": (True, False), "B": (1, 2)},
                              # (one token of one sequence from a fused projection, or the one KV head of one
                              # sequence from a longer cache, is contiguous: no view)
                              lambda r: pairwise_legal(r) and not (r.get("B") == 1 and (
                                  r.get("view") == "fused" and r.get("S") == 1
                                  or r.get("view") == "kvslice" and r.get("heads", (2,))[0] == 1)))]


QUICK = (
    # GQA ratios 1, 4, 8 x block-multiple and ragged lengths x both masks, with LSE.
    [dict(dtype="fp16", **_gqa(2, h, g), S=s, D=64, causal=c, lse=True)
     for (h, g) in ((2, 1), (2, 4), (1, 8)) for s in (1, 17, 128) for c in (True, False)]
    # Wider heads and the no-LSE path.
    + [dict(dtype="fp16", **_gqa(1, 2, 4), S=s, D=d, causal=True, lse=False)
       for d in (128, 256) for s in (1, 17, 64)]
    # Large logits (q scaled by qscale, scores of std ~8): exp(score) without the row max
    # subtracted overflows fp16 (past ~11.1), so a softmax that skips the max fails here.
    + [dict(dtype="fp16", **_gqa(1, 2, 2), S=17, D=64, causal=False, lse=True, qscale=8)]
    # bf16: on cpu these meet the interpreter's bf16 tl.dot failure (cases/known_failures.toml).
    + [dict(dtype="bf16", **_gqa(2, 2, 4), S=s, D=64, causal=c, lse=True) for s in (17,) for c in (True, False)]
    # Tile residues: S % 16 and S % 64 in {0, 1, 2, tile - 1}, then S % 128 (the interpreter's
    # tile, a device's BLOCK_M) in {127, 1, 2}: the last query and key tiles partly filled.
    + [dict(dtype="fp16", **_gqa(1, 1, 2), S=s, D=64, causal=c, lse=True)
       for s in TILE_RESIDUES for c in (True, False)]
    + [dict(dtype="fp16", **_gqa(1, 1, 2), S=s, D=64, causal=True, lse=True) for s in LONG_RESIDUES]
    # Value distributions over several key tiles (the late keys in the last), masks alternating.
    # cancel: every row sees both halves (non-causal) over ten 64-key tiles.
    + [dict(dtype="fp16", **_gqa(1, 1, g), S=s, D=64, causal=c, lse=True, vals=vl)
       for vl, g, s, c in zip(VALUES, (2, 1, 2, 2), (300, 640, 300, 300), (True, False, True, False))]
    # Score ranges at the edges of the exponent and zero vectors (cases/_dims.py, EXTREMES).
    + [dict(dtype="fp16", **_gqa(2, 1, 2), S=65, D=64, causal=c, lse=True, vals=vl)
       for vl, c in zip(EXTREMES, (True, False, True))]
    # Every pair of scale x view x length x mask x values x GQA group x batch x LSE (PAIRWISE):
    # negative and zero scales meet one query, every view and the extreme score ranges.
    + PAIRWISE
    # A negative scale over large logits (cases/_dims.py, SIGNED_SCALES; porting_notes.md names it),
    # MLA's scale and no scaling over the distributions that stress the exponent.
    + [dict(dtype="fp16", **_gqa(1, 1, 2), S=s, D=64, causal=c, lse=True, vals=vl, scale=sc)
       for sc, vl, s, c in (SIGNED_SCALES[0] + (65, True), ("mla", "late", 130, False), ("one", "pm80", 1, True))]
    # (GQA 6: the pairwise groups are 3, 5 and 7.)
    + [dict(dtype="fp16", **_gqa(1, 1, 6), S=33, D=64, causal=True, lse=False, vals="offset", scale="one")]
)

FULL = [
    dict(dtype=p["dtype"], **_gqa(2, 2, p["G"]), S=p["S"], D=p["D"], causal=p["causal"], lse=True)
    for p in grid(dtype=("fp16", "bf16"), G=(1, 4, 8), S=(1, 17, 128, 1000), D=(64, 128, 256),
                  causal=(True, False))
] + [
    dict(dtype="fp16", **_gqa(1, 1, 2), S=s, D=64, causal=False, lse=True) for s in LONG_RESIDUES
] + [
    # Device tiles (64 .. 128 wide) left with 0, 1, 2 and tile - 1 rows, views and value
    # distributions at device sizes.
    dict(dtype=dt, **_gqa(2, 2, 4), S=s, D=128, causal=c, lse=True)
    for dt in ("fp16", "bf16") for s in (255, 256, 257, 258, 1023, 1025) for c in (True, False)
] + [
    dict(dtype=dt, **_gqa(2, 4, 2), S=1000, D=d, causal=c, lse=True, view=vw, vals=vl)
    for dt in ("fp16", "bf16") for d in (64, 128) for c in (True, False)
    for vw, vl in [(v, RANDN) for v in DENSE_VIEWS] + [(CONTIG, v) for v in VALUES]
]

# The origin's bench shape: B=8, Hkv=16, G=4, S=1024, D=64, causal, fp16.
# Long prefill (the TFLOP/s benchmark target, docs/benchmarks.md): B=1, Hq=32, Hkv=8, S=16384, D=128, causal, bf16.
BENCH = [dict(dtype=dt, **_gqa(8, 16, 4), S=1024, D=64, causal=True, lse=lse)
         for dt in ("fp16", "bf16") for lse in (False, True)] + [
    dict(dtype="bf16", **_gqa(1, 8, 4), S=16384, D=128, causal=True, lse=False)]


class Prefill(Family):
    name = "prefill"
    interface = Interface(
        ("q", "k", "v"), ("causal", *ATTENTION_KEYWORDS), "(o [B, Hq, S, D], lse [B, Hq, S] fp32 or None)",
        arguments=("q  [B, Hq, S, D]  fp16 | bf16  (BNSD)", "k, v  [B, Hkv, S, D]  q's dtype; Hq % Hkv == 0, "
                   "query head h reads KV head h // (Hq // Hkv)", "causal  bool: key j is masked for query i when j > i",
                   "out  [B, Hq, S, D] q's dtype; lse  [B, Hq, S] fp32 (when return_lse)"),
        notes=f"{SCALE_NOTE}; D in {{64, 128, 256}} in the catalog")
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": prefill, **implementations("prefill")}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        Hq, Hkv = draw_heads(rng)
        D = draw_head_dim(rng)
        return dict(dtype=draw_dtype(rng), B=rng.randint(1, 2), Hq=Hq, Hkv=Hkv,
                    S=draw_length(rng, 300 if D < 256 else 140), D=D, causal=rng.random() < 0.5,
                    lse=rng.random() < 0.7, view=draw_view(rng, DENSE_VIEWS), vals=draw_vals(rng))

    def fuzz_classes(self, params, rng):
        return draw_classes(rng, params, gqa=True)

    def make_inputs(self, case, gen, device=None):
        inputs = qkv(gen, case["B"], case["Hq"], case["Hkv"], case["S"], case["S"], case["D"], case.dtype,
                     device)
        if case.params.get("qscale"):  # large logits: q scaled (exactly, a power of two)
            inputs["q"] = inputs["q"] * case["qscale"]
        q, k, v = dense_values(case.params.get("vals", RANDN), inputs["q"], inputs["k"], inputs["v"],
                               scale=effective_scale(case, case["D"]))
        q, k, v = dense_views(case.params.get("view", CONTIG), q, k, v)
        return {"q": q, "k": k, "v": v}

    def output_specs(self, case, inputs):
        B, Hq, S, D = inputs["q"].shape
        return attention_outputs(case, (B, Hq, S, D), (B, Hq, S))

    def call(self, impl, case, inputs, outputs):
        o, lse = impl(inputs["q"], inputs["k"], inputs["v"], causal=case["causal"], scale=case_scale(case),
                      return_lse=case["lse"], out=outputs["o"], lse=outputs.get("lse"))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        o, lse = prefill_reference(inputs["q"], inputs["k"], inputs["v"], causal=case["causal"],
                                   scale=case_scale(case), compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        return score_bound(inputs["q"], inputs["k"], effective_scale(case, case["D"]))

    def vendor_problem(self, case, inputs):
        return {"q": inputs["q"], "k": inputs["k"], "v": inputs["v"], "causal": case["causal"]}

    def work(self, case, inputs):
        B, Hq, S, D = inputs["q"].shape
        return {"flops": 4 * B * Hq * S * S * D * (0.5 if case["causal"] else 1.0)}


FAMILY = Prefill()
