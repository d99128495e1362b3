"""Paged decode (docs/contract.md section 4): one query token per sequence over a FlashInfer-style
paged KV cache (HND or NHD), with a CSR page table and last_page_len."""
from __future__ import annotations

import functools
import inspect

import torch

from attnsuite.case import make_cases, unique
from attnsuite.ecosystem import implementations
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface, Unsupported
from attnsuite.pairwise import pairwise
from kernels.decode import decode as contiguous_decode
from kernels.paged_decode import paged_decode
from references.attention import decode_reference
from references.paged import paged_decode_reference

from . import _paged
from ._attention import attention_outputs, dense_stand_in, lse_if, qkv, randn, score_bound
from ._dims import (CONTIG, EXTREMES, RANDN, SIGNED_SCALES, SPLIT_EXTREME, VALUES, case_scale, dims_label, draw_classes,
                    draw_dtype, draw_head_dim, draw_heads, draw_vals, draw_view, effective_scale, paged_values,
                    pairwise_legal, pairwise_shares_pages)
from ._paged import PAGED_VIEWS, draw_page_table, paged_views



def label(p) -> str:
    lengths = "_".join(map(str, p["lengths"]))
    vs = f"-vs_{p['vs']}" if p.get("vs") else ""
    return (f"{p['dtype']}-{p['layout']}-P{p['P']}-{p['placement']}-L{lengths}-"
            f"Hq{p['Hq']}-Hkv{p['Hkv']}-D{p['D']}{'-lse' if p['lse'] else ''}{vs}{dims_label(p)}"
            f"{fp8_label(p)}")


def case(dtype="fp16", layout="HND", P=16, placement="shuffled", lengths=(1, 16, 40), Hq=8, Hkv=2, D=64,
         lse=True, vs=None, pool=None, view=CONTIG, vals=RANDN, scale=None):
    return dict(dtype=dtype, layout=layout, P=P, placement=placement, lengths=tuple(lengths), Hq=Hq,
                Hkv=Hkv, D=D, lse=lse, vs=vs, pool=pool, view=view, vals=vals, scale=scale,
                kv=None)  # a 16-bit cache; fp8_case sets "fp8" (the ledger's fp8 entries key on it)


#: Every pair of: a softmax scale, a layout, a legal view of the cache (the contiguous cache meets
#: every other factor in the hand-picked cases), a page size (non-powers of two included), a
#: placement (shared pages included), lengths (a one-token sequence; past the split threshold), a
#: value distribution, a GQA group (non-powers of two) and the LSE on or off.
PAIRWISE = [case(layout=r["layout"], P=r["P"], placement=r["placement"], lengths=r["lengths"], Hq=r["heads"][0],
                 Hkv=r["heads"][1], lse=r["lse"], view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "layout": ("HND", "NHD"), "view": PAGED_VIEWS,
                               "P": (16, 12, 48), "placement": ("shuffled", "scattered", _paged.SHARED),
                               "lengths": ((1, 9), (40, 0, 17), (513,)), "vals": (RANDN, "large", "pm80"),
                               "heads": ((6, 2), (5, 1), (7, 1)), "lse": (True, False)},
                              # (the split-crossing list, the costliest rows, over one KV head: the
                              # hand-picked cases cross the split with two)
                              lambda r: pairwise_legal(r) and pairwise_shares_pages(r)
                              and not (r.get("lengths") == (513,) and r.get("heads", (0, 1))[1] > 1))]

QUICK = (
    # Page sizes with one-page and many-page sequences, last_page_len 1 and page_size.
    [case(P=1, lengths=(1, 7)), case(P=16, lengths=(1, 16, 40)), case(P=64, lengths=(64, 130)),
     case(P=256, lengths=(3, 256), Hq=4, Hkv=4)]
    # Both layouts with pages in sequence order (PAIRWISE crosses them with the other placements).
    + [case(layout=lay, placement="ordered", lengths=(17, 48)) for lay in ("HND", "NHD")]
    # A batch with no page at all (found by the fuzz profile: kv_page_indices is empty); PAIRWISE
    # has a zero-page sequence between normal ones.
    + [case(lengths=(0, 0))]
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
    # Value distributions; the late keys are each sequence's last quarter.
    # (cancel: one long sequence, many tiles, every output near 0)
    + [case(P=64, lengths=(640,) if vl == "cancel" else (300, 90), Hq=4, Hkv=2, vals=vl) for vl in VALUES]
    # Page sizes that are not powers of two (a page / slot computed with shifts and masks passes
    # every power-of-two case) over many pages, and GQA groups that are not powers of two, are
    # crossed in PAIRWISE; GQA 6 here.
    + [case(P=16, lengths=(40, 17), Hq=12, Hkv=2)]
    # Score ranges at the edges of the exponent and zero vectors (cases/_dims.py, EXTREMES).
    + [case(P=16, lengths=(100, 37), Hq=4, Hkv=2, vals=vl) for vl in EXTREMES]
    # Every pair of scale x layout x view x page size x placement x lengths x values x GQA group x
    # LSE (PAIRWISE): negative and zero scales meet a one-token sequence, NHD, every view, shared
    # pages and the split-KV path.
    + PAIRWISE
    # MLA's scale, no scaling and a negative scale over the distributions that stress the exponent
    # (cases/_dims.py, SIGNED_SCALES).
    + [case(P=16, lengths=(100, 37), Hq=4, Hkv=2, vals=vl, scale=sc)
       for sc, vl in (("mla", "late"), ("one", "pm80"), SIGNED_SCALES[0])]
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
# Paged against our contiguous decode at equal lengths (the benchmark target: <= 1.1x, docs/benchmarks.md), on decode's two
# bench shapes, pages of 16 and 256 tokens, shuffled.
VS_DECODE_BENCH = [case(P=P, lengths=(L,) * B, Hq=Hq, Hkv=Hkv, D=D, lse=False, vs="decode")
                   for B, Hq, Hkv, L, D in ((8, 64, 16, 1024, 64), (1, 32, 8, 32000, 128))
                   for P in (16, 256)]


# --- FP8 KV caches (kernels.md section 11) ---------------------------------------------------------
# A case with ``kv="fp8"`` has a torch.float8_e4m3fn cache (q in ``dtype``) and per-tensor scales
# ``k_scale``/``v_scale``; ``fp8vals`` picks a value class of e4m3 itself: "max" (many values at
# +-448, the largest finite magnitude), "sub" (every value in the subnormal range, m * 2^-9).
# The unused slots of pages hold e4m3's NaN encodings (cases/_paged.fill_fp8_nan). Cases without
# these keys keep their ids.

FP8_CLASSES = ("max", "sub")
#: Scales of an fp8 case: 1, the spec's far-from-1 pair, and calibration-like odd values.
FP8_SCALES = ((1.0, 1.0), (1 / 64, 8.0), (8.0, 1 / 64), (0.37, 3.3))


def fp8_label(p) -> str:
    if p.get("kv") != "fp8":
        return ""
    return (f"-kv_fp8-kscale{p['k_scale']:g}-vscale{p['v_scale']:g}"
            + (f"-{p['fp8vals']}" if p.get("fp8vals") else ""))


def fp8_case(k_scale=1.0, v_scale=1.0, fp8vals=None, **kw):
    return dict(case(**kw), kv="fp8", k_scale=k_scale, v_scale=v_scale, fp8vals=fp8vals)


def is_fp8(case) -> bool:
    return getattr(case, "params", case).get("kv") == "fp8"


def fp8_class_values(cls: str, x: torch.Tensor, part: int) -> torch.Tensor:
    """fp32 values of class ``cls`` made from standard-normal draws ``x``; ``part`` 0 = K, 1 = V.
    "max": |x| > 0.8 (about 40%) becomes +-448, the rest x * 100 (e4m3's normal range);
    "sub": x * 2^-8 clipped to the largest subnormal (7 * 2^-9), V nonnegative so that its
    weighted mean (the output) is not near 0 and a decode that flushes subnormals shows."""
    if cls == "max":
        return torch.where(x.abs() > 0.8, 448.0 * x.sign(), x * 100)
    if cls == "sub":
        top = 7 * 2.0**-9
        y = (x.abs() if part == 1 else x) * 2.0**-8
        return y.clamp(-top, top)
    raise ValueError(f"unknown fp8 value class {cls!r}")


def fp8_values(cls: str, cache: torch.Tensor, layout: str) -> torch.Tensor:
    """The fp8 ``cache`` with its numbers (not its NaN slots) replaced by class ``cls``, drawn
    from the cache's own values (already standard-normal draws rounded to e4m3)."""
    raw = cache.view(torch.uint8)
    nan_slot = (raw & 0x7F) == 0x7F
    x = cache.float()
    hnd = _paged.token_view(x, layout)
    new = torch.stack([fp8_class_values(cls, hnd[:, i], i) for i in (0, 1)], 1)
    new = new if layout == "HND" else new.transpose(2, 3)
    out = torch.where(nan_slot, raw, new.to(_paged.FP8).view(torch.uint8))
    return out.view(_paged.FP8)


FP8_QUICK = (
    # Scales 1 and far from 1, both layouts, page sizes 1, 16, 64 (and 12), q in fp16 and bf16.
    [fp8_case(lengths=(1, 16, 40)),
     fp8_case(layout="NHD", placement="scattered", lengths=(17, 48), k_scale=1 / 64, v_scale=8.0),
     fp8_case(P=1, layout="NHD", lengths=(1, 7), k_scale=8.0, v_scale=1 / 64),
     fp8_case(P=12, lengths=(0, 25, 100), Hq=6, Hkv=2, k_scale=0.37, v_scale=3.3),
     fp8_case(dtype="bf16", lengths=(17, 48), k_scale=1 / 64, v_scale=8.0)]
    # e4m3's largest magnitude and its subnormal range; a page of 256 mostly unused (NaN slots).
    + [fp8_case(P=64, lengths=(64, 130), Hq=4, Hkv=2, fp8vals="max", k_scale=1 / 64, v_scale=1 / 64),
       fp8_case(P=16, layout="NHD", lengths=(40, 9), Hq=4, Hkv=1, fp8vals="sub", k_scale=8.0, v_scale=8.0),
       fp8_case(P=256, lengths=(3, 256), Hq=4, Hkv=4, fp8vals="max", k_scale=1.0, v_scale=1.0)]
    # Past the split threshold (512 tokens): v_scale and the split merge together.
    + [fp8_case(P=64, layout="NHD", lengths=(700, 65), Hq=4, Hkv=1, lse=False, k_scale=1 / 64, v_scale=8.0)]
)

FP8_FULL = (
    [fp8_case(dtype=dt, layout=lay, P=P, placement=pl, lengths=lens, Hq=Hkv * G, Hkv=Hkv, D=D,
              k_scale=ks, v_scale=vs, fp8vals=cls)
     for dt in ("fp16", "bf16") for lay in ("HND", "NHD")
     for P, lens in ((1, (1, 300)), (16, (1, 16, 1000)), (64, (64, 4000, 0)), (256, (256, 3000, 1)))
     for pl, (Hkv, G), D in (("shuffled", (2, 4), 128), ("scattered", (1, 8), 64))
     for (ks, vs), cls in zip(FP8_SCALES, (None, "max", "sub", None))]
    + [fp8_case(dtype=dt, P=16, lengths=(40, 17), view=vw) for dt in ("fp16", "bf16") for vw in _paged.PAGED_VIEWS]
)

# fp8 against the same shape with a 16-bit cache (performance.md: >= 1.7x faster at >= 8k
# tokens); the 16-bit cache's run is the "cache_<dtype>" extra baseline.
FP8_BENCH = ([fp8_case(dtype=dt, P=256, placement="scattered", pool=1024, lengths=BENCH_LENGTHS, Hq=32, Hkv=8,
                       D=256, lse=False, k_scale=0.37, v_scale=3.3) for dt in ("fp16", "bf16")]
             + [fp8_case(dtype=dt, P=16, lengths=(L,) * B, Hq=32, Hkv=8, D=128, lse=False, k_scale=0.37, v_scale=3.3)
                for dt in ("fp16", "bf16") for B, L in ((32, 8192), (4, 32768))])


def fp8_inputs(case, gen, device=None) -> dict:
    lengths, P = case["lengths"], case["P"]
    indptr, indices, last, num_pages = _paged.page_table(gen, lengths, P, case["placement"], case["pool"])
    cache = _paged.paged_cache(gen, lengths, P, case["Hkv"], case["D"], _paged.FP8, case["layout"],
                               indptr, indices, num_pages, device)
    if case.params.get("fp8vals"):
        cache = fp8_values(case["fp8vals"], cache, case["layout"])
    q = randn(gen, (len(lengths), case["Hq"], case["D"]), case.dtype)
    q, cache = paged_views(case.params.get("view", CONTIG), q, cache, case["layout"])
    return {"q": q, "kv_cache": cache, "kv_page_indptr": indptr, "kv_page_indices": indices,
            "kv_last_page_len": last}


def fp8_keywords(impl, case) -> dict:
    """``k_scale``/``v_scale`` for an fp8 case, {} otherwise. An implementation whose signature
    has no such keywords does not take fp8 caches: Unsupported, with that reason."""
    if not is_fp8(case):
        return {}
    try:
        takes = _takes_scales(impl)
    except TypeError:  # an unhashable callable: read its signature each time
        takes = _takes_scales.__wrapped__(impl)
    if not takes:
        raise Unsupported("fp8 KV cache: the implementation takes no k_scale/v_scale keywords")
    return {"k_scale": case["k_scale"], "v_scale": case["v_scale"]}


@functools.lru_cache(maxsize=64)
def _takes_scales(impl) -> bool:
    """Whether ``impl`` takes ``k_scale``/``v_scale`` (True when its signature cannot be read).
    Remembered per callable: reading a signature costs tens of microseconds, which the timed
    calls of the benchmarks would pay every time."""
    try:
        params = inspect.signature(impl).parameters
    except (TypeError, ValueError):
        return True
    return any(p.kind is p.VAR_KEYWORD for p in params.values()) or all(k in params for k in ("k_scale", "v_scale"))


def fp8_fuzz(params: dict, rng) -> dict:
    """About one draw in three of plain values becomes an fp8 cache (the 16-bit value classes
    are not e4m3's), with drawn scales and e4m3 value class. Drawn after everything else, so the
    other parameters stay those of the 16-bit draw."""
    fp8, scales, cls = rng.random(), rng.choice(FP8_SCALES), rng.choice((None, None) + FP8_CLASSES)
    if fp8 >= 0.35 or params.get("vals", RANDN) != RANDN:
        return params
    return dict(params, kv="fp8", k_scale=scales[0], v_scale=scales[1], fp8vals=cls)


def fp8_cache_baseline(case, inputs, impl) -> dict:
    """The same implementation over the cache dequantised into q's dtype (scales 1): the 16-bit
    run an fp8 cache is measured against."""
    q, cache = inputs["q"], inputs["kv_cache"]
    hnd = _paged.token_view(cache, case["layout"])
    parts = [hnd[:, i].to(q.dtype) * s for i, s in ((0, case["k_scale"]), (1, case["v_scale"]))]
    wide = torch.stack(parts, 1)
    wide = wide if case["layout"] == "HND" else wide.transpose(2, 3).contiguous()
    args = (q, wide, inputs["kv_page_indptr"], inputs["kv_page_indices"], inputs["kv_last_page_len"])
    name = f"cache_{case['dtype']}"
    return {name: (lambda: impl(*args, layout=case["layout"], scale=case_scale(case)),
                   f"the same implementation over the same pages in a {case['dtype']} cache")}


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
        notes=SCALE_NOTE + "; L_b = P * (pages_b - 1) + last_b; kv_cache may be float8_e4m3fn, then the call also "
              "passes k_scale=, v_scale= (fp32 per-tensor scales: K = cache.to(fp32) * k_scale); an implementation "
              "without those keywords is reported Unsupported on fp8 cases")
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"])
                   + make_cases(name, label, VS_DECODE_BENCH, profile="full", tags=["bench", "vs_decode"])
                   + make_cases(name, label, FP8_QUICK)
                   + make_cases(name, label, FP8_FULL, profile="full")
                   + make_cases(name, label, FP8_BENCH, profile="full", tags=["bench", "fp8"]))
    impls = {"triton": paged_decode, **implementations("paged_decode")}

    def label(self, params):
        return label(params)

    def fuzz_classes(self, params, rng):
        return fp8_fuzz(draw_classes(rng, params, gqa=True, pages=True), rng)

    def make_inputs(self, case, gen, device=None):
        if is_fp8(case):
            return fp8_inputs(case, gen, device)
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
                      out=outputs["o"], lse=outputs.get("lse"), **fp8_keywords(impl, case))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        if case["vs"] == "decode":
            o, lse = decode_reference(inputs["q"][:, :, None], inputs["k_dense"], inputs["v_dense"],
                                      scale=case_scale(case), compute_dtype=compute_dtype)
            return lse_if(case, o[:, :, 0], lse[:, :, 0])
        o, lse = paged_decode_reference(inputs["q"], inputs["kv_cache"], inputs["kv_page_indptr"],
                                        inputs["kv_page_indices"], inputs["kv_last_page_len"],
                                        layout=case["layout"], scale=case_scale(case),
                                        compute_dtype=compute_dtype,
                                        **({"k_scale": case["k_scale"], "v_scale": case["v_scale"]}
                                           if is_fp8(case) else {}))
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        keys = _paged.token_view(inputs["kv_cache"], case["layout"])[:, 0]
        k_scale = abs(case["k_scale"]) if is_fp8(case) else 1.0
        return score_bound(inputs["q"], keys, effective_scale(case, case["D"]) * k_scale)

    def vendor_problem(self, case, inputs):
        return dense_stand_in(inputs["q"], case["Hkv"], max(case["lengths"]),
                              "pages gathered outside the timing: SDPA over a contiguous cache of the longest sequence")

    def extra_baselines(self, case, inputs, impl):
        """At equal lengths: our contiguous decode over the same K/V, unpaged. An fp8 cache: the
        same call over a 16-bit cache."""
        if is_fp8(case):
            return fp8_cache_baseline(case, inputs, impl)
        if case["vs"] != "decode":
            return {}
        q = inputs["q"][:, :, None]
        return {"decode": (lambda: contiguous_decode(q, inputs["k_dense"], inputs["v_dense"]),
                           "kernels.decode over the same tokens, contiguous")}

    def work(self, case, inputs):
        q = inputs["q"]
        tokens = sum(case["lengths"]) * case["Hkv"]
        kv_bytes = inputs["kv_cache"].element_size()
        return {"bytes": 2 * tokens * case["D"] * kv_bytes + 2 * q.numel() * q.element_size()}


FAMILY = PagedDecode()
