"""sparse_decode conformance: cases in cases/sparse_decode.py."""
from cases.sparse_decode import FAMILY


def test_sparse_decode(case, conformance):
    conformance.check(FAMILY, case)
