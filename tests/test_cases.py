"""Case catalogs: readable stable ids, determinism from the id, profiles."""
import pytest
import torch

from attnsuite.case import Case, make_cases, select, unique
from cases.decode import FAMILY as DECODE
from cases.prefill import FAMILY as PREFILL
from cases.probes import FAMILY as PROBES

FAMILIES = [PREFILL, DECODE, PROBES]


def test_ids_read_like_the_spec():
    ids = {c.id for c in PREFILL.cases}
    assert "prefill[fp16-B2-Hq8-Hkv1-S17-D64-causal-lse]" in ids
    assert "decode[fp16-B8-Hq64-Hkv16-S1024-D64]" in {c.id for c in DECODE.cases}


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_ids_are_unique_and_quick_is_a_subset_of_full(family):
    ids = [c.id for c in family.cases]
    assert len(ids) == len(set(ids))
    quick, full = select(family.cases, "quick"), select(family.cases, "full")
    assert quick and set(map(id, quick)) <= set(map(id, full))


@pytest.mark.parametrize("family", [PREFILL, DECODE], ids=lambda f: f.name)
def test_bench_shapes_only_in_full_and_spec_axes_covered(family):
    bench = [c for c in family.cases if "bench" in c.tags]
    assert bench and all(c.profile == "full" for c in bench)
    full = select(family.cases, "full")
    assert {c["D"] for c in full} >= {64, 128, 256}
    assert {c["Hq"] // c["Hkv"] for c in full} >= {1, 4, 8}
    assert {c["dtype"] for c in full} == {"fp16", "bf16"}


def test_prefill_lengths_cover_block_multiples_and_ragged():
    assert {c["S"] for c in select(PREFILL.cases, "full")} >= {1, 17, 128, 1000}
    assert {c["causal"] for c in select(PREFILL.cases, "quick")} == {True, False}


def test_quick_profile_stays_small_for_the_interpreter():
    for family in FAMILIES:
        for c in select(family.cases, "quick"):
            size = c.params.get("B", 1) * c.params.get("Hq", 1) * c.params.get("S", 1) * c.params.get("D", 1)
            assert size <= 2 * 16 * 300 * 256, c.id


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_inputs_depend_only_on_the_case_id(family):
    a, b = select(family.cases, "quick")[:2]
    first = family.make_inputs(a, a.generator())
    family.make_inputs(b, b.generator())  # another case in between changes nothing
    again = family.make_inputs(a, a.generator())
    assert first.keys() == again.keys()
    assert all(torch.equal(first[k], again[k]) for k in first)


def test_seed_is_a_stable_function_of_the_id():
    c = Case("prefill", "fp16-x", {"dtype": "fp16"})
    assert c.seed == Case("prefill", "fp16-x", {"dtype": "bf16"}).seed
    assert c.seed != Case("decode", "fp16-x", {"dtype": "fp16"}).seed
    assert c.seed == 6456326138499457511  # sha256-based: identical on every machine and run


def test_unique_keeps_first_and_select_rejects_unknown_profile():
    cases = make_cases("f", lambda p: f"x{p['n']}", [{"n": 1}, {"n": 1}, {"n": 2}])
    assert [c.label for c in unique(cases)] == ["x1", "x2"]
    with pytest.raises(ValueError, match="profile"):
        select(cases, "huge")


# --- the input-space dimensions every catalog covers ----------------------------------------------

from attnsuite import registry  # noqa: E402
from attnsuite.sparsity import PAD  # noqa: E402
from cases._dims import CONTIG, DENSE_VIEWS, RANDN, VALUES  # noqa: E402

COVERED = [name for name in registry.names() if name != "probes"]
#: Families with no softmax: a top-k over fp8 logits has value classes of its own (ties, a clear
#: winner, fp8 edge values: cases/dsa_topk_indexer.py), not the attention distributions.
NO_SOFTMAX = ("dsa_topk_indexer",)
VIEW_KINDS = {"dsa_sparse_attention": ("fusedq",), "dsa_topk_indexer": ("pool",), "prefill": DENSE_VIEWS, "decode": DENSE_VIEWS, "sparse_decode": DENSE_VIEWS,
              "block_sparse": DENSE_VIEWS, "prefill_varlen": ("kvslice", "fused", "rowpad"),
              "paged_decode": ("pool", "rowpad"), "sparse_paged_decode": ("pool", "rowpad"),
              "magicpig_decode": ("pool", "rowpad"), "mustafar": ("slice",),
              "mla_paged_decode": ("fused", "pool", "rowpad"), "mla_paged_prefill": ("fused", "pool", "rowpad")}


def quick(name):
    family = registry.family(name)
    return family, [c for c in select(family.cases, "quick") if not family.skip_reason(c)]


@pytest.mark.parametrize("name", COVERED)
def test_quick_covers_every_value_distribution_and_view(name):
    _, cases = quick(name)
    assert name in NO_SOFTMAX or {c.params.get("vals", RANDN) for c in cases} >= set(VALUES)
    assert {c.params.get("view", CONTIG) for c in cases} >= set(VIEW_KINDS[name])


@pytest.mark.parametrize("name", COVERED)
def test_view_cases_hand_over_strided_views_with_unit_inner_stride(name):
    family, cases = quick(name)
    for case in (c for c in cases if c.params.get("view", CONTIG) != CONTIG):
        inputs = family.make_inputs(case, case.generator())
        views = [t for t in inputs.values() if isinstance(t, torch.Tensor) and not t.is_contiguous()]
        assert views, case.id
        for t in views:
            assert t.stride(-1) == 1 or t.shape[-1] == 1, case.id
            assert t.untyped_storage().nbytes() > t.numel() * t.element_size(), case.id


@pytest.mark.parametrize("name", COVERED)
def test_default_dimensions_leave_labels_unchanged(name):
    family, cases = quick(name)
    for case in cases[:10]:
        bare = {k: v for k, v in case.params.items() if k not in ("view", "vals")}
        assert family.label(bare) == family.label({**bare, "view": CONTIG, "vals": RANDN})


def _residues(values):
    return {(n % 16, n % 64) for n in values}


@pytest.mark.parametrize("name", ["prefill", "prefill_varlen"])
def test_lengths_leave_every_tile_residue_for_both_masks(name):
    _, cases = quick(name)
    for causal in (True, False):
        lengths = [n for c in cases if c["causal"] == causal for n in (c["lengths"] if "lengths" in c.params else [c["S"]])]
        res = _residues(lengths)
        assert {r16 for r16, _ in res} >= {0, 1, 2, 15} and {r64 for _, r64 in res} >= {0, 1, 2, 63}, causal


@pytest.mark.parametrize("name", ["decode", "sparse_decode", "paged_decode", "sparse_paged_decode", "magicpig_decode"])
def test_quick_crosses_the_split_threshold(name):
    family, cases = quick(name)
    longest = 0
    for case in cases:
        inputs = family.make_inputs(case, case.generator())
        if "sparse_nnz" in inputs:
            longest = max(longest, int(inputs["sparse_nnz"].max()))
        elif "lengths" in case.params:
            longest = max(longest, max(case["lengths"]))
        else:
            longest = max(longest, case["S"])
    assert longest > 512


@pytest.mark.parametrize("name", ["paged_decode", "sparse_paged_decode"])
def test_several_pages_with_a_short_last_page_at_every_page_size(name):
    _, cases = quick(name)
    for P in (16, 64, 256):
        short = [n for c in cases if c["P"] == P for n in c["lengths"]
                 if n > P and 0 < n % P <= min(P - 1, 128)]
        assert short, P


@pytest.mark.parametrize("name", ["sparse_decode", "sparse_paged_decode", "magicpig_decode"])
def test_entries_past_nnz_hold_stale_in_range_positions(name):
    family, cases = quick(name)
    found = False
    for case in (c for c in cases if c["pad"] == "stale"):
        inputs = family.make_inputs(case, case.generator())
        ind, nnz = inputs["sparse_ind"], inputs["sparse_nnz"]
        past = torch.arange(ind.shape[-1]) >= nnz[..., None]
        found |= bool((past & (ind >= 0)).any())
    assert found


def test_block_sparse_rows_list_different_counts_with_row_zero_not_the_longest():
    family, cases = quick("block_sparse")
    found = False
    for case in (c for c in cases if c.params.get("pattern", "uniform") != "uniform"):
        counts = (family.make_inputs(case, case.generator())["sabi"] != PAD).sum(-1)
        found |= bool((counts.amax(-1) > counts[..., 0]).any())
    assert found


def test_mustafar_lengths_not_a_multiple_of_256_for_every_op():
    _, cases = quick("mustafar")
    for op in ("compress", "keys", "values", "decode"):
        assert any(c["op"] == op and c["S"] % 64 == 0 and c["S"] % 256 for c in cases), op


def test_mustafar_pruning_ties_follow_a_legal_choice_and_only_a_legal_one():
    from references.mustafar import keep_mask, legal_pruning

    x = torch.tensor([[3.0, -1.0, 1.0, 0.5]], dtype=torch.float16)      # keep 2: 3.0 and one of the +-1 tie
    default = keep_mask(x, 0.5)
    assert default.tolist() == [[True, True, False, False]]             # ties to the lower index
    swapped = torch.tensor([[True, False, True, False]])
    assert legal_pruning(x, swapped, 0.5).item()
    assert torch.equal(keep_mask(x, 0.5, swapped), swapped)
    for illegal in ([[True, True, True, False]], [[True, False, False, True]]):  # count; a smaller entry kept
        chosen = torch.tensor(illegal)
        assert not legal_pruning(x, chosen, 0.5).item()
        assert torch.equal(keep_mask(x, 0.5, chosen), default)


# --- the input classes (scales, score ranges, long sums) every family covers in quick where they apply

from cases._dims import EXTREMES, SCALES  # noqa: E402

GQA_FAMILIES = ["prefill", "prefill_varlen", "decode", "paged_decode", "sparse_decode", "sparse_paged_decode",
                "magicpig_decode", "mustafar"]
PAGED_FAMILIES = ["paged_decode", "sparse_paged_decode", "magicpig_decode"]
SOFTMAX_FAMILIES = [n for n in COVERED if n not in NO_SOFTMAX]


@pytest.mark.parametrize("name", GQA_FAMILIES)
def test_quick_has_gqa_groups_that_are_not_powers_of_two(name):
    _, cases = quick(name)
    assert {c["Hq"] // c["Hkv"] for c in cases} >= {3, 5, 6, 7}


@pytest.mark.parametrize("name", PAGED_FAMILIES)
def test_quick_has_page_sizes_that_are_not_powers_of_two_over_several_pages(name):
    _, cases = quick(name)
    for P in (12, 48):
        assert any(c["P"] == P and max(c["lengths"]) > 2 * P and any(n % P for n in c["lengths"]) for c in cases), P


@pytest.mark.parametrize("name", SOFTMAX_FAMILIES)
def test_quick_has_extreme_score_ranges_zero_vectors_and_every_scale(name):
    _, cases = quick(name)
    assert {c.params.get("vals") for c in cases} >= set(EXTREMES)
    scaled = [c for c in cases if c.params.get("scale")]
    assert {c["scale"] for c in scaled} == set(SCALES)
    # ... combined with the distributions that stress the exponent.
    assert {c.params.get("vals") for c in scaled} >= {"large", "late", "pm80"}


def _row_lse(family, case):
    inputs = family.make_inputs(case, case.generator())
    if "lse" in case.params and not case["lse"]:  # the same inputs; the reference's LSE asked for
        case = Case(case.family, case.label, {**case.params, "lse": True}, case.profile, case.tags)
    if case.family == "mustafar":  # the cache the compressed keys describe
        from cases._dims import effective_scale
        from references.mustafar import on_buffers, scores_reference
        k = on_buffers({n[3:]: t for n, t in inputs.items() if n.startswith("kc_")}, "key", case["bits"],
                       inputs["k"].shape, torch.float64)
        s = scores_reference(inputs["q"], k, torch.float64) * effective_scale(case, case["D"])
        return torch.logsumexp(s, -1).flatten()
    lse = family.reference(case, inputs, torch.float64)["lse"].flatten()
    return lse[torch.isfinite(lse)]


@pytest.mark.parametrize("name", SOFTMAX_FAMILIES)
def test_extreme_cases_put_rows_where_the_exponent_runs_out(name):
    """neg100: every row's scores far below 0 (LSE, about the row max, below -85, above -130);
    pm80: rows near +80 and rows near -80 in one launch (more than fp32's exponent range apart)."""
    family, cases = quick(name)
    for case in (c for c in cases if c.params.get("vals") in ("neg100", "pm80")):
        lse = _row_lse(family, case)
        assert lse.numel(), case.id
        if case["vals"] == "neg100":
            assert float(lse.max()) < -85 and float(lse.min()) > -130, case.id
        else:
            assert float(lse.max()) > 70 and float(lse.min()) < -70, case.id


@pytest.mark.parametrize("name", SOFTMAX_FAMILIES)
def test_zero_cases_hold_zero_keys_and_a_zero_query(name):
    family, cases = quick(name)
    for case in (c for c in cases if c.params.get("vals") == "zeros"):
        inputs = family.make_inputs(case, case.generator())
        q = inputs["q"].float() if "q" in inputs else inputs["q_nope"].float()
        keys = (inputs["k"] if "k" in inputs else inputs["ckv_cache"] if "ckv_cache" in inputs
                else inputs["kv_cache"].select(1, 0))
        keys = keys.float().reshape(-1, keys.shape[-1])
        assert bool((q.reshape(-1, q.shape[-1]) == 0).all(-1).any()), case.id
        assert bool((keys == 0).all(-1).any()), case.id


@pytest.mark.parametrize("name", ["sparse_decode", "sparse_paged_decode", "magicpig_decode", "paged_decode"])
def test_long_low_precision_reductions_in_fp16_and_bf16(name):
    family, cases = quick(name)
    for dtype in ("fp16", "bf16"):
        longest = 0
        for case in (c for c in cases if c["dtype"] == dtype):
            if "sparse_nnz" in family.make_inputs(case, case.generator()):
                longest = max(longest, int(family.make_inputs(case, case.generator())["sparse_nnz"].max()))
            else:
                longest = max(longest, max(case["lengths"]))
        assert longest >= 2000, dtype


# --- classes a held-out catalog found uncovered: signed scales, partial LSEs, shared pages ------------

from cases._dims import SPLIT_EXTREME, SPLIT_LENGTHS  # noqa: E402

SPLIT_FAMILIES = ["decode", "paged_decode", "sparse_decode", "sparse_paged_decode", "magicpig_decode",
                  "mla_paged_decode", "mla_paged_prefill", "dsa_sparse_attention"]
#: e^x is 0 in fp32 below this (half of the smallest subnormal, 2^-149, rounds to 0).
FP32_EXP_ZERO = -103.98


@pytest.mark.parametrize("name", SOFTMAX_FAMILIES)
def test_quick_has_negative_and_zero_scales_with_large_scores(name):
    _, cases = quick(name)
    signed = {(c.params.get("scale"), c.params.get("vals", "randn")) for c in cases}
    assert ("neg", "large") in signed and any(sc == "zero" for sc, _ in signed)


@pytest.mark.parametrize("name", SPLIT_FAMILIES)
def test_split_extreme_puts_every_partial_lse_of_a_split_below_fp32_s_subnormals(name):
    """Every split of 512 keys (or list entries) of a row: its LSE, in fp64, below the point where
    e^lse is 0 in fp32 (so a merge weighting by e^(lse_i - 0) gets 0 / 0 on any device)."""
    family, cases = quick(name)
    chosen = [c for c in cases if c.params.get("vals") == SPLIT_EXTREME]
    assert chosen
    for case in chosen:
        if case.family == "dsa_sparse_attention":  # its top-k lists split past 128 slots in the interpreter
            from kernels.dsa_sparse_attention import dsa_config
            T = case["nq"] if case["mode"] == "prefill" else len(case["ctx"])
            plan = dsa_config(T, case["H"], case["topk"], case["Dc"], case["Dr"], torch.float16, interpret=True,
                              ascend=False)
            assert plan["NUM_SPLITS"] > 1, case.id
        else:
            lengths = case.params.get("lengths") or (case["S"],)
            assert max(lengths) > SPLIT_LENGTHS[0], case.id
        lse = _row_lse(family, case)
        # The whole row's LSE is at most log(#splits) above the largest partial LSE.
        assert float(lse.max()) + 0 < FP32_EXP_ZERO - 15, case.id


@pytest.mark.parametrize("name", PAGED_FAMILIES)
def test_quick_has_page_tables_whose_sequences_share_pages(name):
    family, cases = quick(name)
    shared = [c for c in cases if c["placement"] == "shared"]
    assert {c["layout"] for c in shared} == {"HND", "NHD"}
    for case in shared:
        inputs = family.make_inputs(case, case.generator())
        ptr, idx = inputs["kv_page_indptr"].tolist(), inputs["kv_page_indices"]
        first = [set(idx[ptr[b]:ptr[b + 1]].tolist()) for b in range(len(ptr) - 1) if ptr[b + 1] > ptr[b]]
        assert len(first) > 1 and set.intersection(*first), case.id


def test_quick_block_sparse_has_whole_block_lengths_and_extremes_at_a_sparsity_above_0():
    _, cases = quick("block_sparse")
    assert any(c["S"] % c["bq"] == 0 and c["S"] % c["bkv"] == 0 and c["bq"] != c["bkv"] for c in cases)
    assert any(c["S"] % c["bq"] == 0 and c["s"] > 0 and c.params.get("vals") in EXTREMES for c in cases)


# --- the contract's knobs crossed with each other: a non-default scale at the shortest length, -------
# --- with a non-contiguous view and with the NHD layout (cases/*.py PAIRWISE rows) ------------------

def _shortest(case) -> float:
    """A case's shortest sequence: the least non-zero length, query count or context it lists, else
    S (infinite for a batch of empty sequences only)."""
    p = case.params
    listed = [n for key in ("lengths", "queries", "ctx") for n in (p.get(key) or ()) if n > 0]
    return min(listed) if listed else p.get("S", float("inf"))


SCALED_FAMILIES = [n for n in COVERED if any("scale" in c.params for c in registry.family(n).cases)]


@pytest.mark.parametrize("name", SCALED_FAMILIES)
def test_quick_crosses_non_default_scales_with_the_shortest_length_views_and_nhd(name):
    _, cases = quick(name)
    takes = [c for c in cases if "scale" in c.params]  # the family's ops that take a softmax scale
    scaled = [c for c in takes if c.params.get("scale") is not None]
    assert scaled
    assert min(map(_shortest, scaled)) == min(map(_shortest, takes))
    if any(c.params.get("view", CONTIG) != CONTIG for c in takes):
        assert any(c.params.get("view", CONTIG) != CONTIG for c in scaled)
    if any(c.params.get("layout") == "NHD" for c in takes):
        assert any(c.params.get("layout") == "NHD" for c in scaled)
