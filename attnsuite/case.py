"""Conformance cases as data: a family name, readable parameters, a stable id, a seed.

A case's id is ``family[label]`` (e.g. ``prefill[fp16-B2-Hq8-Hkv2-S17-D64-causal]``) and its
inputs are drawn from a generator seeded by a hash of that id, so any case reproduces alone,
in any order, on any worker.
"""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
#: quick: small shapes; full: quick plus device-sized shapes, the origin's bench shapes and
#: sweeps; fuzz: cases drawn at random from each family's legal input space (attnsuite/fuzz.py).
PROFILES = ("quick", "full", "fuzz")


@dataclass(frozen=True)
class Case:
    family: str
    label: str
    params: Mapping[str, Any] = field(hash=False, compare=False)
    #: "quick" cases run everywhere; "full" adds device-sized shapes and the origin's bench shapes.
    profile: str = "quick"
    tags: frozenset = frozenset()

    @property
    def id(self) -> str:
        return f"{self.family}[{self.label}]"

    @property
    def seed(self) -> int:
        return int.from_bytes(hashlib.sha256(self.id.encode()).digest()[:8], "little") & (2**63 - 1)

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.params["dtype"]]

    def __getitem__(self, key: str) -> Any:
        return self.params[key]

    def generator(self) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed)

    def in_profile(self, profile: str) -> bool:
        # full is a superset of quick: a device run never loses a case the interpreter covers.
        if profile == "fuzz":
            return self.profile == "fuzz"
        return profile == "full" and self.profile != "fuzz" or self.profile == "quick"


def grid(**axes: Iterable) -> list[dict]:
    """Cartesian product of named axes, as a list of parameter dicts (the order of ``axes``)."""
    names = list(axes)
    return [dict(zip(names, values)) for values in itertools.product(*axes.values())]


def make_cases(family: str, label: Callable[[Mapping], str], params: Iterable[Mapping],
               profile: str = "quick", tags: Iterable[str] = ()) -> list[Case]:
    return [Case(family, label(p), dict(p), profile, frozenset(tags)) for p in params]


def unique(cases: Iterable[Case]) -> list[Case]:
    """Drop repeated ids (the first declaration wins); catalogs built from overlapping grids."""
    seen: dict[str, Case] = {}
    for case in cases:
        seen.setdefault(case.id, case)
    return list(seen.values())


def select(cases: Iterable[Case], profile: str) -> list[Case]:
    """A catalog's cases for ``profile`` (the fuzz profile draws its own: attnsuite/fuzz.py)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r} (choose from {', '.join(PROFILES)})")
    return [c for c in cases if c.in_profile(profile)]
