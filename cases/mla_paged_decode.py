"""MLA decode (kernels.md section 10, FP8 caches section 11): one query token per sequence, H heads
sharing one latent row per token (Dc latent + Dr rope dims) over a paged latent cache."""
from __future__ import annotations

import torch

from attnsuite.case import make_cases, unique
from attnsuite.ecosystem import implementations
from attnsuite.family import Family
from attnsuite.interfaces import OUT_KEYWORDS, Interface
from attnsuite.pairwise import pairwise
from kernels.mla_paged import mla_paged_decode
from references.mla import mla_paged_decode_reference

from . import _mla
from ._attention import attention_outputs, lse_if
from ._dims import (CONTIG, EXTREMES, RANDN, SPLIT_EXTREME, VALUES, case_scale, dims_label, draw_length, draw_vals,
                    draw_view, effective_scale, pairwise_legal, pairwise_shares_pages)
from ._paged import PLACEMENTS, SHARED

#: DeepSeek-V3's softmax scale without its YaRN factor: 1/sqrt(192) (qk_nope 128 + qk_rope 64).
DEEPSEEK_SCALE = 0.0722
MLA_NOTE = ("scale: float or None (None: 1/sqrt(Dc + Dr)); the catalogs pass 1/sqrt(192) (DeepSeek-V3), "
            "1/sqrt(1.5 (Dc + Dr)), 4/sqrt(Dc + Dr) and 1.0; k_scale / v_scale: fp32 per-tensor factors of an "
            "fp8 cache (the value used is fp8.to(fp32) * scale: k_scale for ckv and kpe in the score, v_scale "
            "for ckv in the output)")
KEYWORDS = ("scale", *OUT_KEYWORDS, "k_scale", "v_scale")


def cache_label(p) -> str:
    return "" if p.get("cache", "same") == "same" else f"-cache_{p['cache']}"


def lengths_label(lengths) -> str:
    """``a_b_c``; a batch of more than four equal lengths as ``LxB`` (the bench's 128 sequences)."""
    if len(lengths) > 4 and len(set(lengths)) == 1:
        return f"{lengths[0]}x{len(lengths)}"
    return "_".join(map(str, lengths))


def label(p) -> str:
    lengths = lengths_label(p["lengths"])
    return (f"{p['dtype']}-P{p['P']}-{p['placement']}-L{lengths}-H{p['H']}-Dc{p['Dc']}-Dr{p['Dr']}"
            f"{'-lse' if p['lse'] else ''}{cache_label(p)}{dims_label(p)}")


def case(dtype="fp16", P=16, placement="shuffled", lengths=(1, 16, 40), H=16, Dc=64, Dr=16, lse=True,
         cache="same", pool=None, view=CONTIG, vals=RANDN, scale=None):
    return dict(dtype=dtype, P=P, placement=placement, lengths=tuple(lengths), H=H, Dc=Dc, Dr=Dr, lse=lse,
                cache=cache, pool=pool, view=view, vals=vals, scale=scale)


#: Every pair of: a softmax scale, a legal view (the contiguous buffers meet every other factor in
#: the hand-picked cases), a page size (non-powers of two included), a placement (shared pages
#: included), lengths (a one-token sequence; past a 128-token tile: the split path, which costs the
#: interpreter the most, is the hand-picked case of 600 tokens), the heads, a value
#: distribution and the LSE on or off.
PAIRWISE = [case(P=r["P"], placement=r["placement"], lengths=r["lengths"], H=r["H"], lse=r["lse"], view=r["view"],
                 vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "view": _mla.MLA_VIEWS, "P": (16, 12, 48),
                               "placement": ("shuffled", "scattered", SHARED),
                               "lengths": ((1, 9), (40, 0, 17), (130, 33)), "H": (4, 16, 1),
                               "vals": (RANDN, "large", "pm80"), "lse": (True, False)},
                              # (pm80 alternates rows over sequences and heads: with one head, the even sequences)
                              lambda r: pairwise_legal(r) and not (r.get("vals") == "pm80" and r.get("H") == 1)
                              and pairwise_shares_pages(r))]

QUICK = (
    # Page sizes 1, 16, 64 and not powers of two (12, 48); one-page and many-page sequences, last
    # pages of 1 and of P; an empty sequence between others.
    [case(P=1, lengths=(1, 7)), case(P=16, lengths=(0, 16, 33)), case(P=64, lengths=(64, 130), H=22),
     case(P=48, lengths=(97,), H=1, placement="ordered")]
    # The whole model's heads (one head and 22 are above), a split-length sequence (past 512
    # tokens: two page splits) and the real latent width (Dc 512, Dr 64).
    + [case(H=128, lengths=(20,), Dc=32, Dr=16),
       case(H=4, P=64, lengths=(600, 3)),
       case(H=22, Dc=512, Dr=64, P=16, lengths=(33,), lse=False)]
    # Value distributions and score ranges (cases/_dims.py), the last three with softmax scales
    # other than the default.
    + [case(P=64, H=4, lengths=(200, 90), vals=vl) for vl in ("offset", "cancel")]
    + [case(P=64, H=4, lengths=(100, 37), vals=vl) for vl in ("neg100", "zeros")]
    # Scores centred at -130 over a row split in two (past 512 tokens): every split's partial LSE
    # lies where e^x is 0 in fp32, so a merge weighting the splits by e^lse gets 0 / 0.
    + [case(P=64, H=2, lengths=(600,), vals=SPLIT_EXTREME)]
    + [case(P=64, H=4, lengths=(100, 37), vals=vl, scale=sc) for sc, vl in (("hot", "late"), ("one", "pm80"),
                                                                             ("mla", "large"))]
    # Every pair of scale x view x page size x placement x lengths x heads x values x LSE (PAIRWISE):
    # negative and zero scales (a row max taken before scaling, a zero scale read as "not given")
    # meet a one-token sequence, the fused buffer and the other views and shared pages.
    + PAIRWISE
    # A long reduction in fp16: one row over 2000 tokens whose running sum climbs far from the
    # output before it cancels (an accumulator kept in the input dtype shows).
    + [case(P=64, H=2, lengths=(2000,), vals="cancel")]
    # FP8 caches: scales far from 1, values at 448 and subnormal, NaN encodings in the
    # unowned slots (every case); one with the real widths, one bf16 query (bf16 and fp8 tiles).
    + [case(cache=c, lengths=(0, 40, 17), P=16) for c in ("fp8_scaled", "fp8_edge")]
    + [case(cache="fp8_edge", Dc=512, Dr=64, P=64, lengths=(40,), view="fused"),
       case(dtype="bf16", cache="fp8_scaled", lengths=(33,))]
)

FULL = (
    [case(dtype=dt, P=P, placement=pl, lengths=lens, H=H, Dc=512, Dr=64, cache=c, scale=DEEPSEEK_SCALE)
     for dt in ("fp16", "bf16") for P, lens in ((1, (1, 300)), (16, (1, 16, 1000)), (64, (64, 4000, 0)), (48, (700, 49)))
     for pl in ("shuffled", "scattered") for H in (1, 16, 22, 64, 128) for c in ("same", "fp8")
     if not (P == 1 and H > 22)]
    + [case(dtype=dt, P=64, lengths=(4 * 64 + 1, 2000), H=16, Dc=512, Dr=64, view=vw, vals=vl, cache=c)
       for dt in ("fp16", "bf16") for c in ("same", "fp8_scaled")
       for vw, vl in [(v, RANDN) for v in _mla.MLA_VIEWS] + [(CONTIG, v) for v in VALUES + EXTREMES]
       if not (c != "same" and vl != RANDN)]
    + [case(dtype="fp16", P=16, lengths=(5000, 3), H=H, Dc=512, Dr=64, cache="fp8_edge") for H in (16, 128)]
)

#: kernels.md section 10's bench: H = 16, Dc = 512, Dr = 64, page 64, bf16, B in {1, 32, 128},
#: lengths 1k-32k; the same in fp8 (section 11: against bf16 at equal shapes).
BENCH = [case(dtype="bf16", P=64, placement="scattered", lengths=(L,) * B, H=16, Dc=512, Dr=64, lse=False,
              cache=c)
         for B, L in ((1, 32768), (32, 4096), (32, 8192), (128, 1024), (128, 8192)) for c in ("same", "fp8")]


class MlaPagedDecode(Family):
    name = "mla_paged_decode"
    interface = Interface(
        ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "kv_page_indptr", "kv_page_indices", "kv_last_page_len"),
        KEYWORDS, "(o [B, H, Dc], lse [B, H] fp32 or None)",
        arguments=("q_nope [B, H, Dc], q_pe [B, H, Dr]  fp16 | bf16 (Dc, Dr multiples of 16)",
                   "ckv_cache [pages, P, Dc], kpe_cache [pages, P, Dr]  q's dtype or float8_e4m3fn; possibly the "
                   "two halves of one fused [pages, P, Dc + Dr] buffer",
                   "kv_page_indptr [B + 1], kv_page_indices [indptr[B]], kv_last_page_len [B] (1..P; 0 for a "
                   "sequence with no page)  int32",
                   "score_j = scale * (q_nope . ckv_j + q_pe . kpe_j); o = softmax(score) @ ckv; a sequence with no "
                   "page gives o = 0, lse = -inf"),
        notes=MLA_NOTE)
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": mla_paged_decode, **implementations("mla_paged_decode")}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        P = rng.choice((1, 16, 64))
        hi = 200 if P == 1 else 1100
        lengths = tuple(0 if rng.random() < 0.1 else draw_length(rng, hi) for _ in range(rng.randint(1, 3)))
        Dc, Dr = rng.choice(((64, 16), (128, 32), (512, 64)))
        return case(dtype="bf16" if rng.random() < 0.15 else "fp16", P=P, placement=rng.choice(PLACEMENTS),
                    lengths=lengths, H=rng.choice((1, 4, 16, 22)), Dc=Dc, Dr=Dr, lse=rng.random() < 0.7,
                    view=draw_view(rng, _mla.MLA_VIEWS), vals=draw_vals(rng), scale=None)

    def fuzz_classes(self, params, rng):
        return fuzz_classes(params, rng)

    def make_inputs(self, case, gen, device=None):
        return _mla.paged_latent_inputs(case, gen, case["lengths"], case["H"], len(case["lengths"]), device)

    def output_specs(self, case, inputs):
        B, H, Dc = inputs["q_nope"].shape
        return attention_outputs(case, (B, H, Dc), (B, H))

    def call(self, impl, case, inputs, outputs):
        k_scale, v_scale = _mla.cache_scales(case)
        o, lse = impl(inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"],
                      inputs["kv_page_indptr"], inputs["kv_page_indices"], inputs["kv_last_page_len"],
                      scale=case_scale(case, case["Dc"] + case["Dr"]), return_lse=case["lse"], out=outputs["o"],
                      lse=outputs.get("lse"), k_scale=k_scale, v_scale=v_scale)
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        k_scale, v_scale = _mla.cache_scales(case)
        o, lse = mla_paged_decode_reference(
            inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"], inputs["kv_page_indptr"],
            inputs["kv_page_indices"], inputs["kv_last_page_len"], scale=case_scale(case, case["Dc"] + case["Dr"]),
            k_scale=k_scale, v_scale=v_scale, compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        return _mla.latent_score_bound(inputs, effective_scale(case, case["Dc"] + case["Dr"]), _mla.cache_scales(case)[0])

    def vendor_problem(self, case, inputs):
        return vendor_problem(case, inputs, causal=False)

    def extra_baselines(self, case, inputs, impl):
        return extra_baselines(self, case, inputs, impl)

    def work(self, case, inputs):
        return work(case, inputs, queries=len(case["lengths"]))


def fuzz_classes(params, rng):
    """A draw moved, now and then, to a page size that is not a power of two, 64 or 128 heads,
    an fp8 cache class, an extreme score range or another softmax scale. The same draws every call."""
    p = dict(params)
    page, heads, fp8, extreme, scale = (rng.random() for _ in range(5))
    P, H, cache = rng.choice((12, 48)), rng.choice((64, 128)), rng.choice(("fp8", "fp8_scaled", "fp8_edge"))
    vals, sc = rng.choice(EXTREMES), rng.choice(("mla", "hot", "one", DEEPSEEK_SCALE))
    if page < 0.15:
        p["P"] = P
    if heads < 0.1:
        p["H"] = H
    if fp8 < 0.2:
        p["cache"], p["vals"] = cache, RANDN
    elif extreme < 0.1:
        p["vals"] = vals
    if scale < 0.3:
        p["scale"] = sc
    return p


def vendor_problem(case, inputs, *, causal: bool):
    """The dense problem: q [B, H, Sq, Dc + Dr] against the gathered latent rows as one KV head
    (k [B, 1, N, Dc + Dr], v [B, 1, N, Dc]), for SDPA where a backend takes D_qk != D_v; the
    gather and the dequantisation happen here, outside the timing."""
    k_scale, v_scale = _mla.cache_scales(case)
    k, v, _ = _mla.dense_latent(inputs, inputs["q_nope"].dtype, k_scale, v_scale)
    q = torch.cat([inputs["q_nope"], inputs["q_pe"]], -1)
    if "qo_indptr" in inputs:
        return None  # packed prefill queries of unequal counts: no dense equivalent of one shape
    return {"q": q[:, :, None].contiguous(), "k": k, "v": v, "causal": causal,
            "note": "latent rows gathered (and dequantised) outside the timing; one KV head of D_qk = Dc + Dr, "
                    "D_v = Dc"}


def extra_baselines(family, case, inputs, impl):
    """torch's math path on the gathered dense cache (any D_qk / D_v), and for an fp8 case the same
    kernel on the same values stored in the query's dtype (fp8 against 16-bit at equal shapes)."""
    k_scale, v_scale = _mla.cache_scales(case)
    dtype = inputs["q_nope"].dtype
    out = {}
    problem = family.vendor_problem(case, inputs)
    if problem is not None:
        q, k, v = problem["q"], problem["k"], problem["v"]
        scale = effective_scale(case, case["Dc"] + case["Dr"])

        def math_path():
            s = (q.float() @ k.float().transpose(-1, -2)) * scale
            return (torch.softmax(s, -1) @ v.float()).to(dtype)
        out["torch_math_dense"] = (math_path, "softmax(q k^T) v in fp32 over the gathered latent rows")
    if _mla.is_fp8(case):
        ckv16 = (inputs["ckv_cache"].float() * 1.0).to(dtype)
        kpe16 = (inputs["kpe_cache"].float() * 1.0).to(dtype)
        args = [inputs[k] for k in family.interface.positional]
        args[family.interface.positional.index("ckv_cache")] = ckv16
        args[family.interface.positional.index("kpe_cache")] = kpe16
        out["same_cache_16bit"] = (lambda: impl(*args, scale=case_scale(case, case["Dc"] + case["Dr"]),
                                                k_scale=k_scale, v_scale=v_scale),
                                   f"the same call over the cache stored in {dtype} (2x the bytes)")
    return out


def work(case, inputs, queries: int):
    """Bytes: every token's latent row once (cache dtype) plus q and o; flops: 2 products per
    visible (query, token, head) over Dc + Dr and Dc."""
    cache_bytes = inputs["ckv_cache"].element_size()
    H, Dc, Dr = case["H"], case["Dc"], case["Dr"]
    q_bytes = inputs["q_nope"].element_size()
    lengths = case["lengths"]
    rows = queries * H
    moved = _mla.latent_bytes(lengths, Dc, Dr, cache_bytes) + rows * (2 * Dc + Dr) * q_bytes
    visible = visible_pairs(case)
    return {"bytes": moved, "flops": 2 * H * visible * (2 * Dc + Dr)}


def visible_pairs(case) -> int:
    """(query, cache token) pairs that are attended, summed over the batch."""
    qlens = case.params.get("queries")
    if qlens is None:
        return sum(case["lengths"])
    total = 0
    for m, n in zip(case["lengths"], qlens):
        if case.params.get("causal", True):
            total += n * (m - n) + n * (n + 1) // 2
        else:
            total += n * m
    return total


FAMILY = MlaPagedDecode()
