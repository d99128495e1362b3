"""The harness catches implementations that misbehave outside their numbers: a write one element
past an output and an input modified in place both fail the case. (Wrong numbers per family are
the mutation catalog's job: tests/test_mutants.py.)"""

CASE = "cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"


def test_writes_outside_the_output_and_input_mutation_are_caught(run_suite):
    # Both implementations side by side in one run (each case gets inputs of its own).
    impls = ["tests.planted:decode_writes_past_end", "tests.planted:decode_modifies_k"]
    run = run_suite(*(f"{CASE}@{i}" for i in impls), *(a for i in impls for a in ("--impl", f"decode={i}")))
    by_impl = {r["impl"]: r for r in run.records}
    out, mod = (by_impl[i] for i in impls)
    assert out["outcome"] == "fail" and "outside its output" in out["message"] and "input" not in out["message"]
    assert mod["outcome"] == "fail" and "input k was modified" in mod["message"] and "outside" not in mod["message"]
