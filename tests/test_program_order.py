"""--program-order (attnsuite/interpreted.py): the interpreter runs a launch's programs in grid
order, reversed, or shuffled by a seed the reproduction command keeps, so a store into another
program's rows shows on cpu; the planted mutant that makes such a store passes in grid order and
fails in the others."""
from __future__ import annotations

import os

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from attnsuite import interpreted  # noqa: E402

interpreter_only = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter only")


@triton.jit
def _log_programs(order_ptr, counter_ptr, NY: tl.constexpr):
    n = tl.atomic_add(counter_ptr, 1)
    tl.store(order_ptr + n, tl.program_id(0) * NY + tl.program_id(1))


def _order_of_programs(spec: str, grid=(3, 4)) -> list[int]:
    interpreted.set_program_order(spec)
    try:
        order = torch.full((grid[0] * grid[1],), -1, dtype=torch.int32)
        _log_programs[grid](order, torch.zeros(1, dtype=torch.int32), NY=grid[1])
    finally:
        interpreted.set_program_order("grid")
    return order.tolist()


@interpreter_only
def test_every_program_runs_once_in_the_order_asked_for():
    assert _order_of_programs("grid") == list(range(12))
    assert _order_of_programs("reversed") == list(range(11, -1, -1))
    shuffled = _order_of_programs("shuffled:5")
    assert sorted(shuffled) == list(range(12)) and shuffled != list(range(12))
    assert _order_of_programs("shuffled:5") == shuffled  # the seed and the grid alone decide it
    assert _order_of_programs("shuffled:6") != shuffled
    assert _order_of_programs("grid") == list(range(12))  # and grid order comes back


def test_the_option_is_checked_and_normalised():
    assert interpreted.parse_program_order("shuffled") == "shuffled:0"
    assert interpreted.parse_program_order("shuffled:12") == "shuffled:12"
    for bad in ("random", "reversed:3", "shuffled:x"):
        with pytest.raises(ValueError, match="program-order"):
            interpreted.parse_program_order(bad)


#: A few small decode cases: enough programs per launch (B x Hq rows) for a row to have a neighbour.
SUBSET = "decode and S17 and not bf16"


def test_a_store_into_the_next_program_s_row_passes_in_grid_order_and_fails_shuffled(run_suite):
    impl = "--impl=decode=mutants.decode:decode_stores_into_the_next_row"
    grid = run_suite("--device", "cpu", "cases/decode.py", "-k", SUBSET, impl)
    assert grid.returncode == 0 and grid.outcomes(), grid.output[-3000:]
    assert set(grid.outcomes().values()) == {"pass"}
    shuffled = run_suite("--device", "cpu", "cases/decode.py", "-k", SUBSET, impl, "--program-order", "shuffled:1")
    assert set(shuffled.outcomes()) == set(grid.outcomes())
    assert set(shuffled.outcomes().values()) == {"fail"}, shuffled.output[-3000:]
    # The record's reproduction command runs the case the same way.
    assert all("--program-order shuffled:1" in r.get("repro", "") for r in shuffled.records), shuffled.records[0]
    # The project's kernels pass in any order.
    own = run_suite("--device", "cpu", "cases/decode.py", "-k", SUBSET, "--program-order", "reversed")
    assert own.returncode == 0 and set(own.outcomes().values()) == {"pass"}, own.output[-3000:]
