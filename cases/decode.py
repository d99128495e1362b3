"""Dense decode (docs/contract.md section 3): one query token per sequence, q [B, Hq, 1, D],
k/v [B, Hkv, S, D], GQA."""
from __future__ import annotations

from attnsuite.case import grid, make_cases, unique
from attnsuite.pairwise import pairwise
from attnsuite.ecosystem import implementations
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface
from kernels.decode import decode
from references.attention import decode_reference

from ._attention import attention_outputs, heads, lse_if, qkv, score_bound
from ._dims import (CONTIG, DENSE_VIEWS, EXTREMES, RANDN, SPLIT_EXTREME, SPLIT_LENGTHS, TILE_RESIDUES, VALUES,
                    case_scale, dense_values, dense_views, dims_label, draw_classes, draw_dtype, draw_head_dim,
                    draw_heads, draw_length, draw_vals, draw_view, effective_scale, pairwise_legal)


def label(p) -> str:
    qs = f"-qs{p['qscale']}" if p.get("qscale") else ""
    return f"{p['dtype']}-{heads(p['B'], p['Hq'], p['Hkv'])}-S{p['S']}-D{p['D']}{'-lse' if p['lse'] else ''}{qs}{dims_label(p)}"


PAIRWISE = [dict(dtype="fp16", B=r["B"], Hq=r["heads"][0], Hkv=r["heads"][1], S=r["S"], D=64, lse=r["lse"],
                 view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "S": (1, 65, SPLIT_LENGTHS[0]),
                               "view": (CONTIG, *DENSE_VIEWS), "vals": (RANDN, "late", "large", "pm80"),
                               "heads": ((4, 2), (6, 2), (8, 1)), "lse": (True, False), "B": (1, 2)},
                              # (one token of one sequence from a fused projection, or the one KV head of one
                              # sequence from a longer cache, is contiguous: no view; the split-crossing rows,
                              # the costliest, for one sequence: the hand-picked extremes cross two splits
                              # with two)
                              lambda r: pairwise_legal(r) and not (r.get("B") == 1 and (
                                  r.get("S") == 1 and r.get("view") == "fused"
                                  or r.get("view") == "kvslice" and r.get("heads", (0, 2))[1] == 1))
                              and not (r.get("S") == SPLIT_LENGTHS[0] and r.get("B") == 2))]

QUICK = (
    # GQA 1, 4, 8 (and all heads on one KV head) x a single key, a ragged tile, several tiles.
    [dict(dtype="fp16", B=2, Hq=hq, Hkv=hkv, S=s, D=64, lse=True)
     for (hq, hkv) in ((4, 4), (8, 2), (8, 1)) for s in (1, 17, 300)]
    + [dict(dtype="fp16", B=1, Hq=8, Hkv=2, S=s, D=d, lse=False) for d in (128, 256) for s in (33, 130)]
    # Large logits (q scaled by qscale, scores of std ~8): exp(score) without the row max
    # subtracted overflows fp16 (past ~11.1), so a softmax that skips the max fails here.
    + [dict(dtype="fp16", B=1, Hq=4, Hkv=2, S=33, D=64, lse=True, qscale=8)]
    + [dict(dtype="bf16", B=2, Hq=8, Hkv=2, S=s, D=64, lse=True) for s in (17, 300)]
    # Tile residues (S % 16, S % 64 in {0, 1, 2, tile - 1}) and lengths past the split-KV
    # threshold (a merge of partial results), GQA packed in one tile.
    + [dict(dtype="fp16", B=1, Hq=4, Hkv=1, S=s, D=64, lse=True) for s in TILE_RESIDUES + SPLIT_LENGTHS]
    # Every pair of: a softmax scale (default, hot, negative, zero), a single key / a ragged tile
    # / one key past the split threshold (the split-KV path), a legal view (K/V a window of a longer
    # cache, q/k/v of fused BSHD projections, padded rows), a value distribution, a GQA group
    # (non-power-of-two included), the batch and the LSE on or off (attnsuite/pairwise.py).
    + PAIRWISE
    # Value distributions over several tiles and splits.
    + [dict(dtype="fp16", B=1, Hq=4, Hkv=2, S=600, D=64, lse=True, vals=vl) for vl in VALUES]
    # GQA groups that are not powers of two (packing a group's heads into one tile); G = 7 past
    # the split threshold.
    + [dict(dtype="fp16", B=b, Hq=hq, Hkv=hkv, S=s, D=64, lse=True)
       for b, hq, hkv, s in ((2, 6, 2, 65), (1, 5, 1, 33), (1, 12, 2, 17), (1, 7, 1, 600))]
    # Score ranges at the edges of the exponent and zero vectors (cases/_dims.py, EXTREMES),
    # over two splits.
    + [dict(dtype="fp16", B=2, Hq=4, Hkv=2, S=600, D=64, lse=True, vals=vl) for vl in EXTREMES]
    # Softmax scales other than 1/sqrt(D), with the distributions that stress the exponent.
    + [dict(dtype="fp16", B=1, Hq=4, Hkv=2, S=s, D=d, lse=True, vals=vl, scale=sc)
       for sc, vl, s, d in (("mla", "large", 130, 128), ("hot", "late", 600, 64), ("one", "pm80", 65, 64))]
    # Partial LSEs of the split-KV merge below fp32's subnormals (cases/_dims.py, SPLIT_EXTREME), over 2 splits.
    + [dict(dtype="fp16", B=2, Hq=4, Hkv=2, S=600, D=64, lse=True, vals=SPLIT_EXTREME)]
)

FULL = [
    dict(dtype=p["dtype"], B=2, Hq=2 * p["G"], Hkv=2, S=p["S"], D=p["D"], lse=True)
    for p in grid(dtype=("fp16", "bf16"), G=(1, 4, 8), S=(1, 17, 300, 1024, 4097), D=(64, 128, 256))
] + [
    dict(dtype=dt, B=2, Hq=8, Hkv=2, S=s, D=128, lse=True, view=vw, vals=vl)
    for dt in ("fp16", "bf16") for s in (1025, 8191)
    for vw, vl in [(v, RANDN) for v in DENSE_VIEWS] + [(CONTIG, v) for v in VALUES]
]

BENCH = (
    # The origin's decode bench: q [8, 64, 1, 64], k [8, 16, 1024, 64].
    [dict(dtype=dt, B=8, Hq=64, Hkv=16, S=1024, D=64, lse=False) for dt in ("fp16", "bf16")]
    # Long context: B=1, Hq=32, Hkv=8, S=32000, D=128.
    + [dict(dtype=dt, B=1, Hq=32, Hkv=8, S=32000, D=128, lse=True) for dt in ("fp16", "bf16")]
)

# Latency against context length (the report's decode chart).
CONTEXT_SWEEP = [dict(dtype="fp16", B=1, Hq=32, Hkv=8, S=2**e, D=128, lse=False) for e in range(10, 18)]


class Decode(Family):
    name = "decode"
    interface = Interface(
        ("q", "k", "v"), ATTENTION_KEYWORDS, "(o [B, Hq, 1, D], lse [B, Hq, 1] fp32 or None)",
        arguments=("q  [B, Hq, 1, D]  fp16 | bf16", "k, v  [B, Hkv, S, D]  q's dtype, possibly views of a "
                   "longer cache (stride(-1) == 1); Hq % Hkv == 0"),
        notes=SCALE_NOTE)
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"])
                   + make_cases(name, label, CONTEXT_SWEEP, profile="full", tags=["sweep", "context"]))
    impls = {"triton": decode, **implementations("decode")}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        Hq, Hkv = draw_heads(rng)
        return dict(dtype=draw_dtype(rng), B=rng.randint(1, 3), Hq=Hq, Hkv=Hkv, S=draw_length(rng, 1200),
                    D=draw_head_dim(rng), lse=rng.random() < 0.7, view=draw_view(rng, DENSE_VIEWS),
                    vals=draw_vals(rng))

    def fuzz_classes(self, params, rng):
        return draw_classes(rng, params, gqa=True)

    def make_inputs(self, case, gen, device=None):
        inputs = qkv(gen, case["B"], case["Hq"], case["Hkv"], 1, case["S"], case["D"], case.dtype, device)
        if case.params.get("qscale"):  # large logits: q scaled (exactly, a power of two)
            inputs["q"] = inputs["q"] * case["qscale"]
        q, k, v = dense_values(case.params.get("vals", RANDN), inputs["q"], inputs["k"], inputs["v"],
                               scale=effective_scale(case, case["D"]))
        q, k, v = dense_views(case.params.get("view", CONTIG), q, k, v)
        return {"q": q, "k": k, "v": v}

    def output_specs(self, case, inputs):
        B, Hq, _, D = inputs["q"].shape
        return attention_outputs(case, (B, Hq, 1, D), (B, Hq, 1))

    def call(self, impl, case, inputs, outputs):
        o, lse = impl(inputs["q"], inputs["k"], inputs["v"], scale=case_scale(case), return_lse=case["lse"],
                      out=outputs["o"], lse=outputs.get("lse"))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        o, lse = decode_reference(inputs["q"], inputs["k"], inputs["v"], scale=case_scale(case),
                                  compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        return score_bound(inputs["q"], inputs["k"], effective_scale(case, case["D"]))

    def vendor_problem(self, case, inputs):
        return {"q": inputs["q"], "k": inputs["k"], "v": inputs["v"], "causal": False}

    def work(self, case, inputs):
        return {"bytes": sum(inputs[n].numel() * inputs[n].element_size() for n in ("q", "k", "v"))
                + inputs["q"].numel() * inputs["q"].element_size()}

    def sweep(self, case):
        if "context" in case.tags:
            return {"name": "context", "series": f"{case['dtype']} Hq{case['Hq']} Hkv{case['Hkv']} D{case['D']}",
                    "x": case["S"]}
        return None


FAMILY = Decode()
