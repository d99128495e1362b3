"""MLA chunked prefill over a prefix cache (kernels.md section 10, FP8 caches section 11): sequence b
has n_b new queries, the last n_b of its m_b cached tokens; causal, aligned bottom-right (query i
sees cache positions <= m_b - n_b + i)."""
from __future__ import annotations

import itertools

import torch

from attnsuite.case import make_cases, unique
from attnsuite.ecosystem import implementations
from attnsuite.family import Family
from attnsuite.interfaces import Interface
from attnsuite.pairwise import pairwise
from kernels.mla_paged import mla_paged_prefill
from references.mla import mla_paged_prefill_reference

from . import _mla
from ._attention import attention_outputs, lse_if
from ._dims import (CONTIG, EXTREMES, RANDN, SPLIT_EXTREME, VALUES, case_scale, dims_label, draw_length, draw_vals,
                    draw_view, effective_scale, pairwise_legal, pairwise_shares_pages)
from ._paged import PLACEMENTS, SHARED
from .mla_paged_decode import (DEEPSEEK_SCALE, KEYWORDS, MLA_NOTE, cache_label, extra_baselines, fuzz_classes,
                               lengths_label, work)


def label(p) -> str:
    lengths, queries = lengths_label(p["lengths"]), lengths_label(p["queries"])
    return (f"{p['dtype']}-P{p['P']}-{p['placement']}-L{lengths}-Q{queries}-H{p['H']}-Dc{p['Dc']}-Dr{p['Dr']}"
            f"{'' if p['causal'] else '-noncausal'}{'-lse' if p['lse'] else ''}{cache_label(p)}{dims_label(p)}")


def case(dtype="fp16", P=64, placement="shuffled", lengths=(20, 37), queries=(2, 3), H=4, Dc=64, Dr=16, causal=True,
         lse=True, cache="same", pool=None, view=CONTIG, vals=RANDN, scale=None):
    return dict(dtype=dtype, P=P, placement=placement, lengths=tuple(lengths), queries=tuple(queries), H=H, Dc=Dc,
                Dr=Dr, causal=causal, lse=lse, cache=cache, pool=pool, view=view, vals=vals, scale=scale)


#: Every pair of: a softmax scale, a legal view (the contiguous buffers meet every other factor in
#: the hand-picked cases), a page size (non-powers of two included), a placement (shared pages
#: included), (prefix lengths, query counts) (one token, a sequence with no query; past a 128-token
#: tile), the mask, the heads, a value distribution and the LSE on or off (rows past the split
#: threshold cost the interpreter the most: the hand-picked case of 600 tokens takes that path).
PAIRWISE = [case(P=r["P"], placement=r["placement"], lengths=r["seqs"][0], queries=r["seqs"][1], H=r["H"],
                 causal=r["causal"], lse=r["lse"], view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "view": _mla.MLA_VIEWS, "P": (16, 12, 48),
                               "placement": ("shuffled", "scattered", SHARED),
                               "seqs": (((1, 9), (1, 2)), ((40, 0, 17), (3, 0, 1)), ((130, 33), (2, 3))),
                               "causal": (True, False), "H": (4, 16, 1), "vals": (RANDN, "large", "pm80"),
                               "lse": (True, False)},
                              # (pm80 alternates rows over sequences and heads: with one head, the even sequences)
                              lambda r: pairwise_legal(r) and not (r.get("vals") == "pm80" and r.get("H") == 1)
                              and pairwise_shares_pages(
                                  {**r, "lengths": r["seqs"][0]} if "seqs" in r else r))]

QUICK = (
    # Chunks over a longer prefix (m > n), the whole sequence as the chunk (m == n), a sequence
    # with no query, an empty sequence; page sizes 1, 16 and 64.
    [case(P=16, lengths=(20, 37), queries=(2, 3)), case(P=16, lengths=(5, 30), queries=(5, 1), H=16),
     case(P=1, lengths=(5, 2), queries=(2, 2)), case(P=64, lengths=(130, 64), queries=(4, 0), H=22)]
    # (Page sizes 12 and 48, one head, a sequence with no query and the non-causal mask: PAIRWISE.)
    # The whole model's heads, a row split over pages (past 512 tokens), the real latent width.
    + [case(H=128, Dc=32, Dr=16, lengths=(18,), queries=(2,)),
       case(H=4, P=64, lengths=(600,), queries=(2,)),
       case(H=16, Dc=512, Dr=64, P=64, lengths=(40,), queries=(2,))]
    # bf16 over the fused buffer (PAIRWISE crosses the legal views with the other factors).
    + [case(dtype="bf16", view="fused")]
    # Value distributions and score ranges, the last three with softmax scales other than the default.
    + [case(lengths=(200,), queries=(2,), vals=vl) for vl in ("offset", "cancel")]
    + [case(lengths=(60,), queries=(2,), vals=vl) for vl in ("neg100", "zeros")]
    # Scores centred at -130 over rows split in two (past 512 visible tokens): every partial LSE
    # lies where e^x is 0 in fp32.
    + [case(H=2, lengths=(600,), queries=(2,), vals=SPLIT_EXTREME)]
    + [case(lengths=(200 if vl == "late" else 60,), queries=(2,), vals=vl, scale=sc)
       for sc, vl in (("hot", "late"), ("one", "pm80"), ("mla", "large"))]
    # Every pair of scale x view x page size x placement x (lengths, queries) x mask x heads x values
    # x LSE (PAIRWISE): negative and zero scales meet one-token sequences, the fused buffer and the
    # other views and shared pages.
    + PAIRWISE
    # FP8 caches.
    + [case(cache=c, P=16, lengths=(0, 40, 17), queries=(0, 2, 2)) for c in ("fp8_scaled", "fp8_edge")]
)

FULL = (
    [case(dtype=dt, P=P, placement=pl, lengths=lens, queries=qs, H=H, Dc=512, Dr=64, cache=c, scale=DEEPSEEK_SCALE)
     for dt in ("fp16", "bf16") for P, lens, qs in ((1, (40, 300), (40, 17)), (16, (16, 1000, 5), (16, 64, 5)),
                                                    (64, (700, 0, 129), (65, 0, 129)), (48, (700, 49), (100, 1)))
     for pl in ("shuffled", "scattered") for H in (1, 16, 22, 64, 128) for c in ("same", "fp8")
     if not (P == 1 and H > 22)]
    + [case(dtype=dt, P=64, lengths=(300, 1000), queries=(17, 64), H=16, Dc=512, Dr=64, view=vw, vals=vl, causal=cz)
       for dt in ("fp16", "bf16") for cz in (True, False)
       for vw, vl in [(v, RANDN) for v in _mla.MLA_VIEWS] + [(CONTIG, v) for v in VALUES + EXTREMES]]
)

#: kernels.md section 10's prefill bench: chunks of 512-4096 queries over 4k-32k cached tokens,
#: H = 16, Dc = 512, Dr = 64, page 64, bf16.
BENCH = [case(dtype="bf16", P=64, placement="scattered", lengths=(m,), queries=(n,), H=16, Dc=512, Dr=64, lse=False)
         for n, m in ((512, 4096), (1024, 8192), (2048, 16384), (4096, 32768))]


class MlaPagedPrefill(Family):
    name = "mla_paged_prefill"
    interface = Interface(
        ("q_nope", "q_pe", "qo_indptr", "ckv_cache", "kpe_cache", "kv_page_indptr", "kv_page_indices",
         "kv_last_page_len"),
        ("causal", *KEYWORDS), "(o [total_q, H, Dc], lse [total_q, H] fp32 or None)",
        arguments=("q_nope [total_q, H, Dc], q_pe [total_q, H, Dr]  fp16 | bf16, packed by qo_indptr [B + 1] int32",
                   "ckv_cache [pages, P, Dc], kpe_cache [pages, P, Dr]  q's dtype or float8_e4m3fn; possibly the "
                   "two halves of one fused [pages, P, Dc + Dr] buffer",
                   "kv_page_indptr [B + 1], kv_page_indices [indptr[B]], kv_last_page_len [B]  int32: m_b cached "
                   "tokens, the n_b queries being the last n_b of them (n_b <= m_b)",
                   "causal (default): query i of sequence b sees positions <= m_b - n_b + i"),
        notes=MLA_NOTE)
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": mla_paged_prefill, **implementations("mla_paged_prefill")}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        P = rng.choice((1, 16, 64))
        hi = 150 if P == 1 else 700
        lengths, queries = [], []
        for _ in range(rng.randint(1, 3)):
            m = 0 if rng.random() < 0.1 else draw_length(rng, hi)
            lengths.append(m)
            queries.append(0 if m == 0 else rng.choice((m, min(m, rng.randint(1, 8)), min(m, draw_length(rng, 40)))))
        Dc, Dr = rng.choice(((64, 16), (128, 32), (512, 64)))
        return case(dtype="bf16" if rng.random() < 0.15 else "fp16", P=P, placement=rng.choice(PLACEMENTS),
                    lengths=lengths, queries=queries, H=rng.choice((1, 4, 16, 22)), Dc=Dc, Dr=Dr,
                    causal=rng.random() < 0.85, lse=rng.random() < 0.7, view=draw_view(rng, _mla.MLA_VIEWS),
                    vals=draw_vals(rng), scale=None)

    def fuzz_classes(self, params, rng):
        return fuzz_classes(params, rng)

    def make_inputs(self, case, gen, device=None):
        queries = case["queries"]
        inputs = _mla.paged_latent_inputs(case, gen, case["lengths"], case["H"], sum(queries), device)
        inputs["qo_indptr"] = torch.tensor([0, *itertools.accumulate(queries)], dtype=torch.int32)
        return inputs

    def output_specs(self, case, inputs):
        T, H, Dc = inputs["q_nope"].shape
        return attention_outputs(case, (T, H, Dc), (T, H))

    def call(self, impl, case, inputs, outputs):
        k_scale, v_scale = _mla.cache_scales(case)
        o, lse = impl(inputs["q_nope"], inputs["q_pe"], inputs["qo_indptr"], inputs["ckv_cache"], inputs["kpe_cache"],
                      inputs["kv_page_indptr"], inputs["kv_page_indices"], inputs["kv_last_page_len"],
                      causal=case["causal"], scale=case_scale(case, case["Dc"] + case["Dr"]), return_lse=case["lse"],
                      out=outputs["o"], lse=outputs.get("lse"), k_scale=k_scale, v_scale=v_scale)
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        k_scale, v_scale = _mla.cache_scales(case)
        o, lse = mla_paged_prefill_reference(
            inputs["q_nope"], inputs["q_pe"], inputs["qo_indptr"], inputs["ckv_cache"], inputs["kpe_cache"],
            inputs["kv_page_indptr"], inputs["kv_page_indices"], inputs["kv_last_page_len"], causal=case["causal"],
            scale=case_scale(case, case["Dc"] + case["Dr"]), k_scale=k_scale, v_scale=v_scale,
            compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        return _mla.latent_score_bound(inputs, effective_scale(case, case["Dc"] + case["Dr"]), _mla.cache_scales(case)[0])

    def vendor_problem(self, case, inputs):
        """One sequence (the bench shapes): its n queries against its m cached rows, causal
        bottom-right as SDPA's is_causal is not (top-left): the math-path baseline masks itself."""
        if len(case["lengths"]) != 1:
            return None
        k_scale, v_scale = _mla.cache_scales(case)
        k, v, _ = _mla.dense_latent(inputs, inputs["q_nope"].dtype, k_scale, v_scale)
        q = torch.cat([inputs["q_nope"], inputs["q_pe"]], -1).transpose(0, 1)[None].contiguous()  # [1, H, n, D]
        if case["causal"] and q.shape[2] != k.shape[2]:
            return None  # SDPA's causal mask is aligned top-left
        return {"q": q, "k": k, "v": v, "causal": case["causal"],
                "note": "latent rows gathered outside the timing; one KV head of D_qk = Dc + Dr, D_v = Dc"}

    def extra_baselines(self, case, inputs, impl):
        out = extra_baselines(self, case, inputs, impl)
        out.pop("torch_math_dense", None)  # its mask would be top-left: replaced below
        if len(case["lengths"]) == 1:
            k_scale, v_scale = _mla.cache_scales(case)
            dtype = inputs["q_nope"].dtype
            k, v, _ = _mla.dense_latent(inputs, dtype, k_scale, v_scale)
            q = torch.cat([inputs["q_nope"], inputs["q_pe"]], -1).transpose(0, 1)[None]
            n, m = q.shape[2], k.shape[2]
            visible = (torch.arange(m, device=q.device)[None, :]
                       <= (m - n + torch.arange(n, device=q.device))[:, None]) if case["causal"] else None
            scale = effective_scale(case, case["Dc"] + case["Dr"])

            def math_path():
                s = (q.float() @ k.float().transpose(-1, -2)) * scale
                if visible is not None:
                    s = s.masked_fill(~visible, float("-inf"))
                return (torch.softmax(s, -1) @ v.float()).to(dtype)
            out["torch_math_dense"] = (math_path, "softmax(q k^T) v in fp32 over the gathered latent rows, causal "
                                                  "bottom-right")
        return out

    def work(self, case, inputs):
        return work(case, inputs, queries=sum(case["queries"]))


FAMILY = MlaPagedPrefill()
