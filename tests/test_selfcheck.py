"""The harness catches implementations that misbehave outside their numbers: a write one element
past an output and an input modified in place both fail the case. (Wrong numbers per family are
the mutation catalog's job: tests/test_mutants.py.)"""

CASE = "cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"


def test_writes_outside_the_output_and_input_mutation_are_caught(run_suite):
    out = run_suite(CASE, "--impl", "decode=tests.planted:decode_writes_past_end").records
    assert out[0]["outcome"] == "fail" and "outside its output" in out[0]["message"]
    mod = run_suite(CASE, "--impl", "decode=tests.planted:decode_modifies_k").records
    assert mod[0]["outcome"] == "fail" and "input k was modified" in mod[0]["message"]
