"""The suite has teeth: a planted bug is reported as a numeric failure by exactly the quick
cases in which it is observable; every other case still passes (or is a known failure)."""
import importlib

import pytest

from attnsuite.case import select
from attnsuite.ledger import load, lookup
from attnsuite.sparsity import PAD
from tests.conftest import ROOT

KNOWN_FAILURES = load(ROOT / "cases" / "known_failures.toml")


def _visible_wrong_scale(c):
    # 1/D instead of 1/sqrt(D) changes nothing when every row has one key and no LSE is returned.
    return c["S"] > 1 or c["lse"]


def _visible_wrong_kv_head(c):
    # h % Hkv instead of h // G is the same map when G == 1 or Hkv == 1.
    return c["Hkv"] > 1 and c["Hq"] > c["Hkv"]


def _visible_ignored_last_page_len(c):
    # Only a partly filled last page has a stale tail to read.
    return any(n % c["P"] for n in c["lengths"])


def _always(c):
    return True


def _visible_swapped_k_l(c):
    # With every cosine at +-1, u is 1 or the 1e-10 floor for K=10, L=150 and for K=150, L=10
    # alike; any other selection (or float K, L) tells the two apart.
    return not (c["cos"] == "pm1" and c["lsh"] == "int")


def _visible_leak(c):
    # Padded: a sequence shorter than S; packed: two non-empty sequences side by side.
    if c["layout"] == "padded":
        return any(n < c["S"] for n in c["lengths"])
    return sum(1 for n in c["lengths"] if n) > 1


def _sabi(c):
    family = importlib.import_module("cases.block_sparse").FAMILY
    return family.make_inputs(c, c.generator())["sabi"]


def _visible_dropped_last_block(c):
    # Only a partial last KV block, listed in a row beside another block, can be dropped.
    if c["S"] % c["bkv"] == 0:
        return False
    sabi = _sabi(c)
    n_listed = (sabi != PAD).sum(-1)
    return bool(((sabi == sabi.shape[-1] - 1).any(-1) & (n_listed > 1)).any())


def _visible_pad_as_block(c):
    # A row with padding that does not list the last block already gains it.
    sabi = _sabi(c)
    return bool(((sabi == PAD).any(-1) & ~(sabi == sabi.shape[-1] - 1).any(-1)).any())


def _visible_bit_order(c):
    # Kernels only; with s = 0 every bitmap is all ones and reads the same both ways.
    return c["op"] != "compress" and c["s"] > 0


def _visible_quantisation(c):
    # Zero-point and scale exist only in the 2-bit format; the compressor is not wrapped.
    return c["op"] != "compress" and c["bits"] == 2


PLANTED = [
    ("prefill", "prefill_wrong_scale", _visible_wrong_scale),
    ("decode", "decode_wrong_kv_head", _visible_wrong_kv_head),
    ("paged_decode", "paged_decode_ignores_last_page_len", _visible_ignored_last_page_len),
    ("sparse_decode", "sparse_decode_drops_last_token", _always),
    ("sparse_paged_decode", "sparse_paged_decode_wrong_kv_head", _visible_wrong_kv_head),
    ("magicpig_decode", "magicpig_decode_swaps_k_and_l", _visible_swapped_k_l),
    ("prefill_varlen", "prefill_varlen_leaks_across_sequences", _visible_leak),
    ("block_sparse", "block_sparse_drops_partial_last_block", _visible_dropped_last_block),
    ("block_sparse", "block_sparse_pad_as_block", _visible_pad_as_block),
    ("mustafar", "mustafar_bit_order_reversed", _visible_bit_order),
    ("mustafar", "mustafar_zero_point_sign", _visible_quantisation),
    ("mustafar", "mustafar_neighbour_scale", _visible_quantisation),
]


def expected_failures(family_name, visible):
    family = importlib.import_module(f"cases.{family_name}").FAMILY
    quick = select(family.cases, "quick")
    return {c.id for c in quick if visible(c) and lookup(KNOWN_FAILURES, c, "cpu") is None}, quick


@pytest.mark.parametrize("family,planted,visible", PLANTED, ids=[p[1] for p in PLANTED])
def test_planted_bug_fails_exactly_the_cases_that_can_see_it(run_suite, family, planted, visible):
    impl = f"tests.planted:{planted}"
    run = run_suite(f"cases/test_{family}.py", "--impl", f"{family}={impl}")
    outcomes = run.outcomes()
    should_fail, quick = expected_failures(family, visible)
    assert len(outcomes) == len(quick), run.output[-3000:]
    should_fail -= {cid for cid, o in outcomes.items() if o == "skip"}  # skipped with a stated reason
    failed = {cid for cid, o in outcomes.items() if o == "fail"}
    assert failed == should_fail, run.output[-3000:]
    for cid in failed:
        r = run.by_case()[cid]
        assert r["stage"] == "numeric" and r["impl"] == impl and r["headroom"] < 1, r
    assert {o for cid, o in outcomes.items() if cid not in failed} <= {"pass", "xfail", "skip"}
    if visible not in (_always,):
        assert len(failed) < len(outcomes), "the catalog should also hold cases where the bug is invisible"
    assert run.returncode == 1


def test_writes_outside_the_output_and_input_mutation_are_caught(run_suite):
    case = "cases/test_decode.py::test_decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"
    out = run_suite(case, "--impl", "decode=tests.planted:decode_writes_past_end").records
    assert out[0]["outcome"] == "fail" and "outside its output" in out[0]["message"]
    mod = run_suite(case, "--impl", "decode=tests.planted:decode_modifies_k").records
    assert mod[0]["outcome"] == "fail" and "input k was modified" in mod[0]["message"]
