"""Porting probes (porting_notes.md): each minimal kernel that reproduces a known failure,
and its rewrite, as ordinary cases. A probe whose original starts passing turns its strict
xfail into XPASS: the failure was fixed upstream and the ledger entry can go.

Every probe has an ``original`` (the construct that fails somewhere) and a ``rewrite`` (the
portable form) computing the same output, checked against one plain-torch reference. Case ids
read ``probes[<probe>-<variant>-<dtype>]``, plus the trip count for loop_if_mask.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from attnsuite.case import make_cases
from attnsuite.family import Family
from attnsuite.interfaces import Interface
from kernels.probes import (block_ptr_order, cumsum, early_return, fp8_load, gather_inner_axis, gather_int32,
                            gather_transposed, gathered_index_select, grid_limit, interp_bf16_dot, interp_bf16_round,
                            loop_carried_mask,
                            loop_const_trip, loop_if_mask, loop_reduction_bound, page_div_zero, ub_overflow,
                            while_block_index)

from ._attention import randn

VARIANTS = ("original", "rewrite")


@dataclass(frozen=True)
class Probe:
    """One probe: its two wrappers, how to draw its inputs, its single output, its reference.

    ``kwargs`` names the case parameters the wrappers take besides the input tensors."""
    module: object
    inputs: Callable        # (case, gen) -> {name: tensor}
    output: Callable        # (case, inputs) -> (name, shape, dtype)
    reference: Callable     # (case, inputs, compute_dtype) -> tensor
    kwargs: tuple = ()


def _ints(gen, high, shape):
    return torch.randint(0, high, shape, generator=gen, dtype=torch.int32)


def _with_holes(ids):
    return ids.masked_fill(torch.arange(ids.numel()) % 3 == 1, -1)


def _listed_rows(gen, rows, width, tokens):
    """int32 [rows, width]: row r lists r * width // (rows - 1) distinct ids below ``tokens``
    (none in the first row, all ``width`` in the last), then PAD."""
    out = torch.full((rows, width), loop_reduction_bound.PAD, dtype=torch.int32)
    for r in range(rows):
        n = r * width // max(1, rows - 1)
        out[r, :n] = torch.randperm(tokens, generator=gen)[:n].to(torch.int32)
    return out


def _page_sums(x, c, dt):
    pages = -(-c["L"] // c["page"])
    return torch.nn.functional.pad(x.to(dt), (0, pages * c["page"] - c["L"])).view(pages, c["page"]).sum(0)


def _listed_attention(x, c, dt):
    cols = while_block_index.keys(x["row"], c["bkv"], c["S"])
    q, k, v = (x[n].to(dt) for n in ("q", "k", "v"))
    p = torch.softmax(q @ k[cols].T / c["D"] ** 0.5, dim=-1)
    return p @ v[cols]


PROBE_SPECS = {
    # tl.dot of two tiles under the interpreter; c = a @ b (fp32).
    "interp_bf16_dot": Probe(
        interp_bf16_dot,
        inputs=lambda c, g: {"a": randn(g, (c["M"], c["K"]), c.dtype), "b": randn(g, (c["K"], c["N"]), c.dtype)},
        output=lambda c, x: ("c", (c["M"], c["N"]), torch.float32),
        reference=lambda c, x, dt: x["a"].to(dt) @ x["b"].to(dt)),
    # y = bf16(x). Each x lies 0.99 of a bf16 step above a bf16 value in [2, 2.1): rounding to
    # nearest is off by 0.01 of a step, truncation by 0.99, past the floor (2^-8 * max|x|).
    "interp_bf16_round": Probe(
        interp_bf16_round,
        inputs=lambda c, g: {"x": 2.0 + (torch.arange(c["N"], dtype=torch.float32) % 6 + 0.99) * 2.0**-6},
        output=lambda c, x: ("y", (c["N"],), torch.bfloat16),
        reference=lambda c, x, dt: x["x"].to(dt)),
    # Scores s = q k^T (fp32); the original reads k^T through a column-major block pointer.
    "block_ptr_order": Probe(
        block_ptr_order,
        inputs=lambda c, g: {"q": randn(g, (c["M"], c["D"]), c.dtype), "k": randn(g, (c["N"], c["D"]), c.dtype)},
        output=lambda c, x: ("s", (c["M"], c["N"]), torch.float32),
        reference=lambda c, x, dt: x["q"].to(dt) @ x["k"].to(dt).T),
    # Per-slot sums over the pages of a sequence of L values (last page partial), fp32.
    "loop_if_mask": Probe(
        loop_if_mask,
        inputs=lambda c, g: {"x": randn(g, (c["L"],), c.dtype)},
        output=lambda c, x: ("o", (c["page"],), torch.float32),
        reference=lambda c, x, dt: torch.nn.functional.pad(
            x["x"].to(dt), (0, c["pages"] * c["page"] - c["L"])).view(c["pages"], c["page"]).sum(0),
        kwargs=("page",)),
    # loop_if_mask's sums with the page count a constexpr.
    "loop_const_trip": Probe(
        loop_const_trip,
        inputs=lambda c, g: {"x": randn(g, (c["L"],), c.dtype)},
        output=lambda c, x: ("o", (c["page"],), torch.float32),
        reference=lambda c, x, dt: _page_sums(x["x"], c, dt),
        kwargs=("page",)),
    # The same sums, the mask carried from trip to trip.
    "loop_carried_mask": Probe(
        loop_carried_mask,
        inputs=lambda c, g: {"x": randn(g, (c["L"],), c.dtype)},
        output=lambda c, x: ("o", (c["page"],), torch.float32),
        reference=lambda c, x, dt: _page_sums(x["x"], c, dt),
        kwargs=("page",)),
    # Per row, the sum of v over the ids listed before the padding (rows of 0 to W ids).
    "loop_reduction_bound": Probe(
        loop_reduction_bound,
        inputs=lambda c, g: {"ids": _listed_rows(g, c["R"], c["W"], c["T"]), "v": randn(g, (c["T"],), c.dtype)},
        output=lambda c, x: ("o", (c["R"],), torch.float32),
        reference=lambda c, x, dt: torch.where(x["ids"] != loop_reduction_bound.PAD,
                                               x["v"].to(dt)[x["ids"].long().clamp(max=c["T"] - 1)], 0).sum(1)),
    # kt = k[idx].T: K rows of tokens named by a loaded index vector, as a [D, N] tile.
    "gather_transposed": Probe(
        gather_transposed,
        inputs=lambda c, g: {"k": randn(g, (c["T"], c["D"]), c.dtype), "idx": _ints(g, c["T"], (c["N"],))},
        output=lambda c, x: ("kt", (c["D"], c["N"]), c.dtype),
        reference=lambda c, x, dt: x["k"].to(dt)[x["idx"].long()].T),
    "gather_inner_axis": Probe(
        gather_inner_axis,
        inputs=lambda c, g: {"k": randn(g, (c["T"], c["D"]), c.dtype), "idx": _ints(g, c["T"], (c["N"],))},
        output=lambda c, x: ("kt", (c["D"], c["N"]), c.dtype),
        reference=lambda c, x, dt: x["k"].to(dt)[x["idx"].long()].T),
    # rows = k[ids] with -1 ids giving zero rows (every third id is -1).
    "gathered_index_select": Probe(
        gathered_index_select,
        inputs=lambda c, g: {"k": randn(g, (c["T"], c["D"]), c.dtype), "ids": _with_holes(_ints(g, c["T"], (c["N"],)))},
        output=lambda c, x: ("rows", (c["N"], c["D"]), c.dtype),
        reference=lambda c, x, dt: gathered_index_select.listed_rows(x["k"].to(dt), x["ids"])),
    # y = 2 x over n values, launched on more programs than have work.
    "early_return": Probe(
        early_return,
        inputs=lambda c, g: {"x": randn(g, (c["n"],), c.dtype)},
        output=lambda c, x: ("y", (c["n"],), c.dtype),
        reference=lambda c, x, dt: 2 * x["x"].to(dt),
        kwargs=("programs",)),
    # words[idx] of int32 words (exact).
    "gather_int32": Probe(
        gather_int32,
        inputs=lambda c, g: {"words": torch.randint(-2**31, 2**31 - 1, (c["N"],), generator=g, dtype=torch.int32),
                             "idx": _ints(g, c["N"], (c["N"],))},
        output=lambda c, x: ("w", (c["N"],), torch.int32),
        reference=lambda c, x, dt: x["words"][x["idx"].long()].to(dt)),
    # One query tile attending to the keys of its listed KV blocks.
    "while_block_index": Probe(
        while_block_index,
        inputs=lambda c, g: {"q": randn(g, (c["BM"], c["D"]), c.dtype), "k": randn(g, (c["S"], c["D"]), c.dtype),
                             "v": randn(g, (c["S"], c["D"]), c.dtype),
                             "row": torch.tensor(list(c["blocks"]) + [while_block_index.PAD], dtype=torch.int32)},
        output=lambda c, x: ("o", (c["BM"], c["D"]), c.dtype),
        reference=lambda c, x, dt: _listed_attention(x, c, dt),
        kwargs=("bkv", "block_n")),
    # Rows of tokens tok0 .. tok0 + n - 1 of a sequence whose page-table entries start at
    # page_start, from a paged K cache of shuffled pages.
    "page_div_zero": Probe(
        page_div_zero,
        inputs=lambda c, g: {"k": randn(g, (c["cache_pages"] * c["page_size"], c["D"]), c.dtype),
                             "pages": torch.randperm(c["cache_pages"], generator=g).to(torch.int32)},
        output=lambda c, x: ("rows", (c["n"], c["D"]), c.dtype),
        reference=lambda c, x, dt: x["k"].to(dt)[page_div_zero.token_rows(
            x["pages"], c["page_start"], c["tok0"], c["n"], c["page_size"]).long()],
        kwargs=("page_start", "tok0", "n", "page_size")),
    # y = exp(x) * 2 + x over an [M, N] tensor (fp32 math); the original holds it as one tile.
    "ub_overflow": Probe(
        ub_overflow,
        inputs=lambda c, g: {"x": randn(g, (c["M"], c["N"]), c.dtype)},
        output=lambda c, x: ("y", (c["M"], c["N"]), c.dtype),
        reference=lambda c, x, dt: torch.exp(x["x"].to(dt)) * 2 + x["x"].to(dt)),
    # y = 2 x over rows [rows, W]; the original launches one program per row of max_rows.
    "grid_limit": Probe(
        grid_limit,
        inputs=lambda c, g: {"x": randn(g, (c["rows"], c["W"]), c.dtype)},
        output=lambda c, x: ("y", (c["rows"], c["W"]), c.dtype),
        reference=lambda c, x, dt: 2 * x["x"].to(dt),
        kwargs=("max_rows",)),
    # Exclusive prefix counts of 0/1 bits along each row of [N, 64] (int32, exact).
    "cumsum": Probe(
        cumsum,
        inputs=lambda c, g: {"bits": _ints(g, 2, (c["N"], c["W"]))},
        output=lambda c, x: ("rank", (c["N"], c["W"]), torch.int32),
        reference=lambda c, x, dt: (x["bits"].cumsum(1) - x["bits"]).to(dt)),
    # y = fp32(x) for every e4m3fn bit pattern (subnormals, +-448, the NaNs 0x7f/0xff): exact.
    "fp8_load": Probe(
        fp8_load,
        inputs=lambda c, g: {"x": torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)},
        output=lambda c, x: ("y", (256,), torch.float32),
        reference=lambda c, x, dt: x["x"].to(dt)),
}

#: (probe, variant) -> the wrapper that runs it: every probe module has ``original`` and ``rewrite``.
PROBES = {(name, v): getattr(spec.module, v) for name, spec in PROBE_SPECS.items() for v in VARIANTS}

#: Parameters that appear in case ids besides probe, variant and dtype.
LABEL_AXES = ("pages",)


def label(p) -> str:
    return "-".join([p["probe"], p["variant"], p["dtype"]] + [f"{k}{p[k]}" for k in LABEL_AXES if k in p])


def _each_variant(probe: str, dtypes=("fp16",), **shape) -> list[dict]:
    return [dict(probe=probe, variant=v, dtype=dt, **shape) for v in VARIANTS for dt in dtypes]


CASES = [
    *_each_variant("interp_bf16_dot", ("bf16", "fp16"), M=16, N=16, K=32),
    *_each_variant("interp_bf16_round", ("bf16",), N=16),
    *_each_variant("block_ptr_order", M=16, N=16, D=32),
    # Trip count 1 (Triton specializes num_pages == 1 into a constant) and 2 (a runtime count).
    *_each_variant("loop_if_mask", L=13, page=16, pages=1),
    *_each_variant("loop_if_mask", L=29, page=16, pages=2),
    # Constexpr trip counts 1, 2 and 3.
    *_each_variant("loop_const_trip", L=13, page=16, pages=1),
    *_each_variant("loop_const_trip", L=29, page=16, pages=2),
    *_each_variant("loop_const_trip", L=45, page=16, pages=3),
    *_each_variant("loop_carried_mask", L=13, page=16, pages=1),
    *_each_variant("loop_carried_mask", L=29, page=16, pages=2),
    # 20 ids a row at most: rows of 0, 5, 10, 15 and 20 ids.
    *_each_variant("loop_reduction_bound", R=5, W=20, T=64),
    *_each_variant("gather_transposed", T=64, N=16, D=32),
    *_each_variant("gather_inner_axis", T=64, N=16, D=32),
    *_each_variant("gathered_index_select", T=64, N=16, D=32),
    # 4 programs for 40 values: the last one has nothing to do.
    *_each_variant("early_return", n=40, programs=4),
    *_each_variant("gather_int32", N=32),
    # block_sparse's D=64 tiles (BM=128, BN=64), 128-key blocks, the last one partial (S=1000).
    *_each_variant("while_block_index", BM=128, D=64, S=1000, bkv=128, block_n=64, blocks=(0, 3, 7)),
    # Tokens 8 .. 23 straddle the sequence's first two pages (entries 2 and 3 of the table).
    *_each_variant("page_div_zero", cache_pages=8, page_size=16, page_start=2, tok0=8, n=16, D=32),
    # [256, 512] in fp32 is 512 KB per tile; the UB holds 192 KB.
    *_each_variant("ub_overflow", M=256, N=512),
    # 70000 programs > 65535; only the first `rows` do work.
    *_each_variant("grid_limit", rows=40, W=16, max_rows=70000),
    *_each_variant("cumsum", N=16, W=64),
    # kv="fp8": the parameter the fp8 families' cases carry, so one ledger entry can name both.
    *_each_variant("fp8_load", ("fp32",), kv="fp8"),
]


def _run_probe(case, inputs, out):
    spec = PROBE_SPECS[case["probe"]]
    fn = PROBES[(case["probe"], case["variant"])]
    return fn(**inputs, **{k: case[k] for k in spec.kwargs}, out=out)


class Probes(Family):
    name = "probes"
    interface = Interface(("case", "inputs", "out"), (), "the probe's single output tensor")
    cases = make_cases(name, label, CASES)
    impls = {"triton": _run_probe}

    def label(self, params):
        return label(params)

    def make_inputs(self, case, gen):
        return PROBE_SPECS[case["probe"]].inputs(case, gen)

    def output_specs(self, case, inputs):
        name, shape, dtype = PROBE_SPECS[case["probe"]].output(case, inputs)
        return {name: (shape, dtype)}

    def call(self, impl, case, inputs, outputs):
        (name, out), = outputs.items()
        return {name: impl(case, inputs, out)}

    def reference(self, case, inputs, compute_dtype):
        name, _, _ = PROBE_SPECS[case["probe"]].output(case, inputs)
        return {name: PROBE_SPECS[case["probe"]].reference(case, inputs, compute_dtype)}


FAMILY = Probes()
