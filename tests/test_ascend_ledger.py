"""Ascend compile-only known failures behave as strict, version-keyed expectations."""
import re

import pytest

from attnsuite.compile import toolchain
from attnsuite.ledger import installed_versions, load
from tests.conftest import ROOT

LEDGER = ROOT / "cases" / "known_failures.toml"
on_320 = pytest.mark.skipif(installed_versions().get("triton-ascend") != "3.2.0",
                            reason="needs triton-ascend 3.2.0 (tox -e npu-compile)")


def test_every_compile_entry_is_keyed_to_triton_ascend():
    for entry in load(LEDGER):
        if entry.mode == "compile" and "npu" in entry.devices:
            assert entry.package == "triton-ascend", entry.id


@on_320
def test_an_entry_that_wrongly_covers_320_fails_the_run_as_stale(run_suite, tmp_path):
    text = LEDGER.read_text()
    block = re.search(r'\[\[failure\]\]\nid = "block_ptr_order"\n(?:(?!\[\[failure\]\]).)*', text, re.S).group(0)
    widened = re.sub(r'versions = "[^"]*"', 'versions = ">=3.2.0rc2"', block)
    ledger = tmp_path / "ledger.toml"
    ledger.write_text(text.replace(block, widened))
    run = run_suite("cases/probes.py", "-k", "block_ptr_order and original", "--device", "npu",
                    "--compile-only", "-o", f"attnsuite_ledger={ledger}")
    assert run.records and {r["outcome"] for r in run.records} == {"xpass"}, run.output[-2000:]
    assert all("'block_ptr_order' looks stale" in r["message"] for r in run.records)
    assert run.returncode == 1
    assert toolchain.installed() == "ascend"
