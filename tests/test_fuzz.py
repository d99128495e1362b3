"""The fuzz profile: every family draws cases from its legal input space, reproducibly from the
seed and the case's index alone, across the dimensions the catalogs cover (views, value
distributions, dtypes, tile residues); the project's kernels accept every draw, and CI's
fixed-seed slice passes on cpu."""
import pytest
import torch

import kernels._checks
from attnsuite import registry
from attnsuite.fuzz import fuzz_cases
from cases._dims import CONTIG, RANDN, VALUES

FUZZED = [name for name in registry.names() if name != "probes"]
DRAWS = 60


@pytest.fixture(scope="module")
def drawn():
    return {name: fuzz_cases(registry.family(name), 0, DRAWS) for name in FUZZED}


@pytest.mark.parametrize("name", FUZZED)
def test_draws_reproduce_from_seed_and_index_alone(name, drawn):
    family = registry.family(name)
    cases = drawn[name]
    assert [c.id for c in cases] == [c.id for c in fuzz_cases(family, 0, DRAWS)]
    assert [c.id for c in fuzz_cases(family, 0, 5)] == [c.id for c in cases[:5]]
    assert {c.id for c in fuzz_cases(family, 1, 5)}.isdisjoint(c.id for c in cases)
    assert all(c.id.startswith(f"{name}[fuzz0.{i}-") for i, c in enumerate(cases))
    assert all(c.profile == "fuzz" and "fuzz" in c.tags for c in cases)


@pytest.mark.parametrize("name", FUZZED)
def test_draws_cover_the_dimensions_and_stay_legal(name, drawn):
    family = registry.family(name)
    cases = drawn[name]
    assert all(family.skip_reason(c) is None for c in cases), "the spec's skip rules are respected"
    assert {c.params.get("view", CONTIG) for c in cases} - {CONTIG}, "views are drawn"
    # A top-k over fp8 logits has no softmax and value classes of its own (cases/dsa_topk_indexer.py).
    want = {"randn", "ties", "winner", "edges"} if name == "dsa_topk_indexer" else {RANDN, *VALUES}
    assert {c.params.get("vals", RANDN) for c in cases} >= want, "every value distribution"
    for c in cases:
        p = c.params
        if "Hkv" in p:
            assert p["Hq"] % p["Hkv"] == 0
        if "lengths" in p and p.get("layout") == "padded":
            assert all(1 <= n <= p["S"] for n in p["lengths"])


@pytest.mark.parametrize("name", FUZZED)
def test_the_project_kernels_accept_every_draw(name, drawn):
    """Validation only (launches captured, nothing runs): a draw the project's own argument checks
    reject would be illegal input, which belongs to the bad-input tests."""
    family = registry.family(name)
    impl = family.default_impl()[1]
    for case in drawn[name][:20]:
        inputs = family.make_inputs(case, case.generator())
        outputs = {n: torch.empty(shape, dtype=dt) for n, (shape, dt) in family.output_specs(case, inputs).items()}
        with kernels._checks.capture_launches():
            family.call(impl, case, inputs, outputs)


#: The draw's classes every all-empty draw is checked against, with their defaults.
CLASS_KEYS = (("vals", RANDN), ("view", CONTIG))


def _all_empty(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) > 0 and all(x == 0 for x in value)


@pytest.mark.parametrize("name", FUZZED)
def test_every_value_distribution_and_view_builds_where_the_draw_is_empty(name):
    """Draws whose sequences (or queries, or contexts) are all empty are rare (a few in a
    thousand): each value distribution and view the family draws meets one here, on the CPU,
    and the project's kernel accepts what it builds."""
    family = registry.family(name)
    draws = fuzz_cases(family, 0, 4000)
    empty = [c for c in draws if any(_all_empty(v) for v in c.params.values())]
    if not empty:
        pytest.skip("the family draws no empty input")
    classes = {(key, c.params.get(key, default)) for c in draws for key, default in CLASS_KEYS}
    met = {}
    for c in empty:
        for key, default in CLASS_KEYS:
            met.setdefault((key, c.params.get(key, default)), c)
    assert set(met) == classes, f"no empty draw meets {sorted(classes - set(met))}"
    impl = family.default_impl()[1]
    for case in {c.id: c for c in met.values()}.values():
        inputs = family.make_inputs(case, case.generator())
        outputs = {n: torch.empty(shape, dtype=dt) for n, (shape, dt) in family.output_specs(case, inputs).items()}
        with kernels._checks.capture_launches():
            family.call(impl, case, inputs, outputs)


def test_families_without_a_generator_draw_nothing():
    assert fuzz_cases(registry.family("probes"), 0, 3) == []


@pytest.mark.profile_run
def test_the_ci_slice_passes_on_cpu_on_the_persistent_grid(run_suite):
    """The slice runs the kernels the way they launch on Ascend (kernels/_grid.py), three programs
    taking turns over the tiles: the quick profile already covers the plain grid, and no NPU runs
    the persistent one."""
    run = run_suite("--device", "cpu", "--profile", "fuzz", "--fuzz-seed", "0", "--fuzz-count", "3",
                    "--persistent-programs", "3")
    outcomes = run.outcomes()
    assert run.returncode == 0, run.output[-3000:]
    for name in FUZZED:
        mine = {cid: o for cid, o in outcomes.items() if cid.startswith(f"{name}[fuzz0.")}
        assert len(mine) == 3, (name, mine)
        # bf16 draws of the tl.dot kernels meet the interpreter's known failure (a strict xfail).
        assert set(mine.values()) <= {"pass", "xfail"}, mine
