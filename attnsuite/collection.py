"""From the family registry to pytest items: a family's catalog module is its test file, and each
(case, implementation) pair is one item whose known-failure verdict is decided here, once.

Node ids read ``cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]`` (the case id), with
``@impl`` appended when several implementations of the family run side by side.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from .case import Case
from .context import suite
from .flashinfer_trace.workloads import unmapped_reason
from .ledger import KnownFailure, KnownFailureHit
from .result import CaseFailure, CaseOutcome
from .scheduling import order_for_compiles, specialization_key

#: The frozen result of a case, set by the item (or the benchmark fixture) that ran it.
OUTCOME = pytest.StashKey[CaseOutcome]()
#: What the item is: the case, the implementation and the ledger's verdict.
PARAM = pytest.StashKey["CaseParam"]()


@dataclass(frozen=True)
class CaseParam:
    family: object
    case: Case
    impl: str
    known: KnownFailure | None
    node_name: str
    mode: str

    def marks(self, timeout: float | None) -> list:
        marks = [pytest.mark.conformance, pytest.mark.impl(self.impl)]
        marks += [getattr(pytest.mark, tag) for tag in sorted(self.case.tags)]
        if self.known is not None:
            k = self.known
            strict = k.strict_for(self.impl)
            stale = (f"if this case passes, the ledger entry {k.id!r} looks stale" if strict
                     else "this implementation may not use the construct: a pass is a pass")
            marks.append(pytest.mark.xfail(strict=strict, raises=KnownFailureHit, reason=(
                f"known failure {k.id}: {k.reason} (porting_notes.md#{k.note}); {stale}")))
        if timeout is not None:
            marks.append(pytest.mark.timeout(timeout))
        return marks


def case_params(family, cases: list[Case], impls: list[str], ledger_lookup: Callable, mode: str) -> list[CaseParam]:
    """One param per (case, implementation), the ledger looked up once for each."""
    params = []
    for case in cases:
        for impl in impls:
            # Ids name the implementation only when there are several, so a single-implementation
            # run keeps the plain case ids.
            node = case.id if len(impls) == 1 else f"{case.id}@{impl}"
            params.append(CaseParam(family, case, impl, ledger_lookup(case, impl), node, mode))
    return params


class FamilyFile(pytest.File):
    """A family's catalog module, collected as the test file of its cases."""

    family = None

    def collect(self):
        session = suite(self.config)
        for param in session.params(self.family):
            yield CaseItem.from_parent(self, name=param.node_name, param=param)


def _registered_tags(config) -> set[str]:
    return {line.split(":")[0].split("(")[0].strip() for line in config.getini("markers")}


def register_tags(config, tags) -> None:
    """Catalog tags (bench, sweep, kept, ...) select with -m; registered so --strict-markers
    accepts them and pytest does not warn once per case."""
    for tag in sorted(set(tags) - _registered_tags(config)):
        config.addinivalue_line("markers", f"{tag}: a case tag of the catalog")


class CaseItem(pytest.Item):
    """One conformance case against one implementation."""

    def __init__(self, *, param: CaseParam, **kwargs):
        super().__init__(**kwargs)
        self.param = param
        self.stash[PARAM] = param
        timeout = suite(self.config).options.case_timeout if self.config.pluginmanager.hasplugin("timeout") \
            else None
        register_tags(self.config, param.case.tags)
        for mark in param.marks(timeout):
            self.add_marker(mark)
        # -k matches tags too: ``-k bench``, ``-k "fuzz and decode"``.
        self.extra_keyword_matches.update(param.case.tags)

    def runtest(self) -> None:
        param = self.param
        reason = unmapped_reason(param.case) or param.family.skip_reason(param.case)
        if reason:
            skip(reason)
        outcome = suite(self.config).run(param)
        self.stash[OUTCOME] = outcome
        if not explainable(param.known, outcome):
            self._drop_xfail()
        raise_for(outcome, param)

    def _drop_xfail(self) -> None:
        """The ledger's entry cannot explain this case's result (an interpreter failure where no
        kernel was interpreted): judge it as a plain case, so a pass is a pass (not an XPASS)
        and a failure a failure. pytest re-reads the xfail marks after the call when its stash
        entry is None (``_pytest.skipping``), so the mark goes too."""
        from _pytest.skipping import xfailed_key

        self.own_markers[:] = [m for m in self.own_markers if m.name != "xfail"]
        self.stash[xfailed_key] = None

    def reportinfo(self):
        return self.path, 0, f"{self.param.case.id} [{self.param.impl}]"

    def repr_failure(self, excinfo, style=None):
        # The harness's own failures already say what went wrong in one paragraph; a traceback
        # through the runner would only bury it.
        if isinstance(excinfo.value, (CaseFailure, KnownFailureHit)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)


def skip(reason: str) -> None:
    """Skip the running case, reported at the case (not at this line)."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


def explainable(known: KnownFailure | None, outcome: CaseOutcome) -> bool:
    """Whether the ledger entry of a case can explain what happened in it at all."""
    return known is not None and not (known.only_after_interpreted_launch
                                      and outcome.interpreted_launches == 0)


def raise_for(outcome: CaseOutcome, param: CaseParam) -> None:
    """Turn a frozen outcome into pytest's vocabulary (the record keeps the outcome itself)."""
    if outcome.status == "unsupported":
        skip(f"{param.impl} does not support this case: {outcome.message}")
    if outcome.status == "oom":
        skip(f"out of device memory ({outcome.stage}): {outcome.message} -- not a kernel failure")
    if outcome.status == "fail":
        known = param.known
        if known is not None and known.explains(outcome.stage, outcome.message,
                                                outcome.interpreted_launches):
            raise KnownFailureHit(known, outcome.stage, outcome.message)
        raise CaseFailure(outcome.stage, f"{outcome.stage}: {outcome.message}")


# -- what a run collects ------------------------------------------------------------------------

def collect_file(file_path, parent):
    """A family's catalog module as a ``FamilyFile`` (None for any other file, and for a family
    this run does not ask for: see ``families_asked``)."""
    if file_path.suffix != ".py" or file_path.name.startswith(("_", "test_")):
        return None
    session = suite(parent.config)
    if not session.in_registry_package(file_path):
        return None
    family = session.family_at(file_path)
    if family is None or (session.only_families is not None and family.name not in session.only_families):
        return None
    node = FamilyFile.from_parent(parent, path=file_path)
    node.family = family
    return node


def families_asked(config, session) -> set[str] | None:
    """The families a run with ``--impl`` collects: those the --impl options name, those whose
    catalog module is named as a test path, and those named in a -k expression. None (every
    family): no --impl, or a bare ``--impl all``. Controller and xdist workers compute the same
    set from the same arguments, as xdist requires of a collection."""
    from .impls import EVERY_FAMILY, parse_options

    specs = parse_options(list(session.options.impl_specs))
    if not specs or EVERY_FAMILY in specs:
        return None
    names = set(session.families())
    asked = set(specs) & names
    for arg in config.args:
        path = Path(str(arg).split("::", 1)[0])
        path = path if path.is_absolute() else Path(config.invocation_params.dir) / path
        if path.is_file() and session.in_registry_package(path):
            family = session.family_at(path)
            if family is not None:
                asked.add(family.name)
    keyword = getattr(config.option, "keyword", "") or ""
    asked |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", keyword)) & names
    return asked


def is_case(item) -> bool:
    return item.get_closest_marker("conformance") is not None or item.get_closest_marker("bench") is not None


def specialization(item):
    param = item.stash.get(PARAM, None) if is_case(item) else None
    if param is None:
        return None
    return specialization_key(param.case.family, param.case.params)


def order_and_time(config, items) -> None:
    """Compiling devices: cases of one kernel specialization next to each other (attnsuite/
    scheduling.py). With pytest-timeout: a benchmark gets the case timeout too."""
    session = suite(config)
    if session.options.device_kind != "cpu":  # the interpreter compiles nothing
        order_for_compiles(items, specialization)
    if config.pluginmanager.hasplugin("timeout"):
        timeout = session.options.case_timeout
        for item in items:
            if item.get_closest_marker("bench") and not item.get_closest_marker("timeout"):
                item.add_marker(pytest.mark.timeout(timeout))
