"""The fuzz profile: cases drawn at random from each family's legal input space.

Case ``i`` of seed ``s`` is drawn from ``random.Random`` seeded by (family, s, i) alone, through
the family's ``fuzz(rng)`` (cases/<family>.py), so its id (``decode[fuzz3.17-...]``) reproduces it
in any run with ``--profile fuzz --fuzz-seed 3`` and a ``--fuzz-count`` above 17, whatever else
runs beside it. The generator only produces legal input (illegal input is the bad-input tests'
job). A failure found this way becomes a permanent catalog case: paste its params into the
family's catalog.
"""
from __future__ import annotations

import hashlib
import random

from .case import Case

TAG = "fuzz"


def rng_for(family: str, seed: int, index: int) -> random.Random:
    digest = hashlib.sha256(f"{family}/{seed}/{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def fuzz_cases(family, seed: int, count: int) -> list[Case]:
    """``count`` cases of ``family`` for ``seed`` (none when the family has no generator)."""
    cases = []
    for i in range(count):
        rng = rng_for(family.name, seed, i)
        params = family.fuzz(rng)
        if params is None:
            return []
        params = family.fuzz_classes(params, rng)
        label = f"fuzz{seed}.{i}-{family.label(params)}"
        cases.append(Case(family.name, label, dict(params), "fuzz", frozenset({TAG})))
    return cases
