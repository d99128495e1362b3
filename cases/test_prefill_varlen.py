"""Varlen prefill conformance (padded and packed): cases in cases/prefill_varlen.py, references in
references/varlen.py."""
from cases.prefill_varlen import FAMILY


def test_prefill_varlen(case, conformance):
    conformance.check(FAMILY, case)
