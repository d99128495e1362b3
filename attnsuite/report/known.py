"""The known failures the shown cases hit: one entry per ledger id with its reason, versions and
outcome counts, and the text of its section in ``porting_notes.md`` put into the page. A link
from the page to the notes' markdown file would open raw text, where the anchor does nothing;
the page carries the section itself instead, so a case's known-failure badge links within it."""
from __future__ import annotations

import functools
import re
from collections import Counter
from pathlib import Path

from attnsuite.report.fields import mapping, text
from attnsuite.report.rows import OUTCOMES, known_anchor, outcome, outcome_class

#: Where the notes live: the repository root, beside the package.
NOTES = Path(__file__).resolve().parents[2] / "porting_notes.md"


@functools.lru_cache(maxsize=4)
def _sections(path: Path) -> dict[str, str]:
    """Second-level heading -> its text up to the next heading of that level ('' if no file)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    out: dict[str, str] = {}
    heading = None
    for line in lines:
        m = re.match(r"## (\S.*)$", line)
        if m:
            heading = m.group(1).strip()
            out[heading] = ""
        elif heading is not None:
            out[heading] += line + "\n"
    return {k: v.strip() for k, v in out.items()}


def note_text(note: str, path: Path = NOTES) -> str:
    """The section of porting_notes.md whose heading is ``note`` ('' when there is none)."""
    return _sections(path).get(note, "") if note else ""


def known_failures(records: list[dict], notes: Path = NOTES) -> list[dict]:
    """One entry per known-failure id among ``records``, in id order."""
    by_id: dict[str, list[dict]] = {}
    described: dict[str, dict] = {}
    for r in records:
        kf = mapping(r.get("known_failure"))
        if not kf:
            continue
        entry_id = text(kf.get("id")) or "known"
        by_id.setdefault(entry_id, []).append(r)
        described.setdefault(entry_id, kf)
    out = []
    for entry_id in sorted(by_id):
        kf = described[entry_id]
        counts = Counter(outcome(r) for r in by_id[entry_id])
        note = text(kf.get("note"))
        out.append({
            "id": entry_id,
            "anchor": known_anchor(entry_id),
            "reason": text(kf.get("reason")),
            "versions": text(kf.get("versions")),
            "reference": text(kf.get("reference")),
            "probe": text(kf.get("probe")),
            "note": note,
            "note_text": note_text(note, notes),
            "counts": [{"outcome": o, "count": counts[o], "class": outcome_class(o)}
                       for o in list(OUTCOMES) + sorted(set(counts) - set(OUTCOMES)) if counts[o]],
        })
    return out
