"""kernels/_grid.py: the plain grid off Ascend, about one program per core on Ascend, and the
``persistent_programs`` switch that runs the Ascend loop on any device."""
import pytest
import torch

import kernels.settings as ks
from kernels import _grid


def test_plain_grid_off_ascend_and_persistent_on_it(monkeypatch):
    t = torch.empty(1)
    assert _grid.plan_grid((40, 6), t, vector=False) == _grid.Grid((40, 6), 240, 240, False)
    monkeypatch.setattr(_grid, "on_ascend", lambda t: True)
    assert _grid.plan_grid((40, 6), t, vector=False) == _grid.Grid((_grid.NPU_AI_CORES,), 240,
                                                                     _grid.NPU_AI_CORES, True)
    assert _grid.plan_grid((40, 6), t, vector=True).n_programs == _grid.NPU_VECTOR_CORES
    # Less work than cores: one program per tile, still through the loop.
    assert _grid.plan_grid((2, 3), t, vector=True) == _grid.Grid((6,), 6, 6, True)


def test_the_setting_forces_or_refuses_the_persistent_grid(monkeypatch):
    t = torch.empty(1)
    with ks.using(persistent_programs=3):
        assert _grid.plan_grid((5, 2), t, vector=False) == _grid.Grid((3,), 10, 3, True)
    monkeypatch.setattr(_grid, "on_ascend", lambda t: True)
    with ks.using(persistent_programs=0):
        assert _grid.plan_grid((5, 2), t, vector=False) == _grid.Grid((5, 2), 10, 10, False)
    for bad in (-1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="persistent_programs"):
            ks.configure(persistent_programs=bad)
    assert ks.current().persistent_programs is None


def test_the_option_is_checked_and_reaches_the_repro_command(run_suite):
    from attnsuite.options import OptionError, _persistent_programs

    class Config:
        class option:
            persistent_programs = -2

        def getoption(self, name):
            return getattr(self.option, name)

    with pytest.raises(OptionError, match="--persistent-programs must be >= 0, got -2"):
        _persistent_programs(Config())
    run = run_suite("cases/decode.py", "--device", "cpu", "--persistent-programs", "3", "-k", "S17 and lse")
    assert run.returncode == 0, run.output[-2000:]
    assert run.records and all("--persistent-programs 3" in r["repro"] for r in run.records)
