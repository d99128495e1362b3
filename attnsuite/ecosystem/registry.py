"""Every library the adapters are written against, and their adapters by family. The adapter
modules import their helpers from ``library``, ``_adapter`` and ``_layout`` (below them); only
this module imports the adapters, so the package has no import circle."""
from __future__ import annotations

from typing import Callable

from . import flag_gems, flashinfer, flex, torch_npu, torch_sdpa, vllm
from .library import Library

#: The adapter modules, in the order their implementations are listed.
MODULES = (torch_sdpa, flex, flag_gems, vllm, flashinfer, torch_npu)


def implementations(family: str) -> dict[str, Callable]:
    """Every ecosystem adapter of ``family``, by registered name (installed or not: one that
    cannot run here says why, case by case)."""
    found: dict[str, Callable] = {}
    for module in MODULES:
        found.update(module.IMPLS.get(family, {}))
    return found


def libraries() -> list[Library]:
    """The libraries the adapters are written against (for the README and the reports)."""
    return [m.LIBRARY for m in MODULES]
