"""magicpig_decode conformance: cases in cases/magicpig_decode.py."""
from cases.magicpig_decode import FAMILY


def test_magicpig_decode(case, conformance):
    conformance.check(FAMILY, case)
