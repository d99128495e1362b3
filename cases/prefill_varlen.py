"""Variable-length prefill (docs/contract.md section 2), one family with a ``layout`` parameter:
"padded" (q [B, Hq, S, D] + lengths [B]) and "packed" (q [T, Hq, D] + cu_seqlens [B+1]).

Both layouts are built from one set of per-sequence tensors (drawn padded, positions past a
sequence's length filled with noise that the kernel must ignore). Consistency cases: ``vs="prefill"``
(all lengths equal S: the reference is dense prefill on the padded tensors) and ``vs="padded"``
(a packed case whose reference is the padded reference on the same sequences, repacked).
"""
from __future__ import annotations

import torch

from attnsuite.case import grid, make_cases, unique
from attnsuite.ecosystem import implementations
from attnsuite.pairwise import pairwise
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface
from kernels.prefill_varlen import prefill_packed, prefill_padded
from references.attention import prefill_reference
from references.varlen import (padded_to_packed, prefill_packed_reference, prefill_padded_reference)

from ._attention import attention_outputs, lse_if, qkv, score_bound
from ._dims import (CONTIG, DENSE_VIEWS, EXTREMES, LONG_RESIDUES, RANDN, SIGNED_SCALES, TILE_RESIDUES, VALUES,
                    case_scale, dense_values, dense_views, dims_label, draw_classes, draw_dtype, draw_head_dim,
                    draw_heads, draw_length, draw_vals, draw_view, effective_scale, fused_rows, pairwise_legal, row_pad)

#: Views of the packed layout: q/k/v head slices of one fused [T, Hq + 2 Hkv, D] projection, and
#: rows wider than D. The padded layout takes the dense families' views.
PACKED_VIEWS = ("fused", "rowpad")


def label(p) -> str:
    lengths = "_".join(map(str, p["lengths"]))
    mask = "causal" if p["causal"] else "noncausal"
    vs = f"-vs_{p['vs']}" if p.get("vs") else ""
    return (f"{p['dtype']}-{p['layout']}-B{len(p['lengths'])}-Hq{p['Hq']}-Hkv{p['Hkv']}-S{p['S']}-"
            f"L{lengths}-D{p['D']}-{mask}{'-lse' if p['lse'] else ''}{vs}{dims_label(p)}")


def case(layout="padded", lengths=(1, 64, 17), dtype="fp16", Hkv=2, G=4, D=64, causal=True, lse=True,
         S=None, vs=None, view=CONTIG, vals=RANDN, scale=None):
    lengths = tuple(int(n) for n in lengths)
    return dict(dtype=dtype, layout=layout, lengths=lengths, S=S or max(lengths), Hq=Hkv * G, Hkv=Hkv,
                D=D, causal=causal, lse=lse, vs=vs, view=view, vals=vals, scale=scale)


def views_of(layout):
    return DENSE_VIEWS if layout == "padded" else PACKED_VIEWS


#: Every pair of: a softmax scale, a layout, a legal view of it (the contiguous inputs meet every
#: other factor in the hand-picked cases), a batch of lengths (one-token sequences included), the
#: mask, a value distribution, a GQA group (non-powers of two) and the LSE on or off.
PAIRWISE = [case(layout=r["layout"], lengths=r["lengths"], Hkv=r["heads"][0], G=r["heads"][1], causal=r["causal"],
                 lse=r["lse"], view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "view": DENSE_VIEWS,
                               "layout": ("padded", "packed"), "vals": (RANDN, "large", "pm80"),
                               "lengths": ((1, 9), (17, 1, 5), (65, 30)), "causal": (True, False),
                               "heads": ((2, 3), (1, 5), (1, 7)), "lse": (True, False)},
                              lambda r: pairwise_legal(r) and not (r.get("view") == "kvslice"
                                                                    and r.get("layout") == "packed"))]


QUICK = (
    # Lengths of 1, equal to S, and a spread, both masks, both layouts, GQA 4 with LSE.
    [case(layout=lay, causal=c) for lay in ("padded", "packed") for c in (True, False)]
    # GQA 1, the no-LSE path, a padded S larger than every length.
    + [case(layout=lay, lengths=(64, 1, 30), G=1, causal=False, lse=False) for lay in ("padded", "packed")]
    + [case(lengths=(9, 2), S=40, G=1)]
    # Sequences longer than one interpreter tile (128): several query tiles and KV steps.
    + [case(layout=lay, lengths=(150, 3), Hkv=1, G=1, causal=c) for lay, c in (("padded", True), ("packed", False))]
    # D 128, and a zero-length sequence in the packed layout (cu_seqlens repeats a value).
    + [case(layout=lay, lengths=(33, 5), Hkv=1, D=128) for lay in ("padded", "packed")]
    + [case(layout="packed", lengths=(17, 0, 9), causal=False)]
    # bf16: on cpu these meet the interpreter's bf16 tl.dot failure (cases/known_failures.toml).
    + [case(layout=lay, dtype="bf16", lengths=(17, 5)) for lay in ("padded", "packed")]
    # Consistency: equal lengths == dense prefill; packed == padded on the same sequences.
    + [case(layout=lay, lengths=(40, 40), causal=c, vs="prefill")
       for lay, c in (("padded", True), ("padded", False), ("packed", True))]
    + [case(layout="packed", lengths=(1, 50, 23), causal=c, G=g, vs="padded")
       for c, g in ((True, 4), (False, 1))]
    # Tile residues: one batch whose lengths leave S % 16 and S % 64 in {0, 1, 2, tile - 1},
    # and one past a 128 tile (S % 128 in {127, 1, 2}); both layouts, both masks.
    + [case(layout=lay, lengths=lens, Hkv=1, G=2, causal=c)
       for lens, lay, c in ((TILE_RESIDUES, "padded", True), (TILE_RESIDUES, "packed", False),
                            (LONG_RESIDUES, "packed", True), (LONG_RESIDUES, "padded", False))]
    # Value distributions; the late keys are the last quarter of each sequence.
    # (cancel: non-causal, two long sequences, so every row sees both halves of many tiles)
    + [case(layout=lay, lengths=lens, Hkv=1, G=1, causal=c, vals=vl)
       for vl, lay, lens, c in zip(VALUES, ("padded", "packed", "padded", "packed"),
                                   ((300, 40), (640, 500), (300, 40), (300, 40)), (True, False, False, True))]
    # Score ranges at the edges of the exponent and zero vectors; padded rows past each length.
    + [case(layout=lay, lengths=(70, 20), S=S, Hkv=1, G=2, causal=c, vals=vl)
       for vl, lay, S, c in zip(EXTREMES, ("padded", "packed", "padded"), (80, None, 75), (True, False, False))]
    # Every pair of scale x layout x view x lengths x mask x values x GQA group x LSE (PAIRWISE):
    # negative and zero scales meet one-token sequences, every view and the extreme score ranges.
    + PAIRWISE
    # A negative scale over large logits (cases/_dims.py, SIGNED_SCALES; porting_notes.md names it),
    # MLA's scale and no scaling over the distributions that stress the exponent.
    # (GQA 6: the pairwise groups are 3, 5 and 7.)
    + [case(layout=lay, lengths=lens, Hkv=1, G=g, causal=c, vals=vl, scale=sc)
       for sc, vl, lay, lens, g, c in (SIGNED_SCALES[0] + ("packed", (65, 30), 2, True),
                                       ("mla", "late", "padded", (150, 3), 2, False),
                                       ("one", "pm80", "packed", (1, 40), 6, True))]
)

_SWEEP_LENGTHS = (1, 300, 1000, 77)
FULL = (
    [case(layout=p["layout"], lengths=_SWEEP_LENGTHS, dtype=p["dtype"], Hkv=2, G=p["G"], D=p["D"],
          causal=p["causal"])
     for p in grid(dtype=("fp16", "bf16"), layout=("padded", "packed"), G=(1, 4, 8), D=(64, 128, 256),
                   causal=(True, False))]
    + [case(layout="packed", lengths=(1000, 1000), dtype=dt, D=128, vs=vs)
       for dt in ("fp16", "bf16") for vs in ("prefill", "padded")]
    + [case(layout=lay, lengths=lens, Hkv=1, G=2, causal=c)
       for lens in (TILE_RESIDUES, LONG_RESIDUES) for lay in ("padded", "packed") for c in (True, False)]
    + [case(layout=lay, lengths=(255, 256, 257, 258, 1023, 1025), dtype=dt, D=128, causal=c)
       for dt in ("fp16", "bf16") for lay in ("padded", "packed") for c in (True, False)]
    + [case(layout=lay, lengths=(1000, 333, 1), dtype=dt, D=128, causal=c, view=vw, vals=vl)
       for dt in ("fp16", "bf16") for lay in ("padded", "packed") for c in (True, False)
       for vw, vl in [(v, RANDN) for v in views_of(lay)] + [(CONTIG, v) for v in VALUES]]
)

# As prefill's bench (B=8, Hkv=16, G=4, S=1024, D=64, causal) with lengths drawn from [1, 1024],
# the first 1024. Drawn once (torch.randint(1, 1025, (7,), generator=manual_seed(2))) and written
# out, so the bench label never depends on an RNG implementation.
BENCH_LENGTHS = (1024, 169, 528, 494, 585, 535, 300, 467)
BENCH = [case(lengths=BENCH_LENGTHS, dtype=dt, Hkv=16, G=4, D=64, causal=True, lse=lse, S=1024)
         for dt in ("fp16", "bf16") for lse in (False, True)]
# The same sequences packed (tokens of all sequences in one [T, H, D] tensor): the layout serving
# stacks pass; timed against the same dense padded SDPA.
BENCH += [case(layout="packed", lengths=BENCH_LENGTHS, dtype=dt, Hkv=16, G=4, D=64, causal=True,
               lse=lse, S=1024) for dt in ("fp16", "bf16") for lse in (False, True)]


def cu_seqlens(lengths) -> torch.Tensor:
    cu = torch.zeros(len(lengths) + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(lengths, dtype=torch.int32), 0)
    return cu


def prefill_varlen(q, k, v, seq, *, check_indices=True, **kw):
    """The family's impl: ``prefill_padded`` when q is [B, Hq, S, D] (seq = lengths),
    ``prefill_packed`` when q is [T, Hq, D] (seq = cu_seqlens). ``check_indices`` is passed on
    (the benchmarks time the call without the data checks, as for the other families)."""
    fn = prefill_padded if q.dim() == 4 else prefill_packed
    return fn(q, k, v, seq, check_indices=check_indices, **kw)


class PrefillVarlen(Family):
    name = "prefill_varlen"
    interface = Interface(
        ("q", "k", "v", "seq"), ("causal", *ATTENTION_KEYWORDS), "(o, lse fp32 or None)",
        arguments=("padded: q [B, Hq, S, D], k/v [B, Hkv, S, D], seq = lengths [B] int32 (1 <= len <= S); "
                   "query rows >= len are written as zeros, keys >= len are masked",
                   "packed: q [T, Hq, D], k/v [T, Hkv, D] (possibly views of one fused QKV tensor), "
                   "seq = cu_seqlens [B + 1] int32 (exclusive prefix sums); causal within each sequence",
                   "out like q; lse [B, Hq, S] (padded) or [T, Hq] (packed) fp32"),
        notes=f"{SCALE_NOTE}; fp16 | bf16")
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": prefill_varlen, **implementations("prefill_varlen")}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        layout = rng.choice(("padded", "packed"))
        Hq, Hkv = draw_heads(rng)
        D = draw_head_dim(rng)
        # Packed sequences may be empty (cu_seqlens repeats a value); padded ones hold >= 1 token.
        lo = 0 if layout == "packed" and rng.random() < 0.3 else 1
        lengths = tuple(draw_length(rng, 260 if D < 256 else 130, lo=lo) for _ in range(rng.randint(1, 3)))
        if max(lengths) == 0:
            lengths = (*lengths[:-1], 1)
        S = max(lengths) + (rng.randint(0, 20) if layout == "padded" and rng.random() < 0.3 else 0)
        return dict(dtype=draw_dtype(rng), layout=layout, lengths=lengths, S=S, Hq=Hq, Hkv=Hkv, D=D,
                    causal=rng.random() < 0.5, lse=rng.random() < 0.7, vs=None,
                    view=draw_view(rng, views_of(layout)), vals=draw_vals(rng))

    def fuzz_classes(self, params, rng):
        return draw_classes(rng, params, gqa=True)

    def make_inputs(self, case, gen, device=None):
        lengths = case["lengths"]
        dense = qkv(gen, len(lengths), case["Hq"], case["Hkv"], case["S"], case["S"], case["D"], case.dtype,
                    device)
        lens = torch.tensor(lengths, dtype=torch.int32)
        view = case.params.get("view", CONTIG)
        q, k, v = dense_values(case.params.get("vals", RANDN), dense["q"], dense["k"], dense["v"], lens,
                               scale=effective_scale(case, case["D"]))
        dense = {"q": q, "k": k, "v": v}
        if case["layout"] == "padded":
            q, k, v = dense_views(view, q, k, v)
            return {"q": q, "k": k, "v": v, "lengths": lens}
        packed = {name: padded_to_packed(t, lengths).contiguous() for name, t in dense.items()}
        if view == "fused":
            packed["q"], packed["k"], packed["v"] = fused_rows(packed["q"], packed["k"], packed["v"])
        elif view == "rowpad":
            packed = {name: row_pad(t) for name, t in packed.items()}
        packed["cu_seqlens"] = cu_seqlens(lengths)
        if case["vs"]:
            packed.update({f"{name}_padded": t for name, t in dense.items()}, lengths=lens)
        return packed

    def output_specs(self, case, inputs):
        q = inputs["q"]
        if case["layout"] == "padded":
            B, Hq, S, D = q.shape
            return attention_outputs(case, (B, Hq, S, D), (B, Hq, S))
        T, Hq, D = q.shape
        return attention_outputs(case, (T, Hq, D), (T, Hq))

    def call(self, impl, case, inputs, outputs):
        seq = inputs["lengths"] if case["layout"] == "padded" else inputs["cu_seqlens"]
        o, lse = impl(inputs["q"], inputs["k"], inputs["v"], seq, causal=case["causal"],
                      scale=case_scale(case), return_lse=case["lse"], out=outputs["o"], lse=outputs.get("lse"))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        causal, layout, vs = case["causal"], case["layout"], case["vs"]
        if layout == "padded":
            if vs == "prefill":
                o, lse = prefill_reference(inputs["q"], inputs["k"], inputs["v"], causal=causal, scale=case_scale(case),
                                           compute_dtype=compute_dtype)
            else:
                o, lse = prefill_padded_reference(inputs["q"], inputs["k"], inputs["v"], inputs["lengths"],
                                                  causal=causal, scale=case_scale(case), compute_dtype=compute_dtype)
            return lse_if(case, o, lse)
        if vs:
            ref = prefill_reference if vs == "prefill" else prefill_padded_reference
            extra = () if vs == "prefill" else (inputs["lengths"],)
            o, lse = ref(inputs["q_padded"], inputs["k_padded"], inputs["v_padded"], *extra, causal=causal,
                         scale=case_scale(case), compute_dtype=compute_dtype)
            lengths = case["lengths"]
            return lse_if(case, padded_to_packed(o, lengths), padded_to_packed(lse[..., None], lengths)[..., 0])
        o, lse = prefill_packed_reference(inputs["q"], inputs["k"], inputs["v"], inputs["cu_seqlens"],
                                          causal=causal, scale=case_scale(case), compute_dtype=compute_dtype)
        return lse_if(case, o, lse)
    def score_bound(self, case, inputs):
        return score_bound(inputs["q"], inputs["k"], effective_scale(case, case["D"]))

    def vendor_problem(self, case, inputs):
        """SDPA over the padded batch [B, H, max length, D] (padding computed, not skipped)."""
        B, S, D = len(case["lengths"]), case["S"], case["D"]
        dev, dt = inputs["q"].device, inputs["q"].dtype
        q = torch.randn((B, case["Hq"], S, D), dtype=dt, device=dev)
        k = torch.randn((B, case["Hkv"], S, D), dtype=dt, device=dev)
        return {"q": q, "k": k, "v": torch.randn_like(k), "causal": case["causal"],
                "note": "SDPA over the padded batch: padding computed, not skipped"}

    def work(self, case, inputs):
        per_seq = sum(n * n for n in case["lengths"]) * (0.5 if case["causal"] else 1.0)
        return {"flops": 4 * case["Hq"] * case["D"] * per_seq}


FAMILY = PrefillVarlen()
