"""The Ascend compile-only tier against a nondeterministic compiler: the MLIR tools run on one
thread where they list the option, and a bishengir failure is compiled once more, a pass on the
second try recorded as flaky (attnsuite/compile/npu.py)."""
import stat

import pytest

from attnsuite.compile import npu
from attnsuite.compile.result import FAIL, PASS, CompileOutcome


def _outcome(outcome, stage=None, message=""):
    return CompileOutcome(target="Ascend910B2", outcome=outcome, stage=stage, message=message,
                          last_stage_reached="x", artifacts={}, seconds=1.0, kernel="k")


@pytest.fixture
def tries(monkeypatch):
    """compile_once returns the queued outcomes in order; the list records how many were used."""
    queue = []

    def fake(plan, target, **options):
        return queue.pop(0)
    monkeypatch.setattr(npu, "compile_once", fake)
    return queue


def test_a_bishengir_failure_that_passes_the_second_time_is_a_pass_marked_flaky(tries):
    tries += [_outcome(FAIL, "bishengir", "operand #2 does not dominate this use"), _outcome(PASS)]
    oc = npu.compile_link(object())
    assert oc.outcome == PASS
    assert oc.artifacts["flaky"] == "operand #2 does not dominate this use"
    assert "second try" in oc.message and oc.seconds == 2.0
    assert not tries


def test_a_bishengir_failure_that_repeats_is_the_first_failure(tries):
    tries += [_outcome(FAIL, "bishengir", "first"), _outcome(FAIL, "bishengir", "second")]
    oc = npu.compile_link(object())
    assert (oc.outcome, oc.message) == (FAIL, "first") and "flaky" not in oc.artifacts
    assert not tries


@pytest.mark.parametrize("first", [_outcome(PASS), _outcome(FAIL, "ub_overflow", "ub overflow"),
                                   _outcome(FAIL, "adapter", "x"), _outcome(FAIL, "frontend", "x"),
                                   _outcome(FAIL, "bishengir", "bishengir-compile timed out after 9s")])
def test_other_outcomes_are_compiled_once(tries, first):
    tries += [first, _outcome(PASS)]
    assert npu.compile_link(object()) is first
    assert len(tries) == 1


def _tool(tmp_path, name, help_text):
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\necho '{help_text}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_mlir_tools_that_list_the_option_run_single_threaded(tmp_path):
    tool = _tool(tmp_path, "bishengir-compile", "  --mlir-disable-threading  - Disable")
    assert npu._single_threaded([tool, "in.mlir", "-o", "out"])[-1] == "--mlir-disable-threading"
    (tmp_path / "old").mkdir()
    old = _tool(tmp_path / "old", "bishengir-compile", "no such option")
    assert npu._single_threaded([old, "in.mlir"]) == [old, "in.mlir"]
    other = _tool(tmp_path, "hivmc", "  --mlir-disable-threading")
    assert npu._single_threaded([other]) == [other]
