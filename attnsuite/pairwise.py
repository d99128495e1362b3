"""Pairwise (strength-2 covering) combinations of a family's case dimensions.

``pairwise(factors)`` returns rows in which every pair of levels of every two factors appears at
least once, in far fewer rows than the full product (about the product of the two largest
factors' sizes). The construction is greedy and has no randomness: the same factors give the same
rows in the same order, so the case ids built from them are stable. A row starts from the first
pair (in factor order, then level order) not yet covered; each other factor takes the level that
covers the most uncovered pairs with the levels already chosen, the earliest level on a tie (so a
catalog lists each factor's cheapest level first: a row's free choices take it). Where that leads
to a partial row ``allowed`` refuses whatever comes next, the next best level is tried. Last, a
row whose every pair other rows also hold is dropped, the latest rows first (the greedy's last
rows cover the fewest new pairs): each row costs a case.
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
    known: dict = {}

    def legal(row: dict) -> bool:
        key = tuple(sorted(row.items()))
        if key not in known:
            known[key] = bool(ok({names[k]: levels[k][v] for k, v in key}))
        return known[key]

    def pairs_of(row: dict) -> set:
        return {(p, row[p], q, row[q]) for p, q in combinations(sorted(row), 2)}

    uncovered = {(i, a, j, b) for i, j in combinations(range(len(names)), 2)
                 for a in range(len(levels[i])) for b in range(len(levels[j])) if legal({i: a, j: b})}

    def complete(row: dict, rest: list[int]) -> dict | None:
        """``row`` with the factors ``rest`` filled, each with the level of most new pairs first."""
        if not rest:
            return row
        k, later = rest[0], rest[1:]
        gain = {level: sum(((min(k, m), level if k < m else v, max(k, m), v if k < m else level) in uncovered)
                           for m, v in row.items()) for level in range(len(levels[k]))}
        for level in sorted(gain, key=lambda lv: (-gain[lv], lv)):
            trial = {**row, k: level}
            if legal(trial):
                done = complete(trial, later)
                if done is not None:
                    return done
        return None

    rows = []
    while uncovered:
        i, a, j, b = min(uncovered)
        row = complete({i: a, j: b}, [k for k in range(len(names)) if k not in (i, j)])
        if row is None:  # no legal completion: this pair cannot be covered
            uncovered.discard((i, a, j, b))
            continue
        uncovered -= pairs_of(row)
        rows.append(row)
    for row in reversed(list(rows)):
        others = [r for r in rows if r is not row]
        if pairs_of(row) <= set().union(*map(pairs_of, others)):
            rows = others
    return [{names[k]: levels[k][v] for k, v in sorted(row.items())} for row in rows]


def covered_pairs(rows: Sequence[Mapping]) -> set:
    """Every (factor, level, factor, level) pair the rows hold (levels compared by repr)."""
    found = set()
    for row in rows:
        for (n1, v1), (n2, v2) in combinations(row.items(), 2):
            found.add((n1, repr(v1), n2, repr(v2)))
    return found
