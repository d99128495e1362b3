"""The suite has teeth: planted bugs are reported as numeric failures by exactly the cases
in which the bug is observable, and every other case still passes (or is a known failure)."""
import pytest

from cases.decode import FAMILY as DECODE
from cases.prefill import FAMILY as PREFILL
from attnsuite.case import select


def expected_prefill_failures():
    # A wrong scale changes nothing when every row has one key (S=1) and no LSE is returned.
    return {c.id for c in select(PREFILL.cases, "quick") if c["S"] > 1 or c["lse"]}


def expected_decode_failures():
    # A wrong KV-head mapping is invisible when each KV head serves one query head or all of them.
    return {c.id for c in select(DECODE.cases, "quick") if c["Hkv"] > 1 and c["Hq"] > c["Hkv"]}


def known(case_id):
    return case_id.startswith(("prefill[bf16", "decode[bf16"))  # interpreter bf16 tl.dot (ledger)


@pytest.mark.parametrize("family,impl,expected", [
    ("prefill", "tests.planted:prefill_wrong_scale", expected_prefill_failures),
    ("decode", "tests.planted:decode_wrong_kv_head", expected_decode_failures),
])
def test_planted_bug_fails_exactly_the_cases_that_can_see_it(run_suite, family, impl, expected):
    run = run_suite(f"cases/test_{family}.py", "--impl", f"{family}={impl}")
    outcomes = run.outcomes()
    assert outcomes, run.output
    failed = {cid for cid, o in outcomes.items() if o == "fail"}
    should_fail = {cid for cid in expected() if not known(cid)}
    assert failed == should_fail, run.output[-3000:]
    for cid in failed:
        r = run.by_case()[cid]
        assert r["stage"] == "numeric" and r["impl"] == impl and r["headroom"] < 1
    others = {o for cid, o in outcomes.items() if cid not in failed}
    assert others <= {"pass", "xfail"}
    assert any(o == "pass" for o in others), "the planted bug must stay invisible somewhere"
    assert run.returncode == 1


def test_writes_outside_the_output_and_input_mutation_are_caught(run_suite):
    case = "cases/test_decode.py::test_decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"
    out = run_suite(case, "--impl", "decode=tests.planted:decode_writes_past_end").records
    assert out[0]["outcome"] == "fail" and "outside its output" in out[0]["message"]
    mod = run_suite(case, "--impl", "decode=tests.planted:decode_modifies_k").records
    assert mod[0]["outcome"] == "fail" and "input k was modified" in mod[0]["message"]
