"""Launch grids: the plain one (one program per tile) or a persistent one (a few programs, each
looping over tiles ``pid, pid + n_programs, ...``).

An Ascend program is bound to a physical core and a core runs its programs one after another, so
a grid of thousands of programs pays a program's start-up thousands of times (triton-ascend's
migration guide; ``porting_notes.md``, "Grid vs cores"). On Ascend the
kernels therefore launch about one program per core and loop inside; on a GPU, where the grid is
logical and the hardware overlaps programs, they keep the plain grid. ``kernels.settings``'
``persistent_programs`` overrides the choice on any device.

A kernel with a persistent form takes ``n_work, n_programs`` and a ``PERSISTENT`` constexpr, and
calls its per-tile body either once with its program ids or in the loop.
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from . import settings
from ._checks import on_ascend

#: Cores of the Ascend910B2 (CANN's platform file: ai_core_cnt=24, vector_core_cnt=48), used
#: when planning without a device (compile-only); on an NPU the device's own counts are read.
NPU_AI_CORES = 24
NPU_VECTOR_CORES = 48


class Grid(NamedTuple):
    grid: tuple        # what to launch
    n_work: int        # tiles in all (the plain grid's program count)
    n_programs: int    # programs launched
    persistent: bool   # the kernel loops over tiles


def npu_cores(t: torch.Tensor, vector: bool) -> int:
    """AI cores (a kernel with a ``tl.dot`` runs on cube + vector pairs) or vector cores (a
    vector-only kernel): the device's counts on an NPU, the 910B2's otherwise."""
    cores = NPU_VECTOR_CORES if vector else NPU_AI_CORES
    if t.device.type == "npu":
        import triton
        props = triton.runtime.driver.active.utils.get_device_properties(t.device.index or 0)
        cores = int(props.get("num_vectorcore" if vector else "num_aicore", cores))
    return cores


def persistent(t: torch.Tensor) -> bool:
    """Whether kernels launched for tensors like ``t`` loop on a persistent grid."""
    wanted = settings.current().persistent_programs
    return on_ascend(t) if wanted is None else wanted != 0


def plan_grid(plain: tuple, t: torch.Tensor, *, vector: bool) -> Grid:
    """The grid for a kernel whose plain grid is ``plain`` (tiles = the product of its sizes),
    planned for tensors like ``t``; ``vector``: the kernel has no ``tl.dot``."""
    n_work = 1
    for d in plain:
        n_work *= int(d)
    wanted = settings.current().persistent_programs
    if wanted is None:
        wanted = npu_cores(t, vector) if on_ascend(t) else 0
    if wanted == 0:
        return Grid(tuple(plain), n_work, n_work, False)
    n_programs = max(1, min(n_work, wanted))
    return Grid((n_programs,), n_work, n_programs, True)


def npu_splits(rows: int, cores: int, max_splits: int) -> int:
    """Splits per row for a split-KV kernel on a persistent grid of ``cores`` programs: the
    busiest program runs ``cdiv(rows * s, cores)`` items of ``1 / s`` of a row each. The fewest
    splits within 10% of the best such load (up to ``max_splits``): 32 rows on 48 cores take 3
    splits (2 would leave it at one full row), 1000 rows take 1 (6 would gain under 1% and
    cost a merge)."""
    rows, top = max(1, int(rows)), max(1, min(int(max_splits), int(cores)))
    least = min(top, -(-cores // rows))  # fewer rows than cores: every core gets a split
    load = {s: -(-rows * s // cores) / s for s in range(least, top + 1)}
    best = min(load.values())
    return min(s for s, v in load.items() if v <= best * 1.1)
