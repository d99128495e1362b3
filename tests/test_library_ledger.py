"""Defects of other libraries in the known-failure ledger: keyed to the library's own version
and implementation, each with a stand-alone reproduction that needs nothing of this suite."""
from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
import torch

from attnsuite import ledger
from cases.paged_decode import FAMILY as PAGED
from cases.prefill_varlen import FAMILY as VARLEN

from .processes import run_python

ROOT = Path(__file__).resolve().parents[1]
LEDGER = {e.id: e for e in ledger.load(ROOT / "cases" / "known_failures.toml")}
LIBRARY_ENTRIES = ("flex_no_valid_choices", "flag_gems_page_stride", "torch_cpu_flash_causal_scale",
                   "sdpa_cuda_nonpositive_scale", "sdpa_cudnn_nonpositive_scale", "flag_gems_nonpositive_scale")
REPROS = sorted((ROOT / "scripts" / "library_defects").glob("*.py"))


def _case(family, case_id):
    return next(c for c in family.cases if c.id == case_id)


def test_an_entry_keyed_to_any_distribution_reads_its_installed_version():
    installed = torch.__version__.split("+")[0]
    entry = ledger.KnownFailure(id="t", devices=("cpu",), package="torch", versions=f"=={installed}",
                                families=("paged_decode",), stage="numeric", match="x", reason="r")
    other = ledger.KnownFailure(id="u", devices=("cpu",), package="torch", versions=f"!={installed}",
                                families=("paged_decode",), stage="numeric", match="x", reason="r")
    case = PAGED.cases[0]
    assert ledger.lookup([entry], case, "cpu") is entry
    assert ledger.lookup([other], case, "cpu") is None
    # An explicit version map is taken as it is (what the ledger's own tests pass).
    assert ledger.lookup([entry], case, "cpu", versions={"triton": "3.9.0"}) is None


def test_library_entries_apply_to_their_implementation_version_and_device_only():
    flag = LEDGER["flag_gems_page_stride"]
    case = _case(PAGED, flag.probe)
    versions = {"flag_gems": "5.0.2"}
    assert flag.applies(case, "cuda", versions, impl="flag_gems")
    assert not flag.applies(case, "cuda", versions, impl="triton")
    assert not flag.applies(case, "cpu", versions, impl="flag_gems")
    assert not flag.applies(case, "cuda", {"flag_gems": "5.0.3"}, impl="flag_gems")
    assert flag.strict_for("flag_gems")
    no_pages = next(c for c in PAGED.cases if all(n == 0 for n in c["lengths"]))
    assert not flag.applies(no_pages, "cuda", versions, impl="flag_gems")

    flex = LEDGER["flex_no_valid_choices"]
    case = _case(VARLEN, flex.probe)
    assert flex.applies(case, "cuda", {"torch": "2.11.0+cu130"}, impl="flex")
    assert not flex.applies(case, "cuda", {"torch": "2.13.0"}, impl="flex")
    assert not flex.applies(case, "cuda", {"torch": "2.11.0"}, impl="sdpa")
    # Which shapes fail is the compiler's choice: a flex case that compiles is a plain pass.
    assert not flex.strict_for("flex")
    assert flex.explains("launch", "launch: InductorError: LoweringException: NoValidChoicesError: No choices")
    assert not flex.explains("numeric", "o: max abs err 1 > allowed 0.1")


@pytest.mark.parametrize("entry_id", ("sdpa_cuda_nonpositive_scale", "sdpa_cudnn_nonpositive_scale",
                                      "flag_gems_nonpositive_scale"))
def test_a_scale_entry_applies_to_cases_of_that_scale_only(entry_id):
    """A case with no ``scale`` parameter runs the default scale: a scale entry does not apply
    to it (an H100 run once counted 116 such cases as stale strict entries)."""
    from cases.prefill import FAMILY as PREFILL

    entry = LEDGER[entry_id]
    impl = entry.impls[0]
    versions = {entry.package: "2.11.0" if entry.package == "torch" else "5.0.2"}
    scaled = [c for c in PREFILL.cases if c.params.get("scale") in ("neg", "zero")]
    default = [c for c in PREFILL.cases if "scale" not in c.params]
    assert scaled and default
    assert all(entry.applies(c, "cuda", versions, impl=impl) for c in scaled)
    assert not any(entry.applies(c, "cuda", versions, impl=impl) for c in default)


@pytest.mark.parametrize("entry_id", LIBRARY_ENTRIES)
def test_each_library_entry_has_a_stand_alone_reproduction(entry_id):
    note = (ROOT / "porting_notes.md").read_text()
    section = note.split(f"## {LEDGER[entry_id].note}\n", 1)[1].split("\n## ", 1)[0]
    named = [p for p in REPROS if f"scripts/library_defects/{p.name}" in section]
    assert named, f"porting_notes.md#{entry_id} names no script of scripts/library_defects/"


@pytest.mark.parametrize("script", REPROS, ids=[p.name for p in REPROS])
def test_reproductions_import_nothing_of_the_suite_and_run_or_stop_cleanly(script):
    tree = ast.parse(script.read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"attnsuite", "cases", "kernels", "references"}, imported
    needs_gpu = "needs a CUDA GPU" in script.read_text() or "Needs a CUDA GPU" in script.read_text()
    if needs_gpu and torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run its reproduction")
    done = run_python([str(script)], cwd=ROOT, env=dict(os.environ), timeout=120)
    if needs_gpu:
        assert done.returncode == 2, done.stdout + done.stderr
        assert "needs a CUDA device" in done.stdout
    else:  # a CPU reproduction runs here and says whether the defect shows with this torch
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[-1] in ("reproduced", "not reproduced"), done.stdout
