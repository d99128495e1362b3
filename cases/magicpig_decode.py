"""MagicPIG sampled decode (docs/contract.md section 7): sparse paged decode whose scores carry the
LSH sampling correction ``-log(u)``, clamp form (see references/magicpig.py)."""
from __future__ import annotations

import math

import torch

from attnsuite.case import make_cases, unique
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface
from attnsuite.pairwise import pairwise
from kernels.magicpig_decode import magicpig_decode
from references.magicpig import magicpig_decode_reference
from references.paged import sparse_paged_decode_reference

from . import sparse_paged_decode as spd
from ._attention import attention_outputs, lse_if, score_bound
from ._dims import (CONTIG, EXTREMES, RANDN, SIGNED_SCALES, SPLIT_EXTREME, SPLIT_LENGTHS, TILE_RESIDUES, VALUES, case_scale,
                    draw_classes, effective_scale, index_view, pairwise_legal)
from ._paged import PAGED_VIEWS
from ._sparse import STALE_SELECTIONS, SparseDecodeBench

#: How K and L are drawn: the integers of the MagicPIG paper, the origin's float range, and a
#: huge L that makes u == 1 for every key (the correction vanishes).
LSH = {"int": "K10-L150", "float": "K_L_uniform1-6", "huge": "K1-L1e4"}


def label(p) -> str:
    cos = f"-cos_{p['cos']}" if p.get("cos") else ""
    return f"{spd.label(p)}-{LSH[p['lsh']]}{cos}"


def case(lsh="int", cos=None, **kw):
    return dict(spd.case(**kw), lsh=lsh, cos=cos)


FUZZ_FINDS = [
    case(lsh="int", cos="pm1", layout="NHD", P=256, placement="shuffled", lengths=(846, 860, 0), Hq=2, Hkv=2,
         D=64, keep=0.5, order="sorted", dup=True, view="rowpad", vals="large"),
    case(lsh="int", cos="pm1", layout="NHD", P=64, placement="ordered", lengths=(0, 433, 768), Hq=2, Hkv=2,
         D=128, keep=0.43, order="shuffled", pad="stale", view="rowpad", vals="large"),
    case(lsh="int", cos="pm1", layout="NHD", P=256, lengths=(1100, 40), Hq=2, Hkv=2, keep=1.0, dup=True,
         vals="large")]

#: Every pair of: a softmax scale, how K and L are drawn, a layout, a legal view (the contiguous
#: inputs meet every other factor in the hand-picked cases), lengths (a one-token sequence; an
#: empty one), the kept share, a value distribution, a GQA group (non-powers of two) and the LSE
#: on or off. Page sizes, placements and split-crossing lists are crossed in sparse_paged_decode's
#: PAIRWISE (the same page walk and merge); MagicPIG's rows cost the interpreter the most, so they
#: stay fewer and shorter here (the hand-picked 513- and 600-token lists take the split path).
PAIRWISE = [case(lsh=r["lsh"], layout=r["layout"], lengths=r["lengths"], Hq=r["heads"][0], Hkv=r["heads"][1],
                 keep=r["keep"], lse=r["lse"], view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "lsh": ("int", "float"), "layout": ("HND", "NHD"),
                               "view": PAGED_VIEWS, "lengths": ((1, 9), (40, 0, 17)), "keep": (1.0, 0.5),
                               "vals": (RANDN, "pm80"), "heads": ((6, 2), (7, 1)), "lse": (True, False)},
                              pairwise_legal)]

QUICK = (
    [case(lsh=lsh, keep=k) for lsh in ("int", "float") for k in (0.05, 0.3)]
    + [case(lsh="int", keep=0.3, **variant) for variant in (dict(dup=True), dict(empty=True),
                                                             dict(pad="garbage", extra=5))]
    + [case(lsh="int", layout="NHD", placement="scattered", lengths=(0, 40, 17), keep=0.4),
       case(lsh="float", Hq=4, Hkv=4, keep=0.2), case(lsh="int", D=128, Hq=8, Hkv=1, keep=0.2, lse=False),
       case(lsh="int", dtype="bf16", keep=0.2)]
    # Cosines near +1 and -1: keys parallel and anti-parallel to the query (G = 1).
    + [case(lsh=lsh, cos="pm1", Hq=4, Hkv=4, keep=0.3) for lsh in ("int", "float")]
    # Consistency: with u == 1 for all keys the result equals sparse paged decode.
    + [case(lsh="huge", keep=0.3, vs="sparse_paged_decode")]
    # Entries past nnz holding stale in-range positions of their sequence.
    + [case(lsh="int", **STALE_SELECTIONS[1])]
    # Index lists at tile residues and past the split threshold (several pages of 256, short last).
    + [case(lsh="float", P=64, lengths=(s,), Hq=2, Hkv=1, keep=1.0) for s in TILE_RESIDUES[::3]]
    + [case(lsh="int", P=256, lengths=(SPLIT_LENGTHS[0],), Hq=2, Hkv=1, keep=1.0)]
    # Value distributions (late keys listed last).
    + [case(lsh="int", lengths=(640,) if vl == "cancel" else (300, 40), Hq=2, Hkv=1,
            keep=1.0 if vl == "cancel" else 0.8, vals=vl) for vl in VALUES]
    # Page sizes and GQA groups that are not powers of two (3 and 7 also in PAIRWISE).
    + [case(lsh="int", P=12, lengths=(0, 90, 25), Hq=6, Hkv=2, keep=0.5),
       case(lsh="float", P=48, layout="NHD", placement="scattered", lengths=(200, 48), Hq=5, Hkv=1, keep=0.5),
       case(lsh="int", P=16, lengths=(70,), Hq=12, Hkv=2, keep=0.5)]
    # Score ranges at the edges of the exponent, and zero vectors: zero keys and a zero query,
    # whose cosine is 0 only with the norm's epsilon (0 / 0 without it).
    + [case(lsh="int", lengths=(150, 60), Hq=4, Hkv=2, keep=0.5, vals=vl) for vl in EXTREMES]
    + [case(lsh="float", lengths=(70,), Hq=2, Hkv=2, keep=1.0, vals="zeros")]
    # Every pair of scale x K, L x layout x view x lengths x kept share x values x GQA group x LSE
    # (PAIRWISE): negative and zero scales meet a one-token sequence, NHD and every view.
    + PAIRWISE
    # MLA's scale, no scaling and a negative scale over the distributions that stress the exponent
    # (cases/_dims.py, SIGNED_SCALES).
    + [case(lsh="int", lengths=(150, 60), Hq=4, Hkv=2, keep=0.5, vals=vl, scale=sc)
       for sc, vl in (("mla", "late"), ("one", "pm80"), SIGNED_SCALES[0])]
    # Partial LSEs of the split-KV merge below fp32's subnormals (cases/_dims.py, SPLIT_EXTREME), over 2 splits.
    + [case(lsh="int", P=64, lengths=(600,), Hq=2, Hkv=2, keep=1.0, vals=SPLIT_EXTREME)]
    # Shared pages (a prefix cache): the sequences' first pages are the same physical pages.
    + [case(lsh="int", placement="shared", lengths=(100, 37, 0, 64), Hq=4, Hkv=2, keep=0.5),
       case(lsh="float", P=48, layout="NHD", placement="shared", lengths=(200, 150), Hq=6, Hkv=2, keep=0.5)]
    # Found by the fuzz profile (magicpig_decode[fuzz31337.191-...] and [fuzz31337.369-...], on two
    # H100s): q scaled by 64 and keys parallel to it make scores of ~65536, where the fp16
    # baseline is NaN and the split-KV merge (LSEs of ~9e4 in fp32) errs by ~1e-3; the tolerance
    # allows what fp32 scores of that size cost (attnsuite/tolerance.py). The first (duplicated
    # tokens: the inputs that differed alone and in a run) here; the second, and the same inputs
    # over lists long enough to split in the interpreter too (L_max > 512), in full (FUZZ_FINDS).
    + [FUZZ_FINDS[0]]
    # Long reductions in low precision: one row over thousands of selected tokens.
    + [case(lsh="huge", dtype=dt, P=48, lengths=(2000,), Hq=1, Hkv=1, keep=1.0, dup=True, vals="cancel")
       for dt in ("fp16", "bf16")]
)

FULL = (
    FUZZ_FINDS[1:]
    + [case(dtype=dt, lsh=lsh, layout=lay, P=P, lengths=lens, Hq=2 * g, Hkv=2, D=d, keep=k,
          placement="scattered")
     for dt in ("fp16", "bf16") for lsh in ("int", "float") for lay in ("HND", "NHD")
     for P, lens in ((16, (1, 3000)), (256, (4000, 700))) for g in (1, 4) for d in (64, 128, 256)
     for k in (0.02, 0.2)]
    + [case(dtype=dt, lsh=lsh, cos="pm1", Hq=4, Hkv=4, lengths=(2000, 500), keep=0.1)
       for dt in ("fp16", "bf16") for lsh in ("int", "float")]
    + [case(dtype=dt, lsh="huge", lengths=(3000, 1000), keep=0.1, vs="sparse_paged_decode")
       for dt in ("fp16", "bf16")]
    + [case(dtype=dt, lsh=lsh, layout=lay, P=256, lengths=(4000, 700), D=128, view=vw, vals=vl, **sel)
       for dt in ("fp16", "bf16") for lsh in ("int", "float") for lay in ("HND", "NHD")
       for sel in STALE_SELECTIONS[:1]
       for vw, vl in [(v, "randn") for v in PAGED_VIEWS] + [(CONTIG, v) for v in VALUES]]
)

BENCH = [case(dtype=dt, lsh="int", P=256, placement="scattered", pool=1024, lengths=spd.BENCH_LENGTHS,
              Hq=32, Hkv=8, D=256, keep=0.02, lse=False) for dt in ("fp16", "bf16")]


def _lsh_params(gen, case, B, Hq):
    if case["lsh"] == "int":
        return torch.full((B, Hq), 10.0), torch.full((B, Hq), 150.0)
    if case["lsh"] == "float":
        return 1 + 5 * torch.rand((B, Hq), generator=gen), 1 + 5 * torch.rand((B, Hq), generator=gen)
    return torch.full((B, Hq), 1.0), torch.full((B, Hq), 1e4)


def _align_keys_with_queries(inputs, case):
    """Make every selected key parallel (even token positions) or anti-parallel (odd ones) to its
    query; needs G == 1 so each KV head has one query. By the token, not by its slot in the list:
    a token listed twice (duplicates) is written twice with the same value, since which of two
    different values an indexed assignment keeps is undefined (torch's CPU kernel splits the
    writes across threads: the fuzz case magicpig_decode[fuzz31337.191-...] got other inputs
    alone than inside a run, whose workers use fewer threads)."""
    q, cache, ind, nnz = inputs["q"], inputs["kv_cache"], inputs["sparse_ind"], inputs["sparse_nnz"]
    view = spd._paged.token_view(cache, case["layout"])  # [pages, 2, Hkv, P, D]
    B, Hq, L_max = ind.shape
    P = case["P"]
    slot = torch.arange(L_max)
    valid = slot[None, None, :] < nnz[:, :, None]
    b = torch.arange(B)[:, None, None].expand(B, Hq, L_max)[valid]
    h = torch.arange(Hq)[None, :, None].expand(B, Hq, L_max)[valid]
    t = ind[valid].long()
    page = inputs["kv_page_indices"][inputs["kv_page_indptr"][b].long() + t // P].long()
    sign = torch.where(t % 2 == 0, 2.0, -0.5).to(q.dtype)
    # The cache may lie on the run's device and q on the host: the written values go to the cache.
    view[page, 0, h, t % P] = (q[b, h] * sign[:, None]).to(view.device)


class MagicPigDecode(SparseDecodeBench, Family):
    name = "magicpig_decode"
    interface = Interface(
        ("q", "kv_cache", "kv_page_indptr", "kv_page_indices", "sparse_ind", "sparse_nnz", "K", "L"),
        ("layout", "kv_last_page_len", *ATTENTION_KEYWORDS), "(o [B, Hq, D], lse [B, Hq] fp32 or None)",
        arguments=("as sparse_paged_decode, plus K, L [B, Hq] fp32 LSH parameters",
                   "score = q.k * scale - log(max(1 - (1-P)^L - L P (1-P)^(L-1), 1e-10)), P = (1 - acos(c)/pi)^K, "
                   "c = clamp(q.k / (|q||k| + 1e-8), -1 + 1e-7, 1 - 1e-7)"),
        notes=SCALE_NOTE)
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": magicpig_decode}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        params = spd.draw_case(rng)
        cos = "pm1" if rng.random() < 0.15 else None
        if cos:  # keys aligned with their query: one query head per KV head
            params["Hq"] = params["Hkv"]
        return dict(params, lsh=rng.choice(("int", "int", "float", "huge")), cos=cos)

    def fuzz_classes(self, params, rng):
        # Keys aligned with their query (cos pm1) need one query head per KV head.
        # ... and no shared pages: two sequences would write their own query into one shared key.
        free = params.get("cos") is None
        return draw_classes(rng, params, gqa=free, pages=True, shared=free)

    def make_inputs(self, case, gen, device=None):
        # Rows shifted down meet their keys anti-parallel: the correction adds up to -log(1e-10).
        inputs = spd.make_sparse_paged_inputs(case, gen, views=False, low_extra=-math.log(1e-10), device=device)
        B, Hq, _ = inputs["q"].shape
        inputs["K"], inputs["L"] = _lsh_params(gen, case, B, Hq)
        if case["cos"] == "pm1":
            _align_keys_with_queries(inputs, case)
        inputs = spd.apply_views(case, inputs)
        if case.params.get("view", CONTIG) != CONTIG:
            inputs["K"], inputs["L"] = index_view(inputs["K"], float("nan")), index_view(inputs["L"], float("nan"))
        return inputs

    def output_specs(self, case, inputs):
        B, Hq, D = inputs["q"].shape
        return attention_outputs(case, (B, Hq, D), (B, Hq))

    def call(self, impl, case, inputs, outputs):
        o, lse = impl(*spd.paged_args(inputs), inputs["K"], inputs["L"], layout=case["layout"],
                      kv_last_page_len=inputs["kv_last_page_len"], scale=case_scale(case), return_lse=case["lse"],
                      out=outputs["o"], lse=outputs.get("lse"))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        if case["vs"] == "sparse_paged_decode":
            o, lse = sparse_paged_decode_reference(*spd.paged_args(inputs), layout=case["layout"],
                                                   scale=case_scale(case), compute_dtype=compute_dtype)
        else:
            o, lse = magicpig_decode_reference(*spd.paged_args(inputs), inputs["K"], inputs["L"],
                                               layout=case["layout"], scale=case_scale(case),
                                               compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        # The correction -log(u) is at most -log(1e-10) (u's floor).
        keys = spd._paged.token_view(inputs["kv_cache"], case["layout"])[:, 0]
        return score_bound(inputs["q"], keys, effective_scale(case, case["D"]), -math.log(1e-10))


FAMILY = MagicPigDecode()
