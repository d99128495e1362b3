"""The Ascend compile-only tier against a nondeterministic compiler: the MLIR tools run on one
thread where they list the option; a bishengir failure is compiled once more and an adapter
killed by a signal up to three more times (the first without address randomization), a pass on
a later try recorded as flaky (attnsuite/compile/npu.py)."""
import stat

import pytest

from attnsuite.compile import npu
from attnsuite.compile.result import FAIL, PASS, CompileOutcome


def _outcome(outcome, stage=None, message="", tool_rc=None):
    arts = {} if tool_rc is None else {"tool_rc": tool_rc}
    return CompileOutcome(target="Ascend910B2", outcome=outcome, stage=stage, message=message,
                          last_stage_reached="x", artifacts=arts, seconds=1.0, kernel="k")


class _Queue(list):
    options: list


@pytest.fixture
def tries(monkeypatch):
    """compile_once returns the queued outcomes in order; the list records how many were used."""
    queue = _Queue()
    queue_options = []

    def fake(plan, target, **options):
        queue_options.append(options)
        return queue.pop(0)
    monkeypatch.setattr(npu, "compile_once", fake)
    queue.options = queue_options
    return queue


def test_a_bishengir_failure_that_passes_the_second_time_is_a_pass_marked_flaky(tries):
    tries += [_outcome(FAIL, "bishengir", "operand #2 does not dominate this use"), _outcome(PASS)]
    oc = npu.compile_link(object())
    assert oc.outcome == PASS
    assert oc.artifacts["flaky"] == "operand #2 does not dominate this use"
    assert "try 2" in oc.message and oc.seconds == 2.0
    assert not tries


def test_a_bishengir_failure_that_repeats_is_the_first_failure(tries):
    tries += [_outcome(FAIL, "bishengir", "first"), _outcome(FAIL, "bishengir", "second")]
    oc = npu.compile_link(object())
    assert (oc.outcome, oc.message) == (FAIL, "first") and "flaky" not in oc.artifacts
    assert not tries


def test_an_adapter_killed_by_a_signal_is_tried_three_times(tries):
    crash = "triton-adapter-opt exit -11 (killed by SIGSEGV)"
    tries += [_outcome(FAIL, "adapter", crash, -11), _outcome(FAIL, "adapter", "again", -6),
              _outcome(PASS)]
    oc = npu.compile_link(object())
    assert oc.outcome == PASS and oc.artifacts["flaky"] == crash and "try 3" in oc.message
    assert oc.seconds == 3.0 and not tries
    # The second try runs the adapter without address randomization, the others as usual.
    assert [o.get("fixed_layout", False) for o in tries.options] == [False, True, False]


def test_an_adapter_crash_on_every_try_is_the_first_crash(tries):
    tries += [_outcome(FAIL, "adapter", m, -11) for m in ("first", "second", "third", "fourth")]
    tries.append(_outcome(PASS))
    oc = npu.compile_link(object())
    assert (oc.outcome, oc.message, oc.seconds) == (FAIL, "first", 4.0)
    assert len(tries) == 1


def test_a_bishengir_retry_keeps_address_randomization(tries):
    tries += [_outcome(FAIL, "bishengir", "first"), _outcome(PASS)]
    npu.compile_link(object())
    assert not any(o.get("fixed_layout") for o in tries.options)


def test_the_adapter_runs_without_symbolization_and_with_a_fixed_layout_when_asked(tmp_path):
    tool = tmp_path / "triton-adapter-opt"
    tool.write_text("#!/bin/sh\ncat /proc/self/personality\necho \"$LLVM_DISABLE_SYMBOLIZATION\"\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    plain = npu._ToolLog(30).run([str(tool)], capture_output=True, text=True).stdout.split()
    fixed = npu._ToolLog(30, fixed_layout=True).run([str(tool)], capture_output=True, text=True).stdout.split()
    assert plain[1] == fixed[1] == "1"
    assert int(plain[0], 16) & 0x0040000 == 0
    if int(fixed[0], 16) & 0x0040000 == 0:
        pytest.skip("this container does not allow personality(ADDR_NO_RANDOMIZE)")


@pytest.mark.parametrize("first", [_outcome(PASS), _outcome(FAIL, "ub_overflow", "ub overflow"),
                                   _outcome(FAIL, "adapter", "x"), _outcome(FAIL, "adapter", "x", 1),
                                   _outcome(FAIL, "frontend", "x"),
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
