"""Paged decode (kernels.md section 4): one query token per sequence over a FlashInfer-style
paged KV cache (HND or NHD), with a CSR page table and last_page_len."""
from __future__ import annotations

from attnsuite.case import make_cases, unique
from attnsuite.ecosystem import implementations
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface
from kernels.decode import decode as contiguous_decode
from kernels.paged_decode import paged_decode
from references.attention import decode_reference
from references.paged import paged_decode_reference

from . import _paged
from ._attention import attention_outputs, dense_stand_in, lse_if, qkv, randn, score_bound
from ._dims import (CONTIG, EXTREMES, RANDN, SIGNED_SCALES, SPLIT_EXTREME, VALUES, case_scale, dims_label, draw_classes,
                    draw_dtype, draw_head_dim, draw_heads, draw_vals, draw_view, effective_scale, paged_values)
from ._paged import PAGED_VIEWS, draw_page_table, paged_views



def label(p) -> str:
    lengths = "_".join(map(str, p["lengths"]))
    vs = f"-vs_{p['vs']}" if p.get("vs") else ""
    return (f"{p['dtype']}-{p['layout']}-P{p['P']}-{p['placement']}-L{lengths}-"
            f"Hq{p['Hq']}-Hkv{p['Hkv']}-D{p['D']}{'-lse' if p['lse'] else ''}{vs}{dims_label(p)}")


def case(dtype="fp16", layout="HND", P=16, placement="shuffled", lengths=(1, 16, 40), Hq=8, Hkv=2, D=64,
         lse=True, vs=None, pool=None, view=CONTIG, vals=RANDN, scale=None):
    return dict(dtype=dtype, layout=layout, P=P, placement=placement, lengths=tuple(lengths), Hq=Hq,
                Hkv=Hkv, D=D, lse=lse, vs=vs, pool=pool, view=view, vals=vals, scale=scale)


QUICK = (
    # Page sizes with one-page and many-page sequences, last_page_len 1 and page_size.
    [case(P=1, lengths=(1, 7)), case(P=16, lengths=(1, 16, 40)), case(P=64, lengths=(64, 130)),
     case(P=256, lengths=(3, 256), Hq=4, Hkv=4)]
    # Both layouts x the three placements.
    + [case(layout=lay, placement=pl, lengths=(17, 48)) for lay in ("HND", "NHD") for pl in _paged.PLACEMENTS]
    # A zero-page sequence between normal ones; a batch with no page at all (found by the fuzz
    # profile: kv_page_indices is empty).
    + [case(lengths=(0, 33, 7)), case(layout="NHD", lengths=(21, 0), placement="scattered"),
       case(lengths=(0, 0))]
    # GQA 1, 4, 8 and head dims.
    + [case(Hq=4, Hkv=4, lengths=(20, 9)), case(Hq=8, Hkv=1, lengths=(20, 9), lse=False),
       case(D=128, lengths=(33,)), case(D=256, Hq=4, Hkv=1, lengths=(18,), P=16)]
    + [case(dtype="bf16", lengths=(17, 48))]
    # Consistency: one page per sequence holding the whole sequence equals dense decode.
    + [case(P=64, lengths=(50, 50), placement="scattered", vs="decode")]
    # Several pages and a short last page at every page size past 1 (page 256: last pages of
    # 100 and 1 tokens); pages of 64 and 256 long enough to cross the split-KV threshold (512).
    + [case(P=16, lengths=(100, 37), Hq=4, Hkv=2), case(P=64, layout="NHD", lengths=(700, 65), Hq=4, Hkv=1),
       case(P=256, lengths=(356, 513), Hq=4, Hkv=2)]
    # Legal views of the cache (and q), both layouts.
    + [case(layout=lay, lengths=(40, 17), view=vw) for vw in PAGED_VIEWS for lay in ("HND", "NHD")]
    # Value distributions; the late keys are each sequence's last quarter.
    # (cancel: one long sequence, many tiles, every output near 0)
    + [case(P=64, lengths=(640,) if vl == "cancel" else (300, 90), Hq=4, Hkv=2, vals=vl) for vl in VALUES]
    # Page sizes that are not powers of two (a page / slot computed with shifts and masks passes
    # every power-of-two case), with a zero-page sequence, a short last page and many pages;
    # GQA groups that are not powers of two.
    + [case(P=12, lengths=(0, 25, 100), Hq=6, Hkv=2), case(P=48, layout="NHD", placement="scattered",
                                                          lengths=(200, 48), Hq=5, Hkv=1),
       case(P=16, lengths=(40, 17), Hq=12, Hkv=2), case(P=64, layout="NHD", lengths=(130,), Hq=7, Hkv=1)]
    # Score ranges at the edges of the exponent and zero vectors (cases/_dims.py, EXTREMES).
    + [case(P=16, lengths=(100, 37), Hq=4, Hkv=2, vals=vl) for vl in EXTREMES]
    # Softmax scales other than 1/sqrt(D), with the distributions that stress the exponent.
    + [case(P=16, lengths=(100, 37), Hq=4, Hkv=2, vals=vl, scale=sc)
       for sc, vl in (("mla", "large"), ("hot", "late"), ("one", "pm80"))]
    # Negative and zero scales (cases/_dims.py, SIGNED_SCALES): legal, and the reference takes them.
    + [case(P=16, layout=lay, lengths=(100, 37), Hq=4, Hkv=2, vals=vl, scale=sc)
       for (sc, vl), lay in zip(SIGNED_SCALES, ("NHD", "HND"))]
    # Partial LSEs of the split-KV merge below fp32's subnormals (cases/_dims.py, SPLIT_EXTREME), over 2 splits.
    + [case(P=64, lengths=(600, 90), Hq=4, Hkv=2, vals=SPLIT_EXTREME)]
    # Shared pages (a prefix cache): the sequences' first pages are the same physical pages.
    + [case(P=16, placement="shared", lengths=(100, 37, 0, 64), Hq=4, Hkv=2),
       case(P=48, layout="NHD", placement="shared", lengths=(600, 150), Hq=6, Hkv=2, vals="offset")]
    # Long reductions in low precision: one row over thousands of tokens whose running sum
    # climbs far from the output (an accumulator kept in the input dtype shows).
    + [case(dtype=dt, P=48, lengths=(2000,), Hq=2, Hkv=1, vals="cancel") for dt in ("fp16", "bf16")]
)

FULL = (
    [case(dtype=dt, layout=lay, P=P, placement=pl, lengths=lens, Hq=Hkv * G, Hkv=Hkv, D=D)
     for dt in ("fp16", "bf16") for lay in ("HND", "NHD")
     for P, lens in ((1, (1, 300)), (16, (1, 16, 1000)), (64, (64, 4000, 0)), (256, (256, 3000, 1)))
     for pl in ("shuffled", "scattered") for (Hkv, G) in ((2, 1), (2, 4), (1, 8)) for D in (64, 128, 256)
     if not (D == 256 and G == 8)]
    + [case(dtype=dt, P=P, lengths=(n, n), vs="decode", D=128) for dt in ("fp16", "bf16")
       for P, n in ((256, 256), (256, 200), (64, 37))]
    # Found by the fuzz profile (paged_decode[fuzz4.16-...]): bf16 with no page at all. On cpu it
    # passes (no tl.dot runs) where the interpreter's bf16-dot ledger entry expects a failure.
    + [case(dtype="bf16", P=1, placement="ordered", lengths=(0,), Hq=8, Hkv=2, D=128, vals="cancel")]
    + [case(dtype=dt, layout=lay, P=P, lengths=(4 * P + 1, 7 * P + P // 2 + 1, 5000), D=128, view=vw, vals=vl)
       for dt in ("fp16", "bf16") for lay in ("HND", "NHD") for P in (16, 256)
       for vw, vl in [(v, RANDN) for v in PAGED_VIEWS] + [(CONTIG, v) for v in VALUES]]
)

# The origin's bench: Hkv=8, G=4, D=256, page_size=256, 3 sequences of 270, 350, 321 pages with
# last lengths 63, 22, 55, pages shuffled in a pool of 1024.
BENCH_LENGTHS = (256 * 269 + 63, 256 * 349 + 22, 256 * 320 + 55)
BENCH = [case(dtype=dt, P=256, placement="scattered", pool=1024, lengths=BENCH_LENGTHS, Hq=32, Hkv=8, D=256,
              lse=False) for dt in ("fp16", "bf16")]
# Paged against our contiguous decode at equal lengths (performance.md: <= 1.1x), on decode's two
# bench shapes, pages of 16 and 256 tokens, shuffled.
VS_DECODE_BENCH = [case(P=P, lengths=(L,) * B, Hq=Hq, Hkv=Hkv, D=D, lse=False, vs="decode")
                   for B, Hq, Hkv, L, D in ((8, 64, 16, 1024, 64), (1, 32, 8, 32000, 128))
                   for P in (16, 256)]


class PagedDecode(Family):
    name = "paged_decode"
    interface = Interface(
        ("q", "kv_cache", "kv_page_indptr", "kv_page_indices", "kv_last_page_len"), ("layout", *ATTENTION_KEYWORDS),
        "(o [B, Hq, D], lse [B, Hq] fp32 or None)",
        arguments=("q  [B, Hq, D]  fp16 | bf16",
                   "kv_cache  [pages, 2, Hkv, P, D] (layout='HND') or [pages, 2, P, Hkv, D] ('NHD'); 0 = K, 1 = V; "
                   "possibly a slice of a larger pool",
                   "kv_page_indptr [B + 1], kv_page_indices [indptr[B]], kv_last_page_len [B] (1..P; 0 for a "
                   "sequence with no page)  int32",
                   "a sequence with no page gives o = 0, lse = -inf"),
        notes=SCALE_NOTE + "; L_b = P * (pages_b - 1) + last_b")
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"])
                   + make_cases(name, label, VS_DECODE_BENCH, profile="full", tags=["bench", "vs_decode"]))
    impls = {"triton": paged_decode, **implementations("paged_decode")}

    def label(self, params):
        return label(params)

    def fuzz_classes(self, params, rng):
        return draw_classes(rng, params, gqa=True, pages=True)

    def make_inputs(self, case, gen, device=None):
        lengths, P = case["lengths"], case["P"]
        indptr, indices, last, num_pages = _paged.page_table(gen, lengths, P, case["placement"], case["pool"],
                                                             case.params.get("pages"))
        if case["vs"] == "decode":
            dense = qkv(gen, len(lengths), case["Hq"], case["Hkv"], 1, lengths[0], case["D"], case.dtype, device)
            cache = _paged.dense_to_cache(dense["k"], dense["v"], P, case["layout"], indices, num_pages)
            return {"q": dense["q"][:, :, 0], "kv_cache": cache, "kv_page_indptr": indptr,
                    "kv_page_indices": indices, "kv_last_page_len": last, "k_dense": dense["k"],
                    "v_dense": dense["v"]}
        cache = _paged.paged_cache(gen, lengths, P, case["Hkv"], case["D"], case.dtype, case["layout"],
                                   indptr, indices, num_pages, device)
        q = randn(gen, (len(lengths), case["Hq"], case["D"]), case.dtype)
        vals = case.params.get("vals", RANDN)
        if vals != RANDN:
            positions, lens = _paged.slot_positions(indptr, indices, lengths, P, num_pages)
            q, cache = paged_values(vals, q, cache, case["layout"], positions, lens,
                                    scale=effective_scale(case, case["D"]))
        q, cache = paged_views(case.params.get("view", CONTIG), q, cache, case["layout"])
        return {"q": q, "kv_cache": cache, "kv_page_indptr": indptr, "kv_page_indices": indices,
                "kv_last_page_len": last}

    def fuzz(self, rng):
        Hq, Hkv = draw_heads(rng)
        P, placement, layout, lengths = draw_page_table(rng)
        return case(dtype=draw_dtype(rng), layout=layout, P=P, placement=placement, lengths=lengths, Hq=Hq,
                    Hkv=Hkv, D=draw_head_dim(rng), lse=rng.random() < 0.7, view=draw_view(rng, PAGED_VIEWS),
                    vals=draw_vals(rng))

    def output_specs(self, case, inputs):
        B, Hq, D = inputs["q"].shape
        return attention_outputs(case, (B, Hq, D), (B, Hq))

    def call(self, impl, case, inputs, outputs):
        o, lse = impl(inputs["q"], inputs["kv_cache"], inputs["kv_page_indptr"], inputs["kv_page_indices"],
                      inputs["kv_last_page_len"], layout=case["layout"], scale=case_scale(case), return_lse=case["lse"],
                      out=outputs["o"], lse=outputs.get("lse"))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        if case["vs"] == "decode":
            o, lse = decode_reference(inputs["q"][:, :, None], inputs["k_dense"], inputs["v_dense"],
                                      scale=case_scale(case), compute_dtype=compute_dtype)
            return lse_if(case, o[:, :, 0], lse[:, :, 0])
        o, lse = paged_decode_reference(inputs["q"], inputs["kv_cache"], inputs["kv_page_indptr"],
                                        inputs["kv_page_indices"], inputs["kv_last_page_len"],
                                        layout=case["layout"], scale=case_scale(case),
                                        compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        keys = _paged.token_view(inputs["kv_cache"], case["layout"])[:, 0]
        return score_bound(inputs["q"], keys, effective_scale(case, case["D"]))

    def vendor_problem(self, case, inputs):
        return dense_stand_in(inputs["q"], case["Hkv"], max(case["lengths"]),
                              "pages gathered outside the timing: SDPA over a contiguous cache of the longest sequence")

    def extra_baselines(self, case, inputs, impl):
        """At equal lengths: our contiguous decode over the same K/V, unpaged."""
        if case["vs"] != "decode":
            return {}
        q = inputs["q"][:, :, None]
        return {"decode": (lambda: contiguous_decode(q, inputs["k_dense"], inputs["v_dense"]),
                           "kernels.decode over the same tokens, contiguous")}

    def work(self, case, inputs):
        q = inputs["q"]
        tokens = sum(case["lengths"]) * case["Hkv"]
        return {"bytes": 2 * tokens * case["D"] * q.element_size() + 2 * q.numel() * q.element_size()}


FAMILY = PagedDecode()
