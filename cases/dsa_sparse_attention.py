"""DeepSeek sparse attention over a paged latent cache (kernels.md section 12): each query token
lists ``topk`` flat slot ids (``page * page_size + slot``) of the MLA cache; -1 anywhere means
none; repeats count once per occurrence; a row listing none gives o = 0, lse = -inf.

Cases: decode (one query per sequence, T = B) and prefill (``nq`` queries per sequence, each
seeing its causal prefix, T = all of them); index rows drawn from the slots a query may see,
in random order, with -1 holes anywhere (``holes``), rows listing none (``empty``), repeated
ids (``dup``) and lists longer than what a query sees (the rest -1); the two caches as views of
one fused ``[.., Dc + Dr]`` buffer, as separate tensors, or as a pool whose pages hold more slot
strides than ``page_size`` (``slotpad``: flat ids are then not row numbers); the shared value
distributions and scales (cases/_dims.py); fp8 latent caches (``kv``: the MLA families' classes,
cases/_mla.py, with their k_scale / v_scale). Slots no token owns hold NaN (both fp8 NaN
encodings in an fp8 cache).

Latent dims: the interface takes any Dc (multiple of 16, <= 512) and Dr (multiple of 16, <=
128); most quick cases use Dc=64, Dr=16 for the interpreter's sake, a few the real 512/64.

``pair`` cases run the indexer first (cases/dsa_topk_indexer.py's inputs, our indexer kernel),
turn its logical positions into flat ids and hand them to the implementation: conformance judges
the attention over the indices it was given; the quality section reports how far that result is
from dense MLA attention restricted to the reference's own top-k.
"""
from __future__ import annotations

import math

import torch

from attnsuite.case import make_cases, unique
from attnsuite.family import Family
from attnsuite.interfaces import Interface
from attnsuite.pairwise import pairwise
from kernels.dsa_sparse_attention import dsa_sparse_attention
from references.dsa import dsa_sparse_attention_reference

from . import _mla
from ._attention import lse_if, randn
from ._dims import (CONTIG, EXTREMES, RANDN, SCALES, SHIFTS, SPLIT_EXTREME, VALUES, ZERO_EVERY, ZERO_FIRST, case_scale,
                    cancel_values, dims_label, index_view, large_queries, late_last, late_mask, offset_values, pairwise_legal,
                    scale_late, second_half, shift_scores, zero_query)

#: Value distributions this family draws (cases/_dims.py): the latent rows are keys and values at
#: once, so ``offset`` and ``cancel`` move the scores too.
DSA_VALUES = (*VALUES, *EXTREMES)
CACHES = ("fused", "separate", "slotpad")
#: fusedq: q_nope and q_pe as the two parts of one fused [T, H, Dc + Dr] projection, and the index
#: rows as the first topk entries of longer rows holding stale valid ids.
VIEWS = ("fusedq",)


def label(p) -> str:
    ctx = "_".join(map(str, p["ctx"]))
    sel = "".join(f"-{flag}" for flag in ("empty", "dup") if p[flag])
    holes = f"-holes{p['holes']:g}" if p["holes"] else ""
    nq = f"-nq{p['nq']}" if p["mode"] == "prefill" else ""
    pair = f"-pair_k{p['pair']}" if p.get("pair") else ""
    kv = "" if p.get("kv", "same") == "same" else f"-kv_{p['kv']}"
    return (f"{p['dtype']}-{p['mode']}{nq}-H{p['H']}-Dc{p['Dc']}-Dr{p['Dr']}-P{p['P']}-ctx{ctx}-topk{p['topk']}-"
            f"{p['cache']}{kv}{holes}{sel}{'-lse' if p['lse'] else ''}{pair}{dims_label(p)}")


def case(dtype="fp16", mode="decode", nq=1, H=16, Dc=64, Dr=16, P=16, ctx=(90, 200), topk=40, cache="fused",
         holes=0.0, empty=False, dup=False, lse=True, vals=RANDN, scale="mla", pool=None, pair=0, view=CONTIG,
         kv="same"):
    # Every case names its cache dtype (``kv``; the ledger's fp8 entries select by it); the ids
    # of 16-bit cases do not show it.
    return dict(dtype=dtype, mode=mode, nq=nq if mode == "prefill" else 1, H=H, Dc=Dc, Dr=Dr, P=P,
                ctx=tuple(ctx), topk=topk, cache=cache, holes=holes, empty=empty, dup=dup, lse=lse, vals=vals,
                scale=scale, pool=pool, pair=pair, view=view, kv=kv)


def cache_scales(case) -> tuple[float, float]:
    """(k_scale, v_scale) of the case's cache class (1, 1 for a cache in q's dtype)."""
    return _mla.CACHES[case.params.get("kv", "same")]


#: Every pair of: a softmax scale (the default 1/sqrt(Dc + Dr), not the catalog's MLA default, among
#: them), decode or prefill, the cache's form, q and the index rows as views or not, (contexts, topk)
#: (a one-token sequence; an empty one; a list past one split), the page size, holes in the index
#: rows, the heads, a value distribution and the LSE on or off.
PAIRWISE = [case(scale=r["scale"], mode=r["mode"], nq=2, cache=r["cache"], view=r["view"], ctx=r["sel"][0],
                 topk=r["sel"][1], P=r["P"], holes=r["holes"], H=r["H"], vals=r["vals"], lse=r["lse"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "cache": CACHES, "mode": ("decode", "prefill"),
                               "view": (CONTIG, *VIEWS), "sel": (((1, 9), 16), ((40, 0, 17), 24), ((300,), 130)),
                               "P": (16, 12), "holes": (0.0, 0.2), "H": (4, 22, 1), "vals": (RANDN, "large", "pm80"),
                               "lse": (True, False)},
                              # (pm80 alternates its rows over tokens and heads: more than one head)
                              lambda r: pairwise_legal(r) and not (r.get("vals") == "pm80" and r.get("H") == 1))]

QUICK = (
    # Decode and prefill, the cache as one fused buffer, separate tensors, padded pages.
    [case(cache=c) for c in CACHES]
    + [case(mode="prefill", nq=2, ctx=(40, 75), topk=32, cache=c) for c in ("fused", "slotpad")]
    # -1 anywhere in a row, rows listing none, repeated ids, lists longer than the context.
    + [case(holes=0.3), case(empty=True, holes=0.2), case(dup=True, holes=0.2, cache="separate"),
       case(ctx=(5, 30), topk=40), case(ctx=(0, 20), topk=16)]
    # topk not a multiple of the tile, and past one split of the list (lists past 128 slots split
    # in the interpreter too) with scores centred at -130: every split's partial LSE lies where
    # e^x is 0 in fp32, so a merge weighting the splits by e^lse gets 0 / 0.
    + [case(ctx=(300,), topk=65, H=4), case(ctx=(300,), topk=130, H=4, vals=SPLIT_EXTREME)]
    # Head counts (DeepSeek-V3 at 8-way TP: 16; 22 not a power of two; 64, 128 several head groups).
    + [case(H=h, ctx=(70,), topk=24) for h in (1, 22, 128)]
    # Page sizes 1 and 64, and non-powers of two (with padded pages: flat id -> page, slot).
    + [case(P=1, ctx=(30, 50)), case(P=64, ctx=(64, 130)), case(P=12, cache="slotpad", holes=0.1),
       case(P=48, cache="slotpad", mode="prefill", nq=2, ctx=(100,), topk=48)]
    # The real latent dims.
    + [case(Dc=512, Dr=64, H=16, ctx=(200,), topk=64, P=64),
       case(Dc=512, Dr=64, H=22, ctx=(40, 90), topk=33, cache="separate", holes=0.2, mode="prefill", nq=2),
       case(Dc=512, Dr=64, H=2, ctx=(100,), topk=40, P=12, cache="slotpad", lse=False)]
    # Value distributions, scales (the default 1/sqrt(Dc + Dr) too), dtypes.
    + [case(vals=v, H=4) for v in DSA_VALUES]
    + [case(scale=s, H=4, vals=v) for s, v in (("hot", "offset"), ("one", "pm80"))]
    # Every pair of scale x mode x cache x view x (contexts, topk) x page size x holes x heads x values
    # x LSE (PAIRWISE): negative and zero scales meet a one-token sequence, every cache form, the
    # views and a list past one split.
    + PAIRWISE
    + [case(dtype="fp32", H=4), case(dtype="bf16", H=4)]
    # FP8 latent caches: each class once, over the cache forms, decode and prefill, a split list.
    + [case(kv="fp8", H=4, holes=0.2), case(kv="fp8_scaled", cache="slotpad", mode="prefill", nq=2, ctx=(40, 75),
                                             topk=32),
       case(kv="fp8_edge", cache="separate", ctx=(300,), topk=130, H=4),
       case(kv="fp8_scaled", Dc=512, Dr=64, H=16, ctx=(200,), topk=64, P=64)]
    # The pair: indexer -> flat ids -> sparse attention (quality: dense MLA over the reference top-k).
    + [case(ctx=(150, 90), topk=32, pair=16, H=4, P=16)]
)

FULL = (
    [case(dtype=dt, mode=m, nq=nq, H=h, Dc=512, Dr=64, P=P, ctx=ctx, topk=k, cache=c, holes=ho)
     for dt in ("fp16", "bf16") for m, nq, ctx in (("decode", 1, (3000, 1000, 17)), ("prefill", 16, (2100, 700)))
     for h in (16, 64, 128) for P, c in ((1, "fused"), (64, "separate"), (48, "slotpad"))
     for k, ho in ((2048, 0.0), (512, 0.2))]
    + [case(dtype=dt, H=16, Dc=512, Dr=64, P=64, ctx=(4000, 2500), topk=2048, **v) for dt in ("fp16", "bf16")
       for v in (dict(empty=True, holes=0.1), dict(dup=True), dict(vals="large"), dict(vals="pm80"),
                 dict(vals="neg100"), dict(vals="offset"), dict(vals="zeros"), dict(scale="one"))]
    + [case(dtype=dt, H=16, Dc=512, Dr=64, P=64, ctx=(6000, 300), topk=2048, pair=2048) for dt in ("fp16", "bf16")]
    + [case(dtype=dt, mode=m, nq=nq, H=h, Dc=512, Dr=64, P=P, ctx=ctx, topk=k, cache=c, kv=kv)
       for dt in ("fp16", "bf16") for kv in ("fp8", "fp8_scaled", "fp8_edge")
       for m, nq, ctx, h, P, c, k in (("decode", 1, (3000, 1000, 17), 16, 64, "fused", 2048),
                                     ("prefill", 16, (2100, 700), 128, 48, "slotpad", 512))]
)

#: The spec's bench shape: H=16, Dc=512, Dr=64, topk=2048, page 64, T in {1, 64, 128} over caches of
#: 32k-128k tokens (T decode rows over sequences of those lengths).
BENCH = [case(dtype="bf16", H=16, Dc=512, Dr=64, P=64, ctx=(n,) * T, topk=2048, lse=False, scale="mla", kv=kv)
         for T, n in ((1, 131072), (64, 1024), (128, 512)) for kv in ("same", "fp8")] + \
        [case(dtype="bf16", H=16, Dc=512, Dr=64, P=64, ctx=(32768,), mode="prefill", nq=64, topk=2048, lse=False)]


def _scale(case, Dc, Dr):
    """The case's softmax scale: the _dims names over the query-key dim Dc + Dr."""
    return case_scale(case, Dc + Dr)


def sequence_slots(gen, ctx, P: int, pool):
    """Each sequence's pages drawn from a pool (scattered) -> (slot ids [S, max_ctx] int64 of each
    logical position, -1 past the context; num_pages)."""
    counts = [math.ceil(n / P) for n in ctx]
    num_pages = pool if pool is not None else 2 * sum(counts) + 3
    pages = torch.randperm(num_pages, generator=gen)[:sum(counts)]
    width = max(max(ctx, default=0), 1)
    slots = torch.full((len(ctx), width), -1, dtype=torch.int64)
    at = 0
    for s, (n, c) in enumerate(zip(ctx, counts)):  # a handful of sequences: their page lists
        pos = torch.arange(n)
        slots[s, :n] = pages[at:at + c][pos // P] * P + pos % P
        at += c
    return slots, num_pages


def select_ids(gen, case, slots) -> torch.Tensor:
    """The index rows [T, topk] int32: flat ids of positions each query sees, in random order;
    -1 past what it sees, then the case's holes, empty rows and repeats."""
    ctx, nq, topk = case["ctx"], case["nq"], case["topk"]
    S, width = slots.shape
    ctx_t = torch.tensor(ctx, dtype=torch.int64).repeat_interleave(nq)                # [T]
    i = torch.arange(nq).repeat(S)
    visible = (ctx_t - nq + i + 1).clamp(min=0)                                       # causal, bottom-right
    T = S * nq
    keys = torch.rand((T, width), generator=gen)
    keys = torch.where(torch.arange(width)[None, :] < visible[:, None], keys, 2.0)
    order = keys.argsort(dim=1)
    take = min(topk, width)
    pos = order[:, :take]
    seen = torch.gather(keys, 1, pos) < 2.0
    row_slots = slots.repeat_interleave(nq, dim=0)
    ids = torch.where(seen, torch.gather(row_slots, 1, pos), -1)
    ids = torch.cat([ids, torch.full((T, topk - take), -1, dtype=torch.int64)], dim=1)
    ids = ids[:, torch.randperm(topk, generator=gen)]                                 # -1 spread over the row
    if case["dup"]:
        half = topk // 2
        src = torch.randint(0, max(half, 1), (T, topk - half), generator=gen)
        ids[:, half:] = torch.gather(ids[:, :max(half, 1)], 1, src)
    if case["holes"]:
        ids = torch.where(torch.rand((T, topk), generator=gen) < case["holes"], -1, ids)
    if case["empty"]:
        ids[0] = -1
    return ids.to(torch.int32)


def slot_positions(slots, ctx, shape):
    """(position, sequence length) of every cache slot, shaped [pages, P] (-1 / 0: no token)."""
    pos = torch.full((shape[0] * shape[1],), -1, dtype=torch.int64)
    length = torch.zeros_like(pos)
    for s, n in enumerate(ctx):  # a handful of sequences
        pos[slots[s, :n]] = torch.arange(n)
        length[slots[s, :n]] = n
    return pos.view(shape), length.view(shape)


def latent_values(case, gen, q_nope, q_pe, rows, owned, scale, positions=None):
    """(q_nope, q_pe, rows [.., Dc + Dr]) moved to the case's value distribution; ``positions``
    (each slot's position and sequence length) for ``late`` and ``cancel``."""
    vals = case["vals"]
    Dc = q_nope.shape[-1]
    if vals == RANDN:
        return q_nope, q_pe, rows
    if vals == "late":
        pos, length = positions
        return q_nope, q_pe, scale_late(rows, owned & late_mask(pos, length))
    if vals == "cancel":
        pos, length = positions
        return q_nope, q_pe, cancel_values(rows, owned & second_half(pos, length))
    if vals == "large":
        return large_queries(q_nope), large_queries(q_pe), rows
    if vals == "offset":
        return q_nope, q_pe, offset_values(rows)
    if vals == "zeros":
        pos = torch.arange(rows.shape[0] * rows.shape[1]).view(rows.shape[:2])
        rows = rows.masked_fill(((pos % ZERO_EVERY == ZERO_FIRST) & owned)[..., None], 0)
        return zero_query(q_nope), zero_query(q_pe), rows
    if vals in SHIFTS:
        q = torch.cat([q_nope, q_pe], -1)
        q, rows = shift_scores(vals, q, rows, scale)
        return q[..., :Dc], q[..., Dc:], rows
    raise ValueError(f"unknown value distribution {vals!r}")


def cache_views(case, fused: torch.Tensor):
    """(ckv_cache, kpe_cache) as the case's layout of the same values."""
    Dc = case["Dc"]
    if case["cache"] == "fused":
        return fused[..., :Dc], fused[..., Dc:]
    if case["cache"] == "separate":
        return fused[..., :Dc].contiguous(), fused[..., Dc:].contiguous()
    # slotpad: each page of a pool holds 2 more slots than page_size (flat ids are not row numbers).
    pages, P, W = fused.shape
    buf = torch.full((pages, P + 2, W), float("nan"), dtype=fused.dtype)
    buf[:, 1:P + 1] = fused
    return buf[:, 1:P + 1, :Dc], buf[:, 1:P + 1, Dc:]


def make_dsa_inputs(case, gen) -> dict:
    Dc, Dr, P, H = case["Dc"], case["Dr"], case["P"], case["H"]
    slots, num_pages = sequence_slots(gen, case["ctx"], P, case["pool"])
    T = len(case["ctx"]) * case["nq"]
    owned = torch.zeros(num_pages * P, dtype=torch.bool)
    owned[slots[slots >= 0]] = True
    owned = owned.view(num_pages, P)
    rows = randn(gen, (num_pages, P, Dc + Dr), case.dtype)
    q_nope = randn(gen, (T, H, Dc), case.dtype)
    q_pe = randn(gen, (T, H, Dr), case.dtype)
    scale = _scale(case, Dc, Dr) or 1.0 / math.sqrt(Dc + Dr)
    positions = slot_positions(slots, case["ctx"], (num_pages, P))
    q_nope, q_pe, rows = latent_values(case, gen, q_nope, q_pe, rows, owned, scale, positions)
    rows = rows.masked_fill(~owned[..., None], float("nan"))  # slots no token owns
    if case.params.get("kv", "same") != "same":
        rows = _mla.fp8_cache(gen, randn(gen, rows.shape, torch.float32), case["kv"], owned)
    ckv, kpe = cache_views(case, rows)
    inputs = {"q_nope": q_nope, "q_pe": q_pe, "ckv_cache": ckv, "kpe_cache": kpe}
    if case["pair"]:
        from . import dsa_topk_indexer as indexer

        inputs.update(indexer.pair_inputs(gen, case, slots, P, num_pages))
        inputs["slots"] = slots.to(torch.int32)
        return inputs
    ids = select_ids(gen, case, slots)
    if case["vals"] in ("late", "cancel"):
        # The marked slots listed last, so a row meets them after the others (cases/_dims.py).
        pos, length = positions
        marked = late_mask(pos, length) if case["vals"] == "late" else second_half(pos, length)
        flat = (marked & owned).reshape(-1)
        late = torch.where(ids >= 0, flat[ids.clamp(min=0).long()], False)
        ids = late_last(ids, torch.full(ids.shape[:1], ids.shape[1]), late)
    inputs["sparse_indices"] = ids
    return apply_view(case, inputs)


def apply_view(case, inputs: dict) -> dict:
    """The case's view of q and the index rows (``VIEWS``)."""
    if case.params.get("view", CONTIG) == CONTIG:
        return inputs
    q_nope, q_pe, ids = inputs["q_nope"], inputs["q_pe"], inputs["sparse_indices"]
    T, H, Dc = q_nope.shape
    fused = torch.full((T, H, Dc + q_pe.shape[-1]), float("nan"), dtype=q_nope.dtype)
    fused[..., :Dc], fused[..., Dc:] = q_nope, q_pe
    valid = ids[ids >= 0]
    stale = int(valid[0]) if valid.numel() else -1
    return {**inputs, "q_nope": fused[..., :Dc], "q_pe": fused[..., Dc:], "sparse_indices": index_view(ids, stale)}


def args(inputs) -> tuple:
    return (inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"], inputs["kpe_cache"], inputs["sparse_indices"])


def draw_case(rng) -> dict:
    ctx_n = rng.choice((1, 2, 3))
    P = rng.choice((1, 16, 64, 12, 48))
    ctx = tuple(rng.choice((0, rng.randint(1, 40), rng.randint(40, 700))) for _ in range(ctx_n))
    mode = "prefill" if rng.random() < 0.3 else "decode"
    real = rng.random() < 0.25
    p = case(dtype="bf16" if rng.random() < 0.15 else "fp16", mode=mode, nq=rng.randint(1, 4),
                H=rng.choice((1, 4, 16, 22, 64, 128) if not real else (16, 22, 64)),
                Dc=512 if real else rng.choice((16, 64, 128)), Dr=64 if real else rng.choice((16, 32)),
                P=P, ctx=ctx, topk=rng.choice((1, 16, 63, 64, 65, 130, 300, 600)),
                cache=rng.choice(CACHES), holes=rng.choice((0.0, 0.0, 0.1, 0.5)), empty=rng.random() < 0.2,
                dup=rng.random() < 0.3, lse=rng.random() < 0.7,
                vals=RANDN if rng.random() < 0.4 else rng.choice(DSA_VALUES),
                scale=rng.choice((None, *SCALES)), view=CONTIG if rng.random() < 0.5 else rng.choice(VIEWS))
    if p["dtype"] == "bf16":
        # On cpu a bf16 tl.dot is the interpreter's known failure, a strict one: the draw makes sure
        # the scores matter (a row listing two distinct slots), so the failure shows where it exists.
        p.update(holes=0.0, dup=False, empty=False, topk=max(p["topk"], 16), mode="decode", nq=1,
                 ctx=(max(p["ctx"][0], 40), *p["ctx"][1:]), vals=RANDN if p["vals"] == "zeros" else p["vals"])
    return p


class DsaSparseAttention(Family):
    name = "dsa_sparse_attention"
    interface = Interface(
        ("q_nope", "q_pe", "ckv_cache", "kpe_cache", "sparse_indices"), ("scale", "return_lse", "out", "lse"),
        "(o [T, H, Dc], lse [T, H] fp32 or None)",
        arguments=("q_nope [T, H, Dc], q_pe [T, H, Dr]  fp16 | bf16 | fp32",
                   "ckv_cache [num_pages, page_size, Dc], kpe_cache [num_pages, page_size, Dr]  q's dtype, or both "
                   "float8_e4m3fn with k_scale / v_scale keywords (fp32 per-tensor factors, passed on fp8 cases "
                   "only); possibly views of one fused [.., Dc + Dr] buffer",
                   "sparse_indices [T, topk] int32: flat slot ids page * page_size + slot, -1 = none anywhere, "
                   "repeats count once per occurrence; a row listing none gives o = 0, lse = -inf"),
        notes="scale: float or None (None: 1/sqrt(Dc + Dr)); the catalogs mostly pass 1/sqrt(1.5 (Dc + Dr)), "
              "and 4/sqrt(Dc + Dr), 1.0")
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": dsa_sparse_attention}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        return draw_case(rng)

    def make_inputs(self, case, gen):
        return make_dsa_inputs(case, gen)

    def output_specs(self, case, inputs):
        T, H, Dc = inputs["q_nope"].shape
        specs = {"o": ((T, H, Dc), case.dtype)}
        if case["lse"]:
            specs["lse"] = ((T, H), torch.float32)
        return specs

    def call(self, impl, case, inputs, outputs):
        if case["pair"]:
            # The indexer's choice becomes the case's index rows (the reference reads them too).
            inputs["sparse_indices"] = _pair_ids(case, inputs)
        Dc, Dr = case["Dc"], case["Dr"]
        o, lse = impl(*args(inputs), scale=_scale(case, Dc, Dr), return_lse=case["lse"], out=outputs["o"],
                      lse=outputs.get("lse"), **fp8_keywords(case))
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        if "sparse_indices" not in inputs:
            inputs["sparse_indices"] = _pair_ids(case, inputs)
        o, lse = dsa_sparse_attention_reference(*args(inputs), scale=_scale(case, case["Dc"], case["Dr"]),
                                                **fp8_keywords(case), compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        scale = _scale(case, case["Dc"], case["Dr"]) or 1.0 / math.sqrt(case["Dc"] + case["Dr"])
        return _mla.latent_score_bound(inputs, scale, cache_scales(case)[0])

    def quality(self, case, inputs, produced):
        """Pair cases: the attention over the indexer's choice against dense MLA attention
        restricted to the reference's top-k (fp64), and how many of those the indexer kept."""
        if not case["pair"]:
            return None
        from references.mustafar import approximation

        from . import dsa_topk_indexer as indexer

        truth_ids = indexer.reference_pair_ids(case, inputs)
        o, _ = dsa_sparse_attention_reference(*args({**inputs, "sparse_indices": truth_ids}),
                                              scale=_scale(case, case["Dc"], case["Dr"]))
        got, want = inputs["sparse_indices"], truth_ids
        kept = [len(set(g[g >= 0].tolist()) & set(w[w >= 0].tolist())) / max(int((w >= 0).sum()), 1)
                for g, w in zip(got, want)]
        return {"vs": "dense MLA over the reference top-k", "topk": case["pair"],
                "recall_min": min(kept, default=1.0), **approximation(produced["o"], o)}

    def work(self, case, inputs):
        ids = inputs.get("sparse_indices")
        listed = int((ids >= 0).sum()) if ids is not None else 0
        H, Dc, Dr = case["H"], case["Dc"], case["Dr"]
        size = inputs["q_nope"].element_size()
        return {"flops": 2 * listed * H * (2 * Dc + Dr),
                "bytes": listed * (Dc + Dr) * size + 2 * inputs["q_nope"].numel() * size}

    def extra_baselines(self, case, inputs, impl):
        """Our MLA decode over a dense paged cache of ``topk`` tokens per query row (the same
        number of latent rows, read contiguously): the target sparse attention is held to."""
        if case["mode"] != "decode":
            return {}
        try:
            from kernels.mla_paged import mla_paged_decode
        except ImportError as exc:  # the MLA family's kernel not in this tree: reported unavailable
            return {"mla_paged_decode": (None, f"kernels.mla_paged not importable here: {exc}")}
        q_nope, q_pe, ckv = inputs["q_nope"], inputs["q_pe"], inputs["ckv_cache"]
        T, P, k = q_nope.shape[0], case["P"], case["topk"]
        pages = math.ceil(k / P)
        # Drawn in fp32 and cast: torch draws no fp8 values itself (an fp8 case's dense cache is fp8 too).
        dense_ckv = torch.randn((T * pages, P, case["Dc"]), device=ckv.device).to(ckv.dtype)
        dense_kpe = torch.randn((T * pages, P, case["Dr"]), device=ckv.device).to(ckv.dtype)
        indptr = torch.arange(0, T * pages + 1, pages, dtype=torch.int32, device=ckv.device)
        indices = torch.arange(T * pages, dtype=torch.int32, device=ckv.device)
        last = torch.full((T,), k - P * (pages - 1), dtype=torch.int32, device=ckv.device)
        scale = _scale(case, case["Dc"], case["Dr"])
        return {"mla_paged_decode": (
            lambda: mla_paged_decode(q_nope, q_pe, dense_ckv, dense_kpe, indptr, indices, last, scale=scale),
            f"kernels.mla_paged.mla_paged_decode over a dense paged cache of {k} tokens a row",
            (T, case["H"], k, str(ckv.dtype)))}


def fp8_keywords(case) -> dict:
    """k_scale / v_scale for an fp8 case; none for a 16-bit one (a kernel without the keywords
    is still called on those)."""
    if case.params.get("kv", "same") == "same":
        return {}
    k_scale, v_scale = cache_scales(case)
    return {"k_scale": k_scale, "v_scale": v_scale}


def _pair_ids(case, inputs) -> torch.Tensor:
    from . import dsa_topk_indexer as indexer

    return indexer.pair_ids(case, inputs)


FAMILY = DsaSparseAttention()
