"""Pairwise (strength-2 covering) combinations of a family's case dimensions.

``pairwise(factors)`` returns rows in which every pair of levels of every two factors appears at
least once, in far fewer rows than the full product (about the product of the two largest
factors' sizes). The construction is greedy and has no randomness: the same factors give the same
rows in the same order, so the case ids built from them are stable. A row starts from the first
pair (in factor order, then level order) not yet covered; each other factor takes the level that
covers the most uncovered pairs with the levels already chosen, the earliest level on a tie.
``allowed(row)`` (a partial row: a dict of the factors chosen so far) may refuse combinations
that are not legal input; a pair no legal row can hold is left uncovered.
"""
from __future__ import annotations

from itertools import combinations
from typing import Callable, Mapping, Sequence


def pairwise(factors: Mapping[str, Sequence], allowed: Callable[[dict], bool] | None = None) -> list[dict]:
    names = list(factors)
    levels = [list(factors[n]) for n in names]
    ok = allowed or (lambda row: True)

    def named(row: dict) -> dict:
        return {names[k]: levels[k][v] for k, v in row.items()}

    uncovered = {(i, a, j, b) for i, j in combinations(range(len(names)), 2)
                 for a in range(len(levels[i])) for b in range(len(levels[j]))
                 if ok(named({i: a, j: b}))}
    rows = []
    while uncovered:
        i, a, j, b = min(uncovered)
        row = {i: a, j: b}
        for k in range(len(names)):
            if k in row:
                continue
            best, gain = None, -1
            for level in range(len(levels[k])):
                trial = {**row, k: level}
                if not ok(named(trial)):
                    continue
                new = sum(((min(k, m), level if k < m else v, max(k, m), v if k < m else level) in uncovered)
                          for m, v in row.items())
                if new > gain:
                    best, gain = level, new
            if best is None:
                break
            row[k] = best
        if len(row) < len(names):  # no legal completion: this pair cannot be covered
            uncovered.discard((i, a, j, b))
            continue
        uncovered -= {(p, row[p], q, row[q]) for p, q in combinations(range(len(names)), 2)}
        rows.append(named(dict(sorted(row.items()))))
    return rows


def covered_pairs(rows: Sequence[Mapping]) -> set:
    """Every (factor, level, factor, level) pair the rows hold (levels compared by repr)."""
    found = set()
    for row in rows:
        for (n1, v1), (n2, v2) in combinations(row.items(), 2):
            found.add((n1, repr(v1), n2, repr(v2)))
    return found
