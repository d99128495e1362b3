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
