"""Sparse-token decode over a paged KV cache (docs/contract.md section 6): index rows hold logical
token positions of each sequence, resolved through the page table."""
from __future__ import annotations

import torch

from attnsuite.case import make_cases, unique
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface
from attnsuite.pairwise import pairwise
from kernels.sparse_paged_decode import sparse_paged_decode
from references.paged import paged_decode_reference, sparse_paged_decode_reference

from . import _paged
from ._attention import attention_outputs, lse_if, randn, score_bound
from ._dims import (CONTIG, EXTREMES, RANDN, SIGNED_SCALES, SPLIT_EXTREME, SPLIT_LENGTHS, TILE_RESIDUES, VALUES,
                    case_scale, dims_label, draw_classes, draw_dtype, draw_head_dim, draw_heads, draw_vals, draw_view,
                    effective_scale, listed_last, paged_values, pairwise_legal, pairwise_shares_pages)
from ._paged import PAGED_VIEWS, draw_page_table, paged_views
from ._sparse import (QUICK_SELECTIONS, SELECTION, STALE_SELECTIONS, SparseDecodeBench, draw_selection,
                      index_views, select_tokens, selection_label)


def label(p) -> str:
    lengths = "_".join(map(str, p["lengths"]))
    vs = f"-vs_{p['vs']}" if p.get("vs") else ""
    return (f"{p['dtype']}-{p['layout']}-P{p['P']}-{p['placement']}-L{lengths}-Hq{p['Hq']}-Hkv{p['Hkv']}-"
            f"D{p['D']}-{selection_label(p)}{'-lse' if p['lse'] else ''}{vs}{dims_label(p)}")


def case(dtype="fp16", layout="HND", P=16, placement="shuffled", lengths=(90, 200), Hq=8, Hkv=2, D=64,
         lse=True, vs=None, pool=None, view=CONTIG, vals=RANDN, scale=None, **selection):
    return dict(dtype=dtype, layout=layout, P=P, placement=placement, lengths=tuple(lengths), Hq=Hq, Hkv=Hkv,
                D=D, lse=lse, vs=vs, pool=pool, view=view, vals=vals, scale=scale, **{**SELECTION, **selection})


#: Every pair of: a softmax scale, a layout, a legal view (the contiguous inputs meet every other
#: factor in the hand-picked cases), a page size (non-powers of two included), a placement (shared
#: pages included), lengths (a one-token sequence; past the split threshold), the kept share, a
#: value distribution, a GQA group (non-powers of two) and the LSE on or off.
PAIRWISE = [case(layout=r["layout"], P=r["P"], placement=r["placement"], lengths=r["lengths"], Hq=r["heads"][0],
                 Hkv=r["heads"][1], keep=r["keep"], lse=r["lse"], view=r["view"], vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "layout": ("HND", "NHD"), "view": PAGED_VIEWS,
                               "P": (16, 12, 48), "placement": ("shuffled", "scattered", _paged.SHARED),
                               "lengths": ((1, 9), (40, 0, 17), (513,)), "keep": (1.0, 0.5),
                               "vals": (RANDN, "large", "pm80"), "heads": ((6, 2), (5, 1), (7, 1)),
                               "lse": (True, False)},
                              # (the split-crossing list, the costliest rows, over one KV head: the
                              # hand-picked cases cross the split with two)
                              lambda r: pairwise_legal(r) and pairwise_shares_pages(r)
                              and not (r.get("lengths") == (513,) and r.get("heads", (0, 1))[1] > 1))]

QUICK = (
    [case(**sel) for sel in QUICK_SELECTIONS]
    # NHD with pages in sequence order (PAIRWISE crosses the layouts with the other placements).
    + [case(layout="NHD", placement="ordered", keep=0.2)]
    + [case(P=1, lengths=(1, 30), keep=0.3), case(P=64, lengths=(64, 130), keep=0.1),
       case(P=256, lengths=(300,), Hq=4, Hkv=4, keep=0.1)]
    + [case(lengths=(0, 70, 5), keep=0.3), case(lengths=(0, 0), keep=0.3), case(Hq=4, Hkv=4, keep=0.1), case(Hq=8, Hkv=1, keep=0.1, lse=False),
       case(D=128, keep=0.2), case(D=256, Hq=4, Hkv=1, lengths=(60,), keep=0.5), case(dtype="bf16")]
    # Consistency: every token selected once equals paged decode over the same cache.
    + [case(keep=1.0, vs="paged_decode"), case(layout="NHD", keep=1.0, lengths=(0, 33, 16), vs="paged_decode")]
    # Entries past nnz holding stale in-range positions of their sequence.
    + [case(**sel) for sel in STALE_SELECTIONS]
    # Index lists whose length leaves every tile residue, then past the split threshold; the
    # longest sequences span several pages of 256 with a short last page.
    + [case(P=64, lengths=(s,), Hq=4, Hkv=1, keep=1.0) for s in TILE_RESIDUES]
    + [case(P=256, lengths=(s,), Hq=2, Hkv=1, keep=1.0) for s in SPLIT_LENGTHS]
    # Value distributions over several tiles of each list (late keys listed last).
    # (cancel: every token of one long sequence, so every output sits near 0)
    + [case(lengths=(640,) if vl == "cancel" else (600, 90), Hq=4, Hkv=2, keep=1.0 if vl == "cancel" else 0.5,
            vals=vl) for vl in VALUES]
    # Page sizes that are not powers of two (logical position -> page / slot by division, not
    # shifts) over many pages, and GQA groups that are not powers of two, are crossed in PAIRWISE;
    # GQA 6 here.
    + [case(P=16, lengths=(70,), Hq=12, Hkv=2, keep=0.5)]
    # Score ranges at the edges of the exponent and zero vectors (cases/_dims.py, EXTREMES).
    + [case(lengths=(150, 60), Hq=4, Hkv=2, keep=0.5, vals=vl) for vl in EXTREMES]
    # Every pair of scale x layout x view x page size x placement x lengths x kept share x values x
    # GQA group x LSE (PAIRWISE): negative and zero scales meet a one-token sequence, NHD, every
    # view, shared pages and the split-KV path.
    + PAIRWISE
    # MLA's scale, no scaling and a negative scale over the distributions that stress the exponent
    # (cases/_dims.py, SIGNED_SCALES).
    + [case(lengths=(150, 60), Hq=4, Hkv=2, keep=0.5, vals=vl, scale=sc)
       for sc, vl in (("mla", "late"), ("one", "pm80"), SIGNED_SCALES[0])]
    # Partial LSEs of the split-KV merge below fp32's subnormals (cases/_dims.py, SPLIT_EXTREME), over 2 splits.
    + [case(P=64, lengths=(600,), Hq=4, Hkv=2, keep=1.0, vals=SPLIT_EXTREME)]
    # Shared pages (a prefix cache): the sequences' first pages are the same physical pages.
    + [case(placement="shared", lengths=(100, 37, 0, 64), Hq=4, Hkv=2, keep=0.5),
       case(P=48, layout="NHD", placement="shared", lengths=(600, 150), Hq=6, Hkv=2, keep=1.0, dup=True)]
    # Long reductions in low precision: one row over thousands of selected tokens (duplicates
    # included) whose running sum climbs far from the output.
    + [case(dtype=dt, P=48, lengths=(2000,), Hq=2, Hkv=1, keep=1.0, dup=True, vals="cancel")
       for dt in ("fp16", "bf16")]
)

FULL = (
    [case(dtype=dt, layout=lay, P=P, lengths=lens, Hq=2 * g, Hkv=2, D=d, keep=k, placement="scattered")
     for dt in ("fp16", "bf16") for lay in ("HND", "NHD") for P, lens in ((16, (1, 3000)), (256, (4000, 700)))
     for g in (1, 4, 8) for d in (64, 128, 256) for k in (0.02, 0.2, 1.0)]
    + [case(dtype=dt, P=16, lengths=(3000, 0, 2000), keep=0.05, **variant) for dt in ("fp16", "bf16")
       for variant in (dict(dup=True), dict(empty=True), dict(pad="garbage", extra=100))]
    + [case(dtype=dt, P=64, lengths=(3000, 1000), keep=1.0, vs="paged_decode") for dt in ("fp16", "bf16")]
    + [case(dtype=dt, layout=lay, P=256, lengths=(4000, 700), D=128, view=vw, vals=vl, **sel)
       for dt in ("fp16", "bf16") for lay in ("HND", "NHD") for sel in STALE_SELECTIONS
       for vw, vl in [(v, RANDN) for v in PAGED_VIEWS] + [(CONTIG, v) for v in VALUES]]
)

# The origin's headline bench: the paged bench cache (docs/contract.md section 4) at kept 2%, 4%, 5%.
BENCH_LENGTHS = (256 * 269 + 63, 256 * 349 + 22, 256 * 320 + 55)
BENCH = [case(dtype=dt, P=256, placement="scattered", pool=1024, lengths=BENCH_LENGTHS, Hq=32, Hkv=8, D=256,
              keep=k, lse=False) for dt in ("fp16", "bf16") for k in (0.02, 0.04, 0.05)]
# The wider kept-ratio curve at the same cache (the report's speedup-vs-kept chart).
KEPT_SWEEP = [dict(c, keep=k) for c in BENCH[:1] for k in (0.01, 0.1, 0.2, 0.5, 1.0)]


def make_sparse_paged_inputs(case, gen, views: bool = True, low_extra: float = 0.0, device=None) -> dict:
    """The inputs of a sparse paged case (MagicPIG's too: ``low_extra``, see _dims.shift_scores)."""
    lengths, P = case["lengths"], case["P"]
    indptr, indices, last, num_pages = _paged.page_table(gen, lengths, P, case["placement"], case["pool"])
    cache = _paged.paged_cache(gen, lengths, P, case["Hkv"], case["D"], case.dtype, case["layout"],
                               indptr, indices, num_pages, device)
    q = randn(gen, (len(lengths), case["Hq"], case["D"]), case.dtype)
    ind, nnz = select_tokens(gen, case, lengths)
    vals = case.params.get("vals", RANDN)
    if vals != RANDN:
        positions, lens = _paged.slot_positions(indptr, indices, lengths, P, num_pages)
        q, cache = paged_values(vals, q, cache, case["layout"], positions, lens,
                                    scale=effective_scale(case, case["D"]), low_extra=low_extra)
        ind = listed_last(vals, ind, nnz, torch.tensor(lengths).view(-1, 1, 1))
    inputs = {"q": q, "kv_cache": cache, "kv_page_indptr": indptr, "kv_page_indices": indices,
              "kv_last_page_len": last, "sparse_ind": ind, "sparse_nnz": nnz}
    return apply_views(case, inputs) if views else inputs


def apply_views(case, inputs: dict) -> dict:
    """The case's view of q, the cache and the index arrays (docs/contract.md, "Views")."""
    view = case.params.get("view", CONTIG)
    q, cache = paged_views(view, inputs["q"], inputs["kv_cache"], case["layout"])
    ind, nnz = index_views(view, inputs["sparse_ind"], inputs["sparse_nnz"])
    return {**inputs, "q": q, "kv_cache": cache, "sparse_ind": ind, "sparse_nnz": nnz}


def draw_case(rng) -> dict:
    """A fuzz case of the sparse paged families (magicpig adds its LSH parameters)."""
    Hq, Hkv = draw_heads(rng)
    P, placement, layout, lengths = draw_page_table(rng)
    return case(dtype=draw_dtype(rng), layout=layout, P=P, placement=placement, lengths=lengths, Hq=Hq, Hkv=Hkv,
                D=draw_head_dim(rng), lse=rng.random() < 0.7, view=draw_view(rng, PAGED_VIEWS),
                vals=draw_vals(rng), **draw_selection(rng))


def paged_args(inputs) -> tuple:
    return (inputs["q"], inputs["kv_cache"], inputs["kv_page_indptr"], inputs["kv_page_indices"],
            inputs["sparse_ind"], inputs["sparse_nnz"])


class SparsePagedDecode(SparseDecodeBench, Family):
    name = "sparse_paged_decode"
    interface = Interface(
        ("q", "kv_cache", "kv_page_indptr", "kv_page_indices", "sparse_ind", "sparse_nnz"),
        ("layout", "kv_last_page_len", *ATTENTION_KEYWORDS), "(o [B, Hq, D], lse [B, Hq] fp32 or None)",
        arguments=("q [B, Hq, D]; kv_cache and page table as paged_decode",
                   "sparse_ind [B, Hq, L_max] int32: logical token positions of sequence b (page "
                   "indices[indptr[b] + t // P], slot t % P); sparse_nnz [B, Hq] int32 as sparse_decode"),
        notes=SCALE_NOTE)
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"])
                   + make_cases(name, label, KEPT_SWEEP, profile="full", tags=["sweep", "kept"]))
    impls = {"triton": sparse_paged_decode}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        return draw_case(rng)

    def fuzz_classes(self, params, rng):
        return draw_classes(rng, params, gqa=True, pages=True)

    def make_inputs(self, case, gen, device=None):
        return make_sparse_paged_inputs(case, gen, device=device)

    def output_specs(self, case, inputs):
        B, Hq, D = inputs["q"].shape
        return attention_outputs(case, (B, Hq, D), (B, Hq))

    def call(self, impl, case, inputs, outputs):
        o, lse = impl(*paged_args(inputs), layout=case["layout"], kv_last_page_len=inputs["kv_last_page_len"],
                      scale=case_scale(case), return_lse=case["lse"], out=outputs["o"], lse=outputs.get("lse"))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        if case["vs"] == "paged_decode":
            o, lse = paged_decode_reference(inputs["q"], inputs["kv_cache"], inputs["kv_page_indptr"],
                                            inputs["kv_page_indices"], inputs["kv_last_page_len"],
                                            layout=case["layout"], scale=case_scale(case),
                                            compute_dtype=compute_dtype)
        else:
            o, lse = sparse_paged_decode_reference(*paged_args(inputs), layout=case["layout"],
                                                   scale=case_scale(case), compute_dtype=compute_dtype)
        return lse_if(case, o, lse)


    def score_bound(self, case, inputs):
        keys = _paged.token_view(inputs["kv_cache"], case["layout"])[:, 0]
        return score_bound(inputs["q"], keys, effective_scale(case, case["D"]))


FAMILY = SparsePagedDecode()
