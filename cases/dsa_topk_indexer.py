"""DeepSeek's lightning indexer (kernels.md section 12): an fp8 logit per cached token of each
sequence, ``sum_h weights[b, h] * relu(q_idx[b, h] . k_idx[t] * k_scale[t])``, and the top
``topk`` positions.

The output is a set, so this family compares with its own rule (``compare``; docs/dsa.md):
per row, the first n = min(topk, seq_len) entries are distinct positions in [0, seq_len), the
rest -1, and every chosen position c satisfies ``L[c] >= L_k - (e[c] + max_{u in R} e[u])``
where L are the reference's float64 logits, L_k the k-th largest, R the reference's top-n, and
``e[t] = FACTOR * (Di + Hi + 2) * u32 * A[t]`` bounds the fp32 error of any summation order
(``A[t] = sum_h |w_h| |k_scale_t| sum_d |q_hd k_td|``; fp8 products are exact in fp32). The
logits, where an implementation returns them, must be within ``e`` of the reference, -inf past
seq_len. A failing row lists the positions missed and extra with their reference logits.

Cases: both layouts of the index-key cache (plain fp8 + fp32 scales; FlashInfer's packed pages,
``[num_pages, page_size, 1, 132]`` bytes holding each page's fp8 rows then its fp32 scales), page sizes 1, 12, 64, seq_len < topk, seq_len = 0, topk not a power of two,
exact and near ties at the k-th logit (``ties``: any choice among them is right), a clear winner
at the first or last position (``winner``), fp8 edge values (448, subnormals) with NaN codes in
the slots no token owns (``edges``), key scales far from 1 (``kscale``), negative weights.
"""
from __future__ import annotations

import math

import torch

from attnsuite.case import make_cases, unique
from attnsuite.family import Family
from attnsuite.interfaces import Interface
from attnsuite.tolerance import FACTOR, UNIT_ROUNDOFF
from kernels.dsa_topk_indexer import dsa_topk_indexer
from cases._dims import CONTIG, SLACK, embed, index_view, view_label
from references.dsa import (PACKED_DIM, PACKED_ROW, dsa_indexer_logits_reference, dsa_topk_reference,
                            indexer_error_bound)

FP8 = torch.float8_e4m3fn
#: The byte of an e4m3fn NaN (0x7F; 0xFF is the other).
FP8_NAN = 0x7F
VALS = ("randn", "ties", "winner", "edges")
#: Key-scale magnitudes: per-token scales drawn around 1, or spread over 1/64 .. 8.
KSCALES = ("unit", "far")
#: Shown per failing row: this many missed and extra positions.
SHOWN = 6


#: pool: the index-key cache (and its scales) pages SLACK.. of a larger pool, q_idx heads of a
#: wider projection, weights and block-table rows longer than needed (stale in-range pages).
VIEWS = ("pool",)


def label(p) -> str:
    lens = "_".join(map(str, p["lengths"]))
    return (f"{p['layout']}-Hi{p['Hi']}-Di{p['Di']}-P{p['P']}-L{lens}-topk{p['topk']}-{p.get('vals', 'randn')}"
            f"{'-kscale_far' if p['kscale'] == 'far' else ''}{'-logits' if p['logits'] else ''}{view_label(p)}")


def case(layout="plain", Hi=8, Di=128, P=16, lengths=(100, 37), topk=24, vals="randn", kscale="unit",
         logits=True, extra_pages=1, view=CONTIG):
    if layout == "packed" and Di != PACKED_DIM:
        raise ValueError("the packed layout holds Di = 128")
    return dict(dtype="fp32", layout=layout, Hi=Hi, Di=Di, P=P, lengths=tuple(lengths), topk=topk, vals=vals,
                kscale=kscale, logits=logits, extra_pages=extra_pages, view=view)


QUICK = (
    [case(layout=lay) for lay in ("plain", "packed")]
    + [case(lengths=(10, 0, 30), topk=24), case(lengths=(0,), topk=8), case(topk=37, lengths=(200,))]
    + [case(P=1, lengths=(40, 9)), case(Hi=64, P=64, lengths=(130,), topk=64, layout="packed"),
       case(P=12, lengths=(50, 25))]
    + [case(vals=v, layout=lay) for v in ("ties", "winner", "edges") for lay in ("plain", "packed")]
    + [case(kscale="far", vals="edges"),
       case(Hi=4, Di=32, lengths=(70, 3), topk=5), case(vals="winner", lengths=(65,), topk=1, logits=False)]
    + [case(layout=lay, view=v) for v in VIEWS for lay in ("plain", "packed")]
)

FULL = (
    [case(layout=lay, Hi=64, Di=128, P=P, lengths=lens, topk=k, vals=v)
     for lay in ("plain", "packed") for P in (1, 64) for lens in ((9000, 2048, 100, 0), (30000,))
     for k in (2048, 1000) for v in VALS]
    + [case(layout=lay, Hi=64, Di=128, P=64, lengths=(12000, 3000), topk=2048, kscale="far", vals="edges")
       for lay in ("plain", "packed")]
)

#: The spec's bench: Hi=64, Di=128, topk=2048 over 8k-128k tokens (FlashInfer's packed rows, page 64).
BENCH = [case(layout="packed", Hi=64, Di=128, P=64, lengths=lens, topk=2048, logits=False)
         for lens in ((8192,), (32768,), (131072,), (8192,) * 8, (32768,) * 4)]


# --- inputs ----------------------------------------------------------------------------------

def page_tables(gen, lengths, P: int, extra: int):
    """(block_table [B, max_pages] int32, num_pages): each sequence's pages drawn without
    repetition from a pool twice the need; entries past a sequence's pages are stale in-range
    pages (an implementation must not read them)."""
    counts = [math.ceil(n / P) for n in lengths]
    num_pages = 2 * sum(counts) + 3
    width = max(counts, default=0) + extra
    table = torch.randint(0, num_pages, (len(lengths), width), generator=gen, dtype=torch.int64)
    pages = torch.randperm(num_pages, generator=gen)[:sum(counts)]
    at = 0
    for b, c in enumerate(counts):  # a handful of sequences
        table[b, :c] = pages[at:at + c]
        at += c
    return table.to(torch.int32), num_pages


def owned_slots(table, lengths, P: int, num_pages: int) -> torch.Tensor:
    """bool [num_pages, P]: the slots that hold a token of some sequence."""
    owned = torch.zeros(num_pages * P, dtype=torch.bool)
    for b, n in enumerate(lengths):
        pos = torch.arange(n)
        owned[table[b, pos // P].long() * P + pos % P] = True
    return owned.view(num_pages, P)


def fp8_edges(gen, shape) -> torch.Tensor:
    """Values at e4m3's edges: a quarter +-448 (its largest finite), a quarter subnormal
    (m * 2^-9), the rest standard normal."""
    x = torch.randn(shape, generator=gen)
    pick = torch.rand(shape, generator=gen)
    sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1.0, 1.0)
    sub = torch.randint(1, 8, shape, generator=gen).float() * 2.0**-9
    x = torch.where(pick < 0.25, 448.0 * sign, x)
    return torch.where((pick >= 0.25) & (pick < 0.5), sub * sign, x)


def index_inputs(gen, case, table, num_pages, owned, batch: int):
    """q_idx, the index-key cache in the case's layout, k_scale (None when packed), weights."""
    Hi, Di, P = case["Hi"], case["Di"], case["P"]
    vals = case["vals"]
    q = torch.randn((batch, Hi, Di), generator=gen) * 2
    weights = torch.randn((batch, Hi), generator=gen)
    if vals == "edges":
        q, k = fp8_edges(gen, (batch, Hi, Di)), fp8_edges(gen, (num_pages, P, Di))
    else:
        k = torch.randn((num_pages, P, Di), generator=gen) * 2
    scales = 0.5 + torch.rand((num_pages, P), generator=gen)
    if case["kscale"] == "far":
        scales = scales * torch.where(torch.rand((num_pages, P), generator=gen) < 0.5, 1 / 64, 8.0)
    if vals == "ties":
        # Three distinct key rows: the logits take three values (plus ~2^-21 relative from the
        # scales), so the k-th logit is tied many times over; any choice among the tied is right.
        rows = torch.randn((3, Di), generator=gen) * 2
        k = rows[torch.randint(0, 3, (num_pages, P), generator=gen)]
        scales = 1.0 + torch.rand((num_pages, P), generator=gen) * 2.0**-21
    q8, k8 = q.to(FP8), k.to(FP8)
    if vals == "winner":
        # One token a sequence (the last one on even rows, the first on odd) far above the rest.
        weights = weights.abs()
        lengths = case["lengths"]
        for b, n in enumerate(lengths):
            if n == 0:
                continue
            pos = n - 1 if b % 2 == 0 else 0
            page, slot = int(table[b, pos // P]), pos % P
            direction = (weights[b, :, None] * q8[b].float()).sum(0)
            k8[page, slot] = (direction / direction.abs().max() * 448).to(FP8)
            scales[page, slot] = 8.0
    # Slots no token owns: NaN codes and NaN scales (reading one poisons a logit).
    k8 = k8.view(torch.uint8).masked_fill(~owned[..., None], FP8_NAN).view(FP8)
    scales = scales.masked_fill(~owned, float("nan"))
    if case["layout"] == "packed":
        # Per page: its P rows of fp8 values, then its P fp32 scales (DeepGEMM's layout).
        packed = torch.empty((num_pages, P * PACKED_ROW), dtype=torch.uint8)
        packed[:, :P * PACKED_DIM] = k8.view(torch.uint8).reshape(num_pages, P * PACKED_DIM)
        packed[:, P * PACKED_DIM:] = scales.contiguous().view(torch.uint8).reshape(num_pages, 4 * P)
        return {"q_idx": q8, "k_cache": packed.view(num_pages, P, 1, PACKED_ROW), "weights": weights}
    return {"q_idx": q8, "k_cache": k8, "k_scale": scales, "weights": weights}


def make_indexer_inputs(case, gen) -> dict:
    lengths, P = case["lengths"], case["P"]
    table, num_pages = page_tables(gen, lengths, P, case["extra_pages"])
    owned = owned_slots(table, lengths, P, num_pages)
    inputs = index_inputs(gen, case, table, num_pages, owned, len(lengths))
    inputs.update(seq_lens=torch.tensor(lengths, dtype=torch.int32), block_table=table)
    return apply_view(case, inputs, num_pages)


def apply_view(case, inputs: dict, num_pages: int) -> dict:
    """The case's legal views (``VIEWS``)."""
    if case.params.get("view", CONTIG) == CONTIG:
        return inputs
    out = dict(inputs)
    cache = inputs["k_cache"]
    pool = (num_pages + 2 * SLACK, *cache.shape[1:])
    pages = (slice(SLACK, SLACK + num_pages),)
    if cache.dtype == torch.uint8:
        out["k_cache"] = embed(cache, pool, pages, FP8_NAN)
    else:
        out["k_cache"] = embed(cache.view(torch.uint8), pool, pages, FP8_NAN).view(FP8)
        out["k_scale"] = embed(inputs["k_scale"], (pool[0], cache.shape[1] + 1), pages + (slice(0, cache.shape[1]),),
                               float("nan"))
    q = inputs["q_idx"]
    wide = (q.shape[0], q.shape[1] + 2, q.shape[2])
    out["q_idx"] = embed(q.view(torch.uint8), wide, (slice(None), slice(1, 1 + q.shape[1])), FP8_NAN).view(FP8)
    w = inputs["weights"]
    out["weights"] = embed(w, (w.shape[0], w.shape[1] + 3), (slice(None), slice(0, w.shape[1])), float("nan"))
    out["block_table"] = index_view(inputs["block_table"], 0)
    return out


# --- the pair (cases/dsa_sparse_attention.py): indexer inputs over the latent cache's pages ------

def pair_inputs(gen, case, slots, P: int, num_pages: int) -> dict:
    """Indexer inputs whose pages are the latent cache's (``slots`` [S, max_ctx] flat ids of each
    sequence's positions): Hi=8, Di=128, plain layout."""
    lengths = case["ctx"]
    counts = [math.ceil(n / P) for n in lengths]
    width = max(max(counts, default=0), 1)
    table = torch.zeros((len(lengths), width), dtype=torch.int32)
    for b, c in enumerate(counts):
        table[b, :c] = (slots[b, torch.arange(c) * P] // P).to(torch.int32)
    owned = owned_slots(table, lengths, P, num_pages)
    params = dict(Hi=8, Di=128, P=P, vals="randn", kscale="unit", layout="plain", lengths=lengths)
    inputs = index_inputs(gen, params, table, num_pages, owned, len(lengths))
    return {f"idx_{k}": v for k, v in inputs.items()} | {
        "idx_seq_lens": torch.tensor(lengths, dtype=torch.int32), "idx_block_table": table}


def _flat(inputs, positions: torch.Tensor) -> torch.Tensor:
    """Logical positions -> flat slot ids of the latent cache (-1 stays; so does anything outside
    the sequences, e.g. the unwritten output of a compile-only call)."""
    slots = inputs["slots"].to(torch.int64)
    inside = (positions >= 0) & (positions < slots.shape[1])
    flat = torch.gather(slots, 1, torch.where(inside, positions, 0).to(torch.int64))
    return torch.where(inside, flat, -1).to(torch.int32)


def pair_ids(case, inputs) -> torch.Tensor:
    """Our indexer's top-k of the pair's inputs, as flat slot ids of the latent cache."""
    idx, _ = dsa_topk_indexer(inputs["idx_q_idx"], inputs["idx_k_cache"], inputs["idx_weights"],
                              inputs["idx_seq_lens"], inputs["idx_block_table"], case["pair"],
                              k_scale=inputs["idx_k_scale"])
    return _flat(inputs, idx)


def reference_pair_ids(case, inputs) -> torch.Tensor:
    logits = dsa_indexer_logits_reference(inputs["idx_q_idx"], inputs["idx_k_cache"], inputs["idx_k_scale"],
                                          inputs["idx_weights"], inputs["idx_seq_lens"], inputs["idx_block_table"])
    return _flat(inputs, dsa_topk_reference(logits, inputs["idx_seq_lens"], case["pair"]))


# --- the set comparison ---------------------------------------------------------------------------

def logit_error_bound(inputs, Hi: int, Di: int) -> torch.Tensor:
    """e [B, N] (float64): FACTOR * (Di + Hi + 2) * u32 * A, A as in the module doc."""
    A = indexer_error_bound(inputs["q_idx"], inputs["k_cache"], inputs.get("k_scale"), inputs["weights"],
                            inputs["seq_lens"], inputs["block_table"])
    return FACTOR * (Di + Hi + 2) * UNIT_ROUNDOFF[torch.float32] * A


def _fmt(positions, logits) -> str:
    shown = [f"{int(p)} ({float(logits[p]):.6g})" for p in positions[:SHOWN]]
    more = f" and {len(positions) - SHOWN} more" if len(positions) > SHOWN else ""
    return ", ".join(shown) + more


def judge_topk(got: torch.Tensor, logits: torch.Tensor, err: torch.Tensor, seq_lens: torch.Tensor,
               topk: int) -> tuple[list[str], dict]:
    """The set rule on every row (module doc): (problems, metrics)."""
    problems, worst, worst_allowed, headroom = [], 0.0, 0.0, math.inf
    got, logits, err = got.cpu().to(torch.int64), logits.cpu(), err.cpu()
    for b, (row, L, e) in enumerate(zip(got, logits, err)):  # rows are few; each is vectorized
        n = min(topk, int(seq_lens[b]))
        head, tail = row[:n], row[n:]
        if not bool((tail == -1).all()):
            problems.append(f"row {b}: entries from {n} = min(topk, seq_len) on must be -1, got "
                            f"{tail[tail != -1][:SHOWN].tolist()}")
            continue
        if bool(((head < 0) | (head >= int(seq_lens[b]))).any()):
            bad = head[(head < 0) | (head >= int(seq_lens[b]))]
            problems.append(f"row {b}: the first {n} entries must be positions in [0, {int(seq_lens[b])}), got "
                            f"{bad[:SHOWN].tolist()}")
            continue
        if head.unique().numel() != n:
            values, counts = head.unique(return_counts=True)
            problems.append(f"row {b}: duplicate positions {values[counts > 1][:SHOWN].tolist()}")
            continue
        if n == 0:
            continue
        order = torch.sort(L, descending=True).indices[:n]
        kth = float(L[order[-1]])
        allowed = e[head] + float(e[order].max())
        short = (kth - L[head]).clamp(min=0)
        worst = max(worst, float(short.max()))
        ratio = torch.where(short > 0, allowed / short.clamp(min=1e-300), math.inf)
        headroom = min(headroom, float(ratio.min()))
        bad = short > allowed
        if bool(bad.any()):
            chosen, ref = set(head.tolist()), set(order.tolist())
            missed = sorted(ref - chosen, key=lambda p: -float(L[p]))
            extra = sorted(chosen - ref, key=lambda p: float(L[p]))
            worst_allowed = float(allowed[bad].min())
            problems.append(f"topk_indices row {b}: {int(bad.sum())} chosen position(s) below the k-th "
                            f"reference logit {kth:.6g} by more than the fp32 bound (largest shortfall "
                            f"{float(short.max()):.3e}, allowed {worst_allowed:.3e}); missed: "
                            f"{_fmt(missed, L)}; extra: {_fmt(extra, L)}")
    return problems, {"max_abs_err": worst, "allowed": worst_allowed, "headroom": headroom}


class DsaTopkIndexer(Family):
    name = "dsa_topk_indexer"
    interface = Interface(
        ("q_idx", "k_cache", "weights", "seq_lens", "block_table", "topk"),
        ("k_scale", "out", "logits", "return_logits"),
        "(topk_indices [B, topk] int32, logits [B, max_pages * page_size] fp32 or None)",
        arguments=("q_idx [B, Hi, Di] fp8 e4m3fn; weights [B, Hi] fp32",
                   "k_cache fp8 [num_pages, page_size, Di] with k_scale fp32 [num_pages, page_size], or "
                   "FlashInfer's packed uint8 [num_pages, page_size, 1, 132] (per page: page_size rows of 128 "
                   "fp8 values, then page_size fp32 scales)",
                   "seq_lens [B] int32, block_table [B, max_pages] int32; topk int",
                   "topk_indices: logical positions < seq_lens[b], any order, -1 past min(topk, seq_len)"),
        notes="judged as a set: right count, no duplicates, in range, every chosen logit >= the k-th "
              "reference logit minus the fp32 error bound (docs/dsa.md)")
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"]))
    impls = {"triton": dsa_topk_indexer}

    def label(self, params):
        return label(params)

    def fuzz(self, rng):
        P = rng.choice((1, 12, 16, 64))
        lengths = tuple(rng.choice((0, rng.randint(1, 64), rng.randint(64, 1500))) for _ in range(rng.randint(1, 3)))
        layout = rng.choice(("plain", "packed"))
        return case(layout=layout, Hi=rng.choice((4, 8, 16, 64)),
                    Di=128 if layout == "packed" else rng.choice((32, 64, 128)), P=P, lengths=lengths,
                    topk=rng.choice((1, 7, 64, 100, 256, 2048)), vals=rng.choice(VALS),
                    kscale=rng.choice(KSCALES), logits=rng.random() < 0.7, extra_pages=rng.choice((0, 1, 3)),
                    view=CONTIG if rng.random() < 0.5 else rng.choice(VIEWS))

    def make_inputs(self, case, gen):
        return make_indexer_inputs(case, gen)

    def output_specs(self, case, inputs):
        B = inputs["q_idx"].shape[0]
        specs = {"topk_indices": ((B, case["topk"]), torch.int32)}
        if case["logits"]:
            specs["logits"] = ((B, inputs["block_table"].shape[1] * case["P"]), torch.float32)
        return specs

    def call(self, impl, case, inputs, outputs):
        idx, logits = impl(inputs["q_idx"], inputs["k_cache"], inputs["weights"], inputs["seq_lens"],
                           inputs["block_table"], case["topk"], k_scale=inputs.get("k_scale"),
                           out=outputs["topk_indices"], logits=outputs.get("logits"),
                           return_logits=case["logits"])
        return {"topk_indices": idx, "logits": logits} if case["logits"] else {"topk_indices": idx}

    def reference(self, case, inputs, compute_dtype):
        logits = dsa_indexer_logits_reference(inputs["q_idx"], inputs["k_cache"], inputs.get("k_scale"),
                                              inputs["weights"], inputs["seq_lens"], inputs["block_table"],
                                              compute_dtype=compute_dtype)
        out = {"topk_indices": dsa_topk_reference(logits, inputs["seq_lens"], case["topk"])}
        return {**out, "logits": logits} if case["logits"] else out

    def compare(self, case, inputs, produced, reference, result):
        """The set rule for the indices, the fp32 bound for the logits (module doc)."""
        err = logit_error_bound(inputs, case["Hi"], case["Di"])
        logits = dsa_indexer_logits_reference(inputs["q_idx"], inputs["k_cache"], inputs.get("k_scale"),
                                              inputs["weights"], inputs["seq_lens"], inputs["block_table"])
        problems = []
        got = produced.get("topk_indices")
        if got is None or tuple(got.shape) != (logits.shape[0], case["topk"]):
            shape = None if got is None else list(got.shape)
            return [f"topk_indices: expected shape [{logits.shape[0]}, {case['topk']}], got {shape}"]
        found, metrics = judge_topk(got, logits, err, inputs["seq_lens"], case["topk"])
        problems += found
        result.metrics["topk_indices"] = metrics
        if case["logits"]:
            problems += _judge_logits(produced.get("logits"), logits, err, result)
        result.headroom = min(m["headroom"] for m in result.metrics.values())
        result.tolerance = {"policy": "set rule: chosen >= k-th - (e[c] + max e[R]); e = "
                                      f"{FACTOR:g} (Di + Hi + 2) u32 A",
                            "factor": FACTOR, "unit_roundoff": UNIT_ROUNDOFF[torch.float32],
                            "floor": 0.0}
        return problems

    def work(self, case, inputs):
        tokens = sum(case["lengths"])
        key_bytes = PACKED_ROW if case["layout"] == "packed" else case["Di"] + 4
        return {"flops": 2 * tokens * case["Hi"] * case["Di"], "bytes": tokens * key_bytes}


def _judge_logits(got, ref, err, result) -> list[str]:
    if got is None:
        return ["logits: the implementation returned no logits"]
    if tuple(got.shape) != tuple(ref.shape):
        return [f"logits: shape {list(got.shape)} != reference shape {list(ref.shape)}"]
    got = got.to(torch.float64)
    finite = torch.isfinite(ref)
    if not bool((got[~finite] == ref[~finite]).all()):
        return ["logits: positions at or past seq_len must be -inf"]
    diff = torch.where(finite, (got - ref).abs(), 0.0)
    diff = torch.where(finite & torch.isnan(got), math.inf, diff)
    bound = torch.where(finite, err, 0.0)
    worst = float(diff.max()) if diff.numel() else 0.0
    over = diff > bound
    ratio = torch.where(diff > 0, bound / diff.clamp(min=1e-300), math.inf)
    result.metrics["logits"] = {"max_abs_err": worst, "allowed": float(bound.max()) if bound.numel() else 0.0,
                                "headroom": float(ratio.min()) if ratio.numel() else math.inf}
    if bool(over.any()):
        at = tuple(int(i) for i in over.nonzero()[0])
        return [f"logits: error {float(diff[at]):.3e} > fp32 bound {float(bound[at]):.3e} at {at}: "
                f"got {float(got[at]):.6g}, reference {float(ref[at]):.6g}"]
    return []


FAMILY = DsaTopkIndexer()
