"""Dense prefill conformance: cases in cases/prefill.py, reference in references/attention.py."""
from cases.prefill import FAMILY


def test_prefill(case, conformance):
    conformance.check(FAMILY, case)
