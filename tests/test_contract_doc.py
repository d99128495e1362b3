"""docs/contract.md stays in step with the interfaces: every registered family (the registry, so a
family added later is checked too) has a section headed with its name in backticks, and that
section names each argument its ``Interface`` declares (or, for an object interface, each
method). The output and scale keywords every attention family shares are described once, under
"Contract details", and must be named there."""
from __future__ import annotations

import re

import pytest

from attnsuite.interfaces import ATTENTION_KEYWORDS
from attnsuite.registry import families
from tests.conftest import ROOT

CONTRACT = ROOT / "docs" / "contract.md"


def _sections(text: str) -> dict[str, str]:
    """Heading line -> the text up to the next heading of the same or a higher level."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"#{2,3} ", line)]
    for n, i in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(lines)
        out[lines[i]] = "\n".join(lines[i:end])
    return out


def _family_section(sections: dict[str, str], name: str) -> str | None:
    found = [body for head, body in sections.items() if f"`{name}`" in head]
    return "\n".join(found) if found else None


def _named(body: str, word: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", body) is not None


@pytest.mark.parametrize("name", list(families()))
def test_every_family_has_a_section_naming_its_arguments(name):
    family = families()[name]
    iface = family.interface
    sections = _sections(CONTRACT.read_text(encoding="utf-8"))
    body = _family_section(sections, name)
    assert body is not None, (f"docs/contract.md has no section whose heading names `{name}`: "
                              f"add one (signature, shapes, dtypes, what it returns)")
    own = iface.methods or tuple(a for a in (*iface.positional, *iface.keywords)
                                 if a not in ATTENTION_KEYWORDS)
    missing = [a for a in own if not _named(body, a)]
    assert not missing, (f"docs/contract.md's section on `{name}` does not name "
                         f"{', '.join(missing)} (its Interface: {iface.signature(name)})")


def test_shared_keywords_are_described_once():
    sections = _sections(CONTRACT.read_text(encoding="utf-8"))
    details = next(body for head, body in sections.items() if "Contract details" in head)
    for word in ATTENTION_KEYWORDS:
        assert _named(details, word), f"'Contract details' in docs/contract.md does not describe `{word}`"


def test_the_tolerance_section_states_the_policy_in_force():
    from attnsuite import tolerance

    body = next(b for h, b in _sections(CONTRACT.read_text(encoding="utf-8")).items()
                if h.startswith("## Tolerance policy"))
    assert tolerance.POLICY in body
    assert f"{tolerance.FACTOR:g} * max(b, score_err) + floor" in body
    for exponent in (11, 8):
        assert f"2^-{exponent}" in body


def test_the_helper_finds_a_missing_argument():
    body = "## 1. Dense (`x`)\n- `x(q, k, *, causal)`\n"
    section = _family_section(_sections(body), "x")
    assert _named(section, "causal") and _named(section, "q")
    assert not _named(section, "v") and not _named(section, "cau")


def test_every_family_has_a_row_in_the_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Families", 1)[1].split("\n## ", 1)[0]
    rows = {m for m in re.findall(r"^\| `([a-z0-9_]+)` \|", table, re.M)}
    missing = [name for name in families() if name not in rows]
    assert not missing, f"README.md's Families table has no row for {missing}"
