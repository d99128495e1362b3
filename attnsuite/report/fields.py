"""Reading record fields defensively.

Records come from several producers and schema versions, and a report must render whatever it
is given: any field may be missing, null or of an unexpected type. Every module of the report
reads records through these helpers instead of indexing them directly.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

#: What a cell shows where there is no value.
MISSING = "—"


def text(value: Any) -> str:
    """A field as display text; None becomes the empty string."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def num(value: Any) -> float | None:
    """A field as a float, or None when it is missing or not a number ("inf"/"nan" strings count)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def listing(value: Any) -> list:
    return value if isinstance(value, list) else []


def slug(value: str) -> str:
    """A fragment identifier made of safe characters only."""
    return re.sub(r"[^A-Za-z0-9_-]+", "-", value).strip("-") or "x"


def unique_anchors(names: Iterable[str], prefix: str) -> dict[str, str]:
    """A distinct fragment identifier per name, even where two names slug alike
    ("paged decode" and "paged-decode")."""
    anchors: dict[str, str] = {}
    used: set[str] = set()
    for name in sorted(set(names)):
        base = anchor = prefix + slug(name)
        n = 2
        while anchor in used:
            anchor, n = f"{base}-{n}", n + 1
        used.add(anchor)
        anchors[name] = anchor
    return anchors
