"""Dense decode conformance: cases in cases/decode.py, reference in references/attention.py."""
from cases.decode import FAMILY


def test_decode(case, conformance):
    conformance.check(FAMILY, case)
