"""paged_decode conformance: cases in cases/paged_decode.py."""
from cases.paged_decode import FAMILY


def test_paged_decode(case, conformance):
    conformance.check(FAMILY, case)
