"""The mutation catalog proves the suite's teeth: every family has at least five planted-bug
implementations (mutants/), each fits the family's interface, and the quick profile on cpu kills
every one of them (python -m attnsuite.mutate)."""
import importlib
import json
import subprocess
import sys

import pytest

from attnsuite.interfaces import check_impl
from attnsuite.mutate import FAMILIES, catalog
from tests.conftest import ROOT


@pytest.mark.parametrize("family", FAMILIES)
def test_at_least_five_documented_mutants_that_fit_the_interface(family):
    mutants = importlib.import_module(f"mutants.{family}").MUTANTS
    assert len(mutants) >= 5
    for name, impl in mutants.items():
        check_impl(family, name, impl)
    assert all(doc for fam, _, doc in catalog([family])), "every mutant says what its bug is"


def test_the_quick_profile_on_cpu_kills_every_mutant(tmp_path):
    out = tmp_path / "verdicts.json"
    proc = subprocess.run([sys.executable, "-m", "attnsuite.mutate", "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3600)
    print(proc.stdout)
    verdicts = json.loads(out.read_text())
    survivors = [(v["family"], v["mutant"]) for v in verdicts if not v["killed"]]
    assert not survivors, proc.stdout
    assert proc.returncode == 0
    assert {v["family"] for v in verdicts} == set(FAMILIES)
    # A kill is a failing conformance case, not an error in the harness.
    assert all(v["case"] and v["case"].startswith(v["family"] + "[") for v in verdicts)
