"""Porting probes: minimal reproductions of known failures beside their rewrites."""
from cases.probes import FAMILY


def test_probes(case, conformance):
    conformance.check(FAMILY, case)
