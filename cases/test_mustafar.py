"""Mustafar conformance (compress round trip, keys, values, decode): cases in cases/mustafar.py;
approximation figures go to the report's quality section, never to pass/fail."""
from cases.mustafar import FAMILY


def test_mustafar(case, conformance):
    conformance.check(FAMILY, case)
