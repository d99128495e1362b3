"""attnsuite/pairwise.py: every pair of levels of every two factors in some row, far fewer rows than
the product, the same rows every time, and no row a constraint refuses."""
from itertools import combinations, product

from attnsuite.pairwise import covered_pairs, pairwise

FACTORS = {"scale": [None, "hot", "neg", "zero"], "S": [1, 65, 600], "view": ["contig", "kvslice", "fused", "rowpad"],
           "vals": ["randn", "late", "large", "pm80"], "heads": [(4, 2), (6, 2), (8, 1)], "lse": [True, False]}


def _all_pairs(factors, allowed=lambda row: True):
    return {(n1, repr(v1), n2, repr(v2)) for (n1, l1), (n2, l2) in combinations(factors.items(), 2)
            for v1, v2 in product(l1, l2) if allowed({n1: v1, n2: v2})}


def test_every_pair_is_covered_in_few_rows_and_the_same_rows_each_time():
    rows = pairwise(FACTORS)
    assert covered_pairs(rows) == _all_pairs(FACTORS)
    assert 16 <= len(rows) <= 24  # the full product has 1152
    assert rows == pairwise(FACTORS)
    assert all(list(r) == list(FACTORS) for r in rows)


def test_a_constraint_is_never_broken_and_the_legal_pairs_are_still_covered():
    def allowed(row):  # no view of a single-key cache, no zero scale with an extreme range
        return not (row.get("S") == 1 and row.get("view") == "kvslice") and \
            not (row.get("scale") == "zero" and row.get("vals") == "pm80")
    rows = pairwise(FACTORS, allowed)
    assert all(allowed(r) for r in rows)
    assert covered_pairs(rows) == _all_pairs(FACTORS, allowed)


def test_every_pair_some_legal_row_holds_is_covered_and_no_row_is_redundant():
    """A constraint over three factors (a shared page table needs sequences that fill a page)
    leads a level-by-level greedy into dead ends; the pairs it would drop there are still covered,
    and every row holds a pair no other row does."""
    factors = {"scale": [None, "neg", "zero"], "P": [16, 12, 48], "placement": ["shuffled", "shared"],
               "lengths": [(1, 9), (40, 17), (513,)], "heads": [(6, 2), (5, 1)]}

    def allowed(row):
        if row.get("placement") != "shared" or "lengths" not in row:
            return True
        filled = [n for n in row["lengths"] if n]
        return len(filled) > 1 and min(filled) >= row.get("P", 12)

    rows = pairwise(factors, allowed)
    assert all(allowed(r) for r in rows)
    full = [dict(zip(factors, values)) for values in product(*factors.values())]
    assert covered_pairs(rows) == covered_pairs([r for r in full if allowed(r)])
    for i, row in enumerate(rows):
        assert not covered_pairs([row]) <= covered_pairs(rows[:i] + rows[i + 1:]), row
