"""Which benchmark items a session has: every asked-for family's headline cases (tag "bench"),
its sweeps in the full profile, and its mapped --workloads cases, once per implementation under
test. The ``bench_case`` parameter of ``benchmarks/test_bench.py`` comes from here."""
from __future__ import annotations

import pytest

from ..collection import register_tags
from ..context import suite


def bench_selection(family, profile: str) -> list:
    """A family's benchmark cases: its headline ("bench") cases, plus the sweeps in full."""
    wanted = {"bench"} | ({"sweep"} if profile == "full" else set())
    return [c for c in family.cases if wanted & set(c.tags)]


def bench_params(config) -> list:
    session = suite(config)
    params = []
    for family in session.families().values():
        if session.only_families is not None and family.name not in session.only_families:
            continue
        impls = [name for name, _ in session.impls_for(family)]
        # --workloads: every mapped workload is a benchmark case too (shapes from a deployment).
        workloads = [c for c in session.workload_cases(family) if not c.params.get("unmapped")]
        for case in [*bench_selection(family, session.options.profile), *workloads]:
            # The case's tags are marks too: ``-m "not sweep"`` keeps the headline cases.
            tags = {"bench", *case.tags} | ({"workload"} if case in workloads else set())
            register_tags(config, tags)
            marks = [getattr(pytest.mark, tag) for tag in sorted(tags)]
            # One benchmark per implementation when several run side by side (``@impl`` ids,
            # as the conformance items have), each timed beside the same baselines.
            params += [pytest.param(case, id=case.id if len(impls) == 1 else f"{case.id}@{impl}",
                                    marks=marks) for impl in impls]
    return params
