"""Block-sparse non-causal prefill (docs/contract.md section 8): q/k/v [B, H, S, D] and a sparse block
index ``sabi`` from the seeded generator in attnsuite/sparsity.py, run-time block shapes.

A case's frame is a token target per side (``frame`` tokens), scaled to blocks with
``ceil(tokens / block_size)`` as the origin did. Cases the spec says to skip (the frame alone
exceeds ``1 - s`` of a row, or a row would keep fewer than one block) stay in the catalog and are
skipped with their reason (``skip_reason``).

The origin's big bench (B=1, H=3, S=118806, D=128, 16 shapes x 11 sparsities) is not a case: the
fp64 reference needs an S x S score matrix per head (~113 GB at S=118806). The benchmarks reuse
attnsuite.sparsity.block_index for that grid instead. One case at S=32768 is in the full profile.
"""
from __future__ import annotations

import torch

from attnsuite.case import make_cases, unique
from attnsuite.ecosystem import implementations
from attnsuite.family import Family
from attnsuite.interfaces import ATTENTION_KEYWORDS, SCALE_NOTE, Interface
from attnsuite.pairwise import pairwise
from attnsuite.result import CaseFailure
from attnsuite.sparsity import (BLOCK_SIZES, PAD, block_index, frame_exceeds_budget, frame_from_tokens,
                                grid_shape, mask_to_index)
from kernels.block_sparse import block_sparse
from references.block_sparse import block_sparse_reference

from ._attention import attention_outputs, lse_if, qkv, score_bound
from ._dims import (CONTIG, DENSE_VIEWS, EXTREMES, RANDN, SIGNED_SCALES, VALUES, case_scale, dense_values, dense_views,
                    dims_label, draw_classes, draw_dtype, draw_head_dim, draw_length, draw_vals, draw_view,
                    effective_scale, index_view, pairwise_legal)

#: Sparsity patterns besides the spec's generator (``uniform``: every row keeps the same count):
#: rows listing different numbers of blocks (docs/contract.md, "Block-sparse rows"), row 0 never the
#: longest. ``causal``: row i lists the KV blocks that start at or before its last query
#: (block-causal); ``ragged``: a random count per row, row 0 keeping one block.
PATTERNS = ("causal", "ragged")


def label(p) -> str:
    frame = f"-frame{p['frame']}" if p["frame"] else ""
    init = "-zeros" if p["init"] == "zeros" else ""
    pattern = f"-pat_{p['pattern']}" if p.get("pattern", "uniform") != "uniform" else ""
    return (f"{p['dtype']}-B{p['B']}-H{p['H']}-S{p['S']}-D{p['D']}-blk{p['bq']}x{p['bkv']}"
            f"-s{p['s']}{frame}{'-lse' if p['lse'] else ''}{init}{pattern}{dims_label(p)}")


def case(dtype="fp16", B=1, H=1, S=600, D=64, bq=128, bkv=128, s=0.5, frame=0, lse=True, init="randn",
         pattern="uniform", view=CONTIG, vals=RANDN, scale=None):
    return dict(dtype=dtype, B=B, H=H, S=S, D=D, bq=bq, bkv=bkv, s=s, frame=frame, lse=lse, init=init,
                pattern=pattern, view=view, vals=vals, scale=scale)


def pattern_index(pattern: str, S: int, block_shape, gen, batch_heads) -> torch.Tensor:
    """sabi [B, H, n_rows, n_cols] of a pattern whose rows list different numbers of blocks."""
    bq, bkv = block_shape
    n_rows, n_cols = grid_shape(S, block_shape)
    B, H = batch_heads
    rows, cols = torch.arange(n_rows)[:, None], torch.arange(n_cols)[None, :]
    if pattern == "causal":
        last_query = torch.clamp((rows + 1) * bq, max=S) - 1
        mask = (cols * bkv <= last_query).expand(B, H, n_rows, n_cols)
    elif pattern == "ragged":
        counts = torch.randint(1, n_cols + 1, (B, H, n_rows), generator=gen)
        counts[..., 0] = 1
        rank = torch.rand((B, H, n_rows, n_cols), generator=gen).argsort(-1).argsort(-1)
        mask = rank < counts[..., None]
    else:
        raise ValueError(f"unknown pattern {pattern!r}")
    return mask_to_index(mask)


def skip_reason(c) -> "str | None":
    """The spec's skip rule for a case (None: run it)."""
    shape = (c["bq"], c["bkv"])
    n_rows, n_cols = grid_shape(c["S"], shape)
    return frame_exceeds_budget(n_rows, n_cols, c["s"], frame_from_tokens(c["frame"], shape))


#: The sparsities of the 11 x 11 sweep the quick profile runs; full runs the other ones too.
QUICK_SPARSITIES = (0.2, 0.4, 0.7)
#: Quick cases of earlier rounds now in full only (their ids kept): cheaper shapes of the same
#: checks run in quick instead.
MOVED_TO_FULL = [case(S=1300, s=s) for s in (0.1, 0.3, 0.6, 0.8)] + [
    case(B=2, H=2, s=0.0), case(B=2, H=2, S=600, s=0.5, init="zeros"), case(B=2, H=2, s=0.0, lse=False)]

def _pairwise_means_it(r) -> bool:
    """Whether a partial pairwise row means what its parameters say: the one head of one sequence
    from a longer cache, or its one token from a fused projection, is contiguous (no view); pm80
    alternates its rows over B * H > 1 (s = 0.4: a row of one or two blocks keeps one)."""
    one_row = r.get("B") == 1 and r.get("H") == 1
    return not (one_row and r.get("view") == "kvslice" or r.get("B") == 1 and r.get("S") == 1 and r.get("view") == "fused"
                or one_row and r.get("vals") == "pm80")


#: Every pair of: a softmax scale, a legal view (the contiguous inputs meet every other factor in
#: the hand-picked cases), a length (one token; a partial block; whole blocks), a block shape, the
#: sparsity, a value distribution, the batch, the heads and the LSE on or off.
PAIRWISE = [case(B=r["B"], H=r["H"], S=r["S"], bq=r["blk"][0], bkv=r["blk"][1], s=r["s"], lse=r["lse"], view=r["view"],
                 vals=r["vals"], scale=r["scale"])
            for r in pairwise({"scale": (None, "hot", "neg", "zero"), "view": DENSE_VIEWS, "S": (1, 129, 256),
                               "blk": ((128, 128), (128, 256), (256, 128)), "s": (0.0, 0.4),
                               "vals": (RANDN, "large", "pm80"), "B": (2, 1), "H": (1, 2), "lse": (True, False)},
                              lambda r: pairwise_legal(r) and _pairwise_means_it(r))]

QUICK = (
    # Every block shape on the same kernel source, S ragged (two blocks along the larger axis).
    [case(S=max(bq, bkv) + 77, bq=bq, bkv=bkv) for bq in BLOCK_SIZES for bkv in BLOCK_SIZES]
    # Sparsity x frame at S=600 (5 x 5 blocks of 128), B and H > 1. s=0.9 keeps round(0.5) = 0
    # blocks and the 128-token frame exceeds 0.1 of a row: both skip, with the reason.
    + [case(B=2, H=2, s=s, frame=f) for s in (0.0, 0.5, 0.9) for f in (0, 128) if (s, f) != (0.0, 0)]
    + [case(B=2, H=2, S=520, bq=256, bkv=128, s=0.5, frame=128)]
    # s=0.9 with enough columns to keep a block; then the frame at 0.9 skips.
    + [case(S=1300, s=0.9), case(S=1300, s=0.9, frame=256)]
    # More of the sparsity range 0 ... 0.9 on 11 x 11 blocks (the rest in full).
    + [case(S=1300, s=s) for s in QUICK_SPARSITIES]
    + [case(B=2, H=4, S=333, bq=256, bkv=128, s=0.5), case(S=450, D=128, s=0.5, bq=128, bkv=256)]
    # The origin's LSE checks: q = k = v = 0 gives lse = log(S) (uniform softmax); disabled lse
    # (the B=2, H=2 shapes of these in full).
    + [case(B=2, H=1, S=300, s=0.5, init="zeros"), case(B=2, H=1, S=300, s=0.5, lse=False)]
    # bf16: on cpu these meet the interpreter's bf16 tl.dot failure (cases/known_failures.toml).
    + [case(dtype="bf16", B=2, H=2, s=0.5), case(dtype="bf16", S=1101, bq=1024, bkv=512, s=0.5)]
    # Rows listing different numbers of blocks, row 0 not the longest: block-causal (several
    # block shapes, square and not) and a random count per row.
    + [case(B=2, H=1, S=S, bq=bq, bkv=bkv, s=0.0, pattern="causal")
       for S, bq, bkv in ((400, 128, 128), (520, 256, 128), (400, 128, 256))]
    + [case(B=2, H=1, S=520, s=0.0, pattern="ragged")]
    # The last block partly filled to every tile residue: S % 128 in {1, 2, 127}, S % 64 == 63.
    + [case(S=S, s=0.0) for S in (129, 130, 255)]
    # Value distributions (the late keys are in the last KV blocks a row lists).
    + [case(B=1, H=1, S=400, s=0.0, vals=vl) for vl in VALUES]
    # Score ranges at the edges of the exponent and zero vectors (cases/_dims.py, EXTREMES):
    # pm80's rows alternate across the two heads of one launch.
    + [case(B=1, H=2, S=200, s=0.0, vals=vl) for vl in EXTREMES]
    # Every pair of scale x view x length x block shape x sparsity x values x batch x heads x LSE
    # (PAIRWISE): negative and zero scales meet a one-token sequence and every view.
    + PAIRWISE
    # MLA's scale, no scaling and a negative scale over the distributions that stress the exponent
    # (cases/_dims.py, SIGNED_SCALES).
    + [case(B=1, H=2, S=200, s=sp, vals=vl, scale=sc) for sc, vl, sp in (("mla", "late", 0.0), ("one", "pm80", 0.0),
                                                                         SIGNED_SCALES[0] + (0.5,))]
    # Lengths that are whole multiples of the block size (no partial last block), square and
    # not, with score ranges at the edges of the exponent at a sparsity above 0.
    + [case(B=1, H=2, S=256, s=0.5, vals=vl) for vl in ("neg100", "pm80")]
    + [case(B=2, H=1, S=512, bq=256, bkv=128, s=0.5), case(B=2, H=1, S=384, s=0.0, pattern="causal")]
)

FULL = (
    MOVED_TO_FULL
    + [case(dtype=dt, B=2, H=4, S=S, D=128, bq=bq, bkv=bkv, s=s, frame=f)
     for dt in ("fp16", "bf16") for S in (4096, 10000)
     for (bq, bkv) in ((128, 128), (128, 512), (512, 128), (256, 1024), (1024, 1024))
     for s in (0.0, 0.5, 0.9) for f in (0, 256)]
    + [case(dtype=dt, B=2, H=4, S=4096, D=128, init="zeros") for dt in ("fp16", "bf16")]
    # One long case (the issue asks for S >= 32768; the reference works one head at a time).
    + [case(dtype="bf16", B=1, H=1, S=32768, D=128, bq=128, bkv=512, s=0.9, frame=256)]
    + [case(dtype=dt, B=2, H=4, S=4097, D=128, bq=bq, bkv=bkv, s=0.0, pattern=pat)
       for dt in ("fp16", "bf16") for pat in PATTERNS for bq, bkv in ((128, 128), (256, 1024), (1024, 128))]
    + [case(dtype=dt, B=2, H=4, S=4097, D=128, s=0.5, view=vw, vals=vl) for dt in ("fp16", "bf16")
       for vw, vl in [(v, RANDN) for v in DENSE_VIEWS] + [(CONTIG, v) for v in VALUES]]
)

# The origin's short bench: H in {16, 14}, S in {4096, 10000}, block 128x512, bf16. Without a
# frame: the origin's ceil(3600 / block) frame covers most of a row at these lengths (skip rule).
BENCH = ([case(dtype="bf16", B=1, H=H, S=S, D=128, bq=128, bkv=512, s=s)
          for H in (16, 14) for S in (4096, 10000) for s in (0.5, 0.9)]
         # The long headline case (S >= 32768) at s = 0, 0.5, 0.9.
         + [case(dtype="bf16", B=1, H=3, S=32768, D=128, bq=128, bkv=512, s=s) for s in (0.0, 0.5, 0.9)])

# The bench grid: every block shape x sparsity 0 ... 0.9 (the report's heatmaps show 0.3/0.5/0.8).
# At S = 16384, not the origin's 118806: the 160-case grid must fit one device session, and
# the speed targets are stated at S >= 16k. No frame: the origin's ceil(3600 / block)
# covers 44% of a row at this length, which the skip rule would exclude from s = 0.6 on.
BLOCK_GRID = [case(dtype="bf16", B=1, H=3, S=16384, D=128, bq=bq, bkv=bkv, s=s, lse=False)
              for s in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
              for bq in BLOCK_SIZES for bkv in BLOCK_SIZES]


class BlockSparse(Family):
    name = "block_sparse"
    interface = Interface(
        ("q", "k", "v", "sabi"), ("block_shape", *ATTENTION_KEYWORDS),
        "(o [B, H, S, D], lse [B, H, S] fp32, or an empty fp32 tensor when no LSE is asked)",
        arguments=("q, k, v  [B, H, S, D]  fp16 | bf16, non-causal",
                   "sabi [B, H, ceil(S/BQ), ceil(S/BKV)] int32: KV-block columns per query block-row, ascending, "
                   "right-padded with 65535; rows may list different numbers of blocks (>= 1)",
                   "block_shape (BQ, BKV), each in {128, 256, 512, 1024}"),
        notes=SCALE_NOTE)
    cases = unique(make_cases(name, label, QUICK)
                   + make_cases(name, label, FULL, profile="full")
                   + make_cases(name, label, BENCH, profile="full", tags=["bench"])
                   + make_cases(name, label, BLOCK_GRID, profile="full", tags=["sweep", "block_shape"]))
    impls = {"triton": block_sparse, **implementations("block_sparse")}

    def label(self, params):
        return label(params)

    def skip_reason(self, case):
        return skip_reason(case)

    def fuzz(self, rng):
        bq, bkv = rng.choice(BLOCK_SIZES[:3]), rng.choice(BLOCK_SIZES[:3])
        D = draw_head_dim(rng)
        S = draw_length(rng, 700 if D < 256 else 400)
        pattern = rng.choice(("uniform", "uniform") + PATTERNS)
        params = case(dtype=draw_dtype(rng), B=rng.randint(1, 2), H=rng.randint(1, 3), S=S, D=D, bq=bq, bkv=bkv,
                      s=rng.choice((0.0, 0.3, 0.5, 0.7, 0.9)) if pattern == "uniform" else 0.0,
                      frame=rng.choice((0, 0, 128, 256)) if pattern == "uniform" else 0,
                      lse=rng.random() < 0.7, pattern=pattern, view=draw_view(rng, DENSE_VIEWS),
                      vals=draw_vals(rng))
        if skip_reason(params):  # the spec's skip rule: stay in the legal space
            params.update(s=0.0, frame=0)
        return params

    def fuzz_classes(self, params, rng):
        return draw_classes(rng, params)

    def make_inputs(self, case, gen, device=None):
        B, H, S, D = case["B"], case["H"], case["S"], case["D"]
        if case["init"] == "zeros":
            z = torch.zeros((B, H, S, D), dtype=case.dtype)
            inputs = {"q": z, "k": z.clone(), "v": z.clone()}
        else:
            inputs = qkv(gen, B, H, H, S, S, D, case.dtype, device)
        shape = (case["bq"], case["bkv"])
        n_rows, n_cols = grid_shape(S, shape)
        pattern = case.params.get("pattern", "uniform")
        if pattern == "uniform":
            sabi = block_index(n_rows, n_cols, case["s"], frame=frame_from_tokens(case["frame"], shape),
                               generator=gen, batch_heads=(B, H))
        else:
            sabi = pattern_index(pattern, S, shape, gen, (B, H))
        view = case.params.get("view", CONTIG)
        q, k, v = dense_values(case.params.get("vals", RANDN), inputs["q"], inputs["k"], inputs["v"],
                               scale=effective_scale(case, D))
        q, k, v = dense_views(view, q, k, v)
        if view != CONTIG:
            sabi = index_view(sabi, 0)
        return {"q": q, "k": k, "v": v, "sabi": sabi}

    def output_specs(self, case, inputs):
        B, H, S, D = inputs["q"].shape
        return attention_outputs(case, (B, H, S, D), (B, H, S))

    def call(self, impl, case, inputs, outputs):
        o, lse = impl(inputs["q"], inputs["k"], inputs["v"], inputs["sabi"],
                      block_shape=(case["bq"], case["bkv"]), scale=case_scale(case), return_lse=case["lse"],
                      out=outputs["o"], lse=outputs.get("lse"))
        if not case["lse"] and not (isinstance(lse, torch.Tensor) and lse.numel() == 0
                                    and lse.dtype == torch.float32):
            got = (f"{lse.dtype} tensor of shape {list(lse.shape)}" if isinstance(lse, torch.Tensor)
                   else type(lse).__name__)
            raise CaseFailure("contract", "buffer contract: with no LSE requested block_sparse returns an "
                                          f"empty fp32 tensor (numel 0) as its lse, got {got}")
        return lse_if(case, o, lse)

    def reference(self, case, inputs, compute_dtype):
        o, lse = block_sparse_reference(inputs["q"], inputs["k"], inputs["v"], inputs["sabi"],
                                        block_shape=(case["bq"], case["bkv"]), scale=case_scale(case),
                                        compute_dtype=compute_dtype)
        return lse_if(case, o, lse)

    def score_bound(self, case, inputs):
        return score_bound(inputs["q"], inputs["k"], effective_scale(case, case["D"]))

    def vendor_problem(self, case, inputs):
        return {"q": inputs["q"], "k": inputs["k"], "v": inputs["v"], "causal": False,
                "note": "dense: every block attended"}

    def work(self, case, inputs):
        """Flops of the listed blocks only (partial edge blocks counted by their real size)."""
        B, H, S, D = inputs["q"].shape
        bq, bkv = case["bq"], case["bkv"]
        sabi = inputs["sabi"].long()
        listed = sabi != PAD
        cols = (S - sabi.clamp(max=S // bkv) * bkv).clamp(max=bkv) * listed
        rows = (S - torch.arange(sabi.shape[2], device=sabi.device) * bq).clamp(max=bq)
        return {"flops": 4 * D * float((cols.sum(-1) * rows).sum())}

    def extra_baselines(self, case, inputs, impl):
        """The same kernel with every block listed (sparsity 0)."""
        B, H, n_rows, n_cols = inputs["sabi"].shape
        full = torch.arange(n_cols, dtype=torch.int32, device=inputs["sabi"].device).expand(B, H, n_rows, n_cols).contiguous()
        shape = (case["bq"], case["bkv"])
        # Its time depends on the shapes and the block shape only: a sweep's sparsities share it.
        same = (tuple(inputs["q"].shape), tuple(inputs["k"].shape), str(inputs["q"].dtype), shape,
                case.params.get("lse", True), str(inputs["q"].device))
        return {"dense_kernel": (lambda: impl(inputs["q"], inputs["k"], inputs["v"], full, block_shape=shape), None,
                                 same)}

    def reference_cost_key(self, case, inputs):
        # Dense attention under a token mask. Measured on an H100 over the block-shape sweep
        # (S 16384, each of its 160 points timed): 11.4 -> 12.4 ms as the sparsity rises, up to 3%
        # apart between key block sizes at one sparsity, and within 0.6% between query block
        # sizes. So only the query block size is left out: the sweep times 40 of its 160 points.
        return (tuple(inputs["q"].shape), tuple(inputs["k"].shape), str(inputs["q"].dtype),
                case["bkv"], case["s"], case.params.get("lse", True), str(inputs["q"].device))

    def sweep(self, case):
        if "block_shape" in case.tags:
            return {"name": "block_shape", "series": f"s{case['s']}", "x": f"{case['bq']}x{case['bkv']}"}
        return None


FAMILY = BlockSparse()
