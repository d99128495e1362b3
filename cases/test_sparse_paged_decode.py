"""sparse_paged_decode conformance: cases in cases/sparse_paged_decode.py."""
from cases.sparse_paged_decode import FAMILY


def test_sparse_paged_decode(case, conformance):
    conformance.check(FAMILY, case)
