"""The porting notes, the known-failure ledger and the probes cannot drift apart.

* every ledger entry names an existing section of porting_notes.md (``note``) and an existing
  case (``probe``) that the entry itself selects, and that section names the probe;
* every section names at least one existing case id, and is the note of some entry;
* the probes family: a rewrite is never in the ledger; every probe's original is; and the
  ledger says exactly what was measured (``MEASURED_FAILURES``): an original with no ledger
  entry for a toolchain is expected to pass there. Nothing here compiles or runs a kernel.
"""
from __future__ import annotations

import importlib
import re

import pytest

from attnsuite.ledger import load, lookup
from cases.probes import FAMILY as PROBES, PROBE_SPECS
from tests.conftest import ROOT

LEDGER = load(ROOT / "cases" / "known_failures.toml")
NOTES_PATH = ROOT / "porting_notes.md"

#: The toolchains the probes were measured with (porting_notes.md says how):
#: name -> (device kind, ledger mode, installed compiler versions).
TOOLCHAINS = {
    "npu triton-ascend 3.2.0rc2": ("npu", "compile", {"triton-ascend": "3.2.0rc2"}),
    "npu triton-ascend 3.2.0rc4": ("npu", "compile", {"triton-ascend": "3.2.0rc4"}),
    "npu triton-ascend 3.2.0": ("npu", "compile", {"triton-ascend": "3.2.0"}),
    "cuda triton 3.9.0 compile": ("cuda", "compile", {"triton": "3.9.0"}),
    "cpu triton 3.9.0 interpreter": ("cpu", "numeric", {"triton": "3.9.0"}),
    "cuda triton 3.6.0 (H200)": ("cuda", "numeric", {"triton": "3.6.0"}),
}

#: Probes added after a toolchain's measurement: nothing is claimed for them there.
NOT_MEASURED = {
    "cuda triton 3.6.0 (H200)": {"loop_const_trip", "loop_carried_mask", "gather_inner_axis",
                                 "early_return", "gather_int32", "while_block_index", "interp_bf16_round",
                                 "fp8_load", "gathered_index_select", "loop_reduction_bound"},
    "npu triton-ascend 3.2.0rc4": {"loop_reduction_bound"},
}

_ASCEND = {"npu triton-ascend 3.2.0rc2", "npu triton-ascend 3.2.0rc4", "npu triton-ascend 3.2.0"}
_RC2 = {"npu triton-ascend 3.2.0rc2"}

#: What the probe cases did on those toolchains: case id -> the toolchains where it failed.
#: Every probes case not listed, and every toolchain not listed for a case, passed.
MEASURED_FAILURES = {
    "probes[interp_bf16_dot-original-bf16]": {"cpu triton 3.9.0 interpreter"},
    "probes[interp_bf16_round-original-bf16]": {"cpu triton 3.9.0 interpreter"},
    "probes[block_ptr_order-original-fp16]": _RC2 | {"cuda triton 3.9.0 compile", "cpu triton 3.9.0 interpreter"},
    "probes[loop_if_mask-original-fp16-pages2]": _RC2,
    "probes[loop_const_trip-original-fp16-pages2]": _RC2,
    "probes[loop_const_trip-original-fp16-pages3]": _RC2,
    "probes[loop_carried_mask-original-fp16-pages2]": _ASCEND,
    "probes[loop_reduction_bound-original-fp16]": _RC2,
    "probes[gather_transposed-original-fp16]": _RC2,
    "probes[gather_inner_axis-original-fp16]": _RC2,
    "probes[gathered_index_select-original-fp16]": _RC2,
    "probes[early_return-original-fp16]": _RC2,
    "probes[gather_int32-original-fp16]": {"npu triton-ascend 3.2.0rc4", "npu triton-ascend 3.2.0"},
    "probes[while_block_index-original-fp16]": {"npu triton-ascend 3.2.0rc4", "npu triton-ascend 3.2.0"},
    "probes[page_div_zero-original-fp16]": _RC2,
    "probes[ub_overflow-original-fp16]": _ASCEND,
    "probes[grid_limit-original-fp16]": _ASCEND,
    "probes[cumsum-original-fp16]": _RC2,
    "probes[fp8_load-original-fp32]": _ASCEND | {"cuda triton 3.9.0 compile", "cpu triton 3.9.0 interpreter"},
}

#: Sections that explain something other than a ledger entry: the performance hazards (never
#: failures), and failures met once that no reduced kernel reproduces (they say so).
PERFORMANCE_SECTION = "performance-hazards"
NOT_REPRODUCED = "**Not reproduced:**"
#: A failure that comes and goes on the same input: no strict xfail can hold, so no ledger entry,
#: but the section still names the cases where it was seen.
NONDETERMINISTIC = "**Nondeterministic:**"

_CASE_ID = re.compile(r"^(\w+)\[(.+)\]$")
_BACKTICKED_ID = re.compile(r"`(\w+)\[([^\]`\s]+)\]`")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def note_sections() -> dict[str, str]:
    """porting_notes.md's ``## `` sections: anchor -> body."""
    sections, current = {}, None
    for line in NOTES_PATH.read_text().splitlines():
        if line.startswith("## "):
            current = anchor(line[3:])
            assert current not in sections, f"porting_notes.md: two sections with anchor {current!r}"
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


def find_case(case_id: str):
    """The Case with this id (``family[label]``) from cases/<family>.py, or None."""
    m = _CASE_ID.match(case_id)
    if not m or not (ROOT / "cases" / f"{m.group(1)}.py").is_file():
        return None
    family = importlib.import_module(f"cases.{m.group(1)}").FAMILY
    return next((c for c in family.cases if c.id == case_id), None)


def selects(entry, case, strict: bool = False) -> bool:
    """The entry's families and ``where`` cover the case (devices, mode and versions aside).
    ``strict``: the case must also have every parameter the entry constrains."""
    if case.family not in entry.families:
        return False
    if strict and any(k not in case.params for k in entry.where):
        return False
    return all(k not in case.params or case.params[k] in allowed for k, allowed in entry.where.items())


SECTIONS = note_sections()
ENTRY_IDS = [e.id for e in LEDGER]
PROBE_CASES = {c.id: c for c in PROBES.cases}


@pytest.mark.parametrize("entry", LEDGER, ids=ENTRY_IDS)
def test_entry_names_an_existing_note_section(entry):
    assert entry.note, f"ledger entry {entry.id!r} has no note"
    assert entry.note in SECTIONS, (f"ledger entry {entry.id!r}: note {entry.note!r} is not a '## ' "
                                    f"section of porting_notes.md (have {sorted(SECTIONS)})")


@pytest.mark.parametrize("entry", LEDGER, ids=ENTRY_IDS)
def test_entry_names_an_existing_probe_that_it_selects(entry):
    case = find_case(entry.probe)
    assert case is not None, f"ledger entry {entry.id!r}: probe {entry.probe!r} is not a case id"
    assert selects(entry, case, strict=True), (
        f"ledger entry {entry.id!r} does not select its own probe {entry.probe!r} "
        f"(families {entry.families}, where {dict(entry.where)}, params {dict(case.params)})")
    if entry.note in SECTIONS:
        assert f"`{entry.probe}`" in SECTIONS[entry.note], (
            f"porting_notes.md#{entry.note} does not name the probe {entry.probe!r} of {entry.id!r}")


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_note_section_names_existing_cases_and_has_an_entry(section):
    ids = ["{}[{}]".format(*m) for m in _BACKTICKED_ID.findall(SECTIONS[section])
           if (ROOT / "cases" / f"{m[0]}.py").is_file()]
    missing = [i for i in ids if find_case(i) is None]
    assert not missing, f"porting_notes.md#{section} names case ids that do not exist: {missing}"
    entries = [e.id for e in LEDGER if e.note == section]
    if NOT_REPRODUCED in SECTIONS[section]:
        assert not entries, f"porting_notes.md#{section} says it is not reproduced, yet has entries {entries}"
        assert "Confirmed on hardware:" in SECTIONS[section], section
        return
    assert ids, f"porting_notes.md#{section} names no probe or case id (e.g. `probes[...]`)"
    if NONDETERMINISTIC in SECTIONS[section]:
        assert not entries, f"porting_notes.md#{section} is nondeterministic, yet has entries {entries}"
        assert "Confirmed on hardware:" in SECTIONS[section], section
        return
    if section == PERFORMANCE_SECTION:
        assert not entries, "a performance hazard is never a ledger failure"
        for hazard in ("Grid vs cores", "Scalarized and per-row accesses", "Unified buffer (UB) use"):
            assert f"### {hazard}" in SECTIONS[section], hazard
        assert "prediction" in SECTIONS[section] and "Confirmed on hardware:** no" in SECTIONS[section]
        return
    assert entries, f"porting_notes.md#{section} is the note of no ledger entry"
    if any("npu" in e.devices for e in LEDGER if e.note == section):
        assert "Confirmed on hardware:" in SECTIONS[section], (
            f"porting_notes.md#{section} must say whether it was confirmed on hardware")


def test_every_probe_has_both_variants_and_a_ledger_entry_for_its_original():
    for probe in PROBE_SPECS:
        variants = {c["variant"] for c in PROBES.cases if c["probe"] == probe}
        assert variants == {"original", "rewrite"}, (probe, variants)
        originals = [c for c in PROBES.cases if c["probe"] == probe and c["variant"] == "original"]
        assert any(selects(e, c) for e in LEDGER for c in originals), (
            f"probe {probe!r}: no ledger entry covers its original; a probe reproduces a recorded failure")


def test_no_ledger_entry_covers_a_rewrite():
    for case in PROBES.cases:
        if case["variant"] == "rewrite":
            covering = [e.id for e in LEDGER if selects(e, case)]
            assert not covering, f"{case.id} is a portable rewrite, yet ledger entries {covering} cover it"


def test_measured_failures_name_probe_cases_and_toolchains():
    for case_id, toolchains in MEASURED_FAILURES.items():
        assert case_id in PROBE_CASES, case_id
        assert PROBE_CASES[case_id]["variant"] == "original", case_id
        assert toolchains <= set(TOOLCHAINS), toolchains - set(TOOLCHAINS)


@pytest.mark.parametrize("toolchain", sorted(TOOLCHAINS))
def test_ledger_matches_what_was_measured(toolchain):
    """A probe case is in the ledger for a toolchain exactly where it was measured to fail:
    an original without an entry there is expected to pass (a strict xfail turns a fix into
    XPASS, an unlisted failure into a plain failure)."""
    device, mode, versions = TOOLCHAINS[toolchain]
    wrong = []
    for case in PROBES.cases:
        if case["probe"] in NOT_MEASURED.get(toolchain, ()):
            continue
        entry = lookup(LEDGER, case, device, versions, mode=mode)
        expected_fail = toolchain in MEASURED_FAILURES.get(case.id, set())
        if expected_fail and entry is None:
            wrong.append(f"{case.id}: measured to fail, no ledger entry")
        elif not expected_fail and entry is not None:
            wrong.append(f"{case.id}: measured to pass, yet ledger entry {entry.id!r} expects a failure")
    assert not wrong, f"{toolchain}:\n" + "\n".join(wrong)
