"""Shared vocabulary of the sparse-token families: the selection parameters and their label."""
from __future__ import annotations

from . import _paged
from ._attention import dense_stand_in
from ._dims import CONTIG, index_view

#: Keyword defaults of a token selection (see _paged.selection).
SELECTION = dict(keep=0.2, order="shuffled", dup=False, empty=False, pad="-1", extra=0)


def selection_label(p) -> str:
    parts = [f"keep{p['keep']:g}", p["order"]]
    if p["dup"]:
        parts.append("dup")
    if p["empty"]:
        parts.append("empty")
    if p["pad"] != "-1":
        parts.append(f"pad_{p['pad']}")
    if p["extra"]:
        parts.append(f"Lmax+{p['extra']}")
    return "-".join(parts)


def select_tokens(gen, case, lengths):
    return _paged.selection(gen, lengths, case["Hq"], case["keep"], order=case["order"],
                            duplicates=case["dup"], empty_rows=case["empty"], pad=case["pad"],
                            extra=case["extra"])


#: Selection variants every sparse family runs in its quick profile.
QUICK_SELECTIONS = [
    dict(keep=0.01), dict(keep=0.05, order="sorted"), dict(keep=0.2), dict(keep=1.0),
    dict(keep=0.2, dup=True), dict(keep=0.2, empty=True), dict(keep=0.2, pad="garbage", extra=7),
]


#: Entries past nnz that are stale in-range positions: rows padded past the longest one, and
#: shorter (empty, sorted) rows whose tails are all stale.
STALE_SELECTIONS = [dict(keep=0.2, pad="stale", extra=5),
                    dict(keep=0.05, order="sorted", empty=True, pad="stale", extra=3)]


def index_views(view: str, ind, nnz):
    """The index arrays as views whenever the case's tensors are: rows of ``sparse_ind`` with
    stale in-range entries (position 0) between them, ``sparse_nnz`` rows holding L_max."""
    if view == CONTIG:
        return ind, nnz
    return index_view(ind, 0), index_view(nnz, ind.shape[-1])


def draw_selection(rng) -> dict:
    """Selection parameters for the fuzz profile (legal: any order, duplicates, empty rows, any
    padding past nnz)."""
    keep = rng.choice((0.01, 0.05, 0.2, 0.5, 1.0)) if rng.random() < 0.7 else round(rng.uniform(0.01, 1.0), 2)
    pad = rng.choice(("-1", "garbage", "stale"))
    return dict(keep=keep, order=rng.choice(("shuffled", "sorted")), dup=rng.random() < 0.2,
                empty=rng.random() < 0.2, pad=pad, extra=rng.choice((0, 0, 3, 17)))


class SparseDecodeBench:
    """Benchmark hooks shared by the token-sparse decode families (mixed into their Family):
    the vendor baseline is SDPA over a dense cache of the selected tokens' size, built outside
    the timing (the gather is excluded, as the report says); bytes are the selected K/V rows."""

    def vendor_problem(self, case, inputs):
        return dense_stand_in(inputs["q"], inputs["q"].shape[1], int(inputs["sparse_nnz"].max()),
                              "gather excluded: SDPA over a dense cache of the selected tokens' size")

    def work(self, case, inputs):
        q = inputs["q"]
        rows = int(inputs["sparse_nnz"].sum())
        return {"bytes": 2 * rows * q.shape[-1] * q.element_size() + 2 * q.numel() * q.element_size()}

    def sweep(self, case):
        if {"bench", "kept"} & set(case.tags):
            return {"name": "kept_ratio", "series": case["dtype"], "x": case["keep"]}
        return None
