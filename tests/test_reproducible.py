"""A case's inputs are a function of its id alone, and a kernel's result a function of its inputs
(README, "Data flows one way"): the same numbers alone and inside a larger run, bit for bit,
whatever else ran before in the process and however many threads torch uses (the plugin gives
each xdist worker its share of the cores, so a case alone runs with more threads than inside a
run: the fuzz find magicpig_decode[fuzz31337.191-...] drew other inputs alone than in its run)."""
from __future__ import annotations

import json
import math
import os

import pytest
import torch

from attnsuite import registry
from attnsuite.case import select
from tests.conftest import ROOT
from tests.processes import run_python

#: Cases whose inputs involve indexed writes with repeated indices (duplicated tokens with keys
#: aligned to their query), long lists that split, pages and views; and cases run before them.
TARGETS = [
    "magicpig_decode[fp16-NHD-P256-shuffled-L846_860_0-Hq2-Hkv2-D64-keep0.5-sorted-dup-lse-view_rowpad"
    "-vals_large-K10-L150-cos_pm1]",
    "magicpig_decode[fp16-NHD-P256-shuffled-L1100_40-Hq2-Hkv2-D64-keep1-shuffled-dup-lse-vals_large-K10-L150"
    "-cos_pm1]",
]
BEFORE = [
    "magicpig_decode[fp16-HND-P16-shuffled-L90_200-Hq4-Hkv4-D64-keep0.3-shuffled-lse-K10-L150-cos_pm1]",
    "sparse_paged_decode[fp16-HND-P16-shuffled-L90_200-Hq8-Hkv2-D64-keep0.2-shuffled-dup-lse]",
]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (NaN included): the raw bytes."""
    a, b = a.contiguous(), b.contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def test_catalog_ids_exist():
    ids = {c.id for name in registry.names() for c in registry.family(name).cases}
    assert set(TARGETS + BEFORE) <= ids


@pytest.mark.parametrize("name", [n for n in registry.names() if n != "probes"])
def test_inputs_do_not_depend_on_the_number_of_threads(name):
    """Every quick case's inputs, drawn with 1 and with 16 torch threads, are the same bytes."""
    family = registry.family(name)
    saved = torch.get_num_threads()
    try:
        for case in select(family.cases, "quick"):
            torch.set_num_threads(1)
            one = family.make_inputs(case, case.generator())
            torch.set_num_threads(16)
            many = family.make_inputs(case, case.generator())
            assert one.keys() == many.keys(), case.id
            for k in one:
                assert _same(one[k], many[k]), f"{case.id}: input {k} depends on the thread count"
    finally:
        torch.set_num_threads(saved)


def _digest(case_id: str, *before: str, threads: int) -> dict:
    argv = ["-m", "tests.case_digest", case_id, "--threads", str(threads)]
    for other in before:
        argv += ["--before", other]
    proc = run_python(argv, cwd=ROOT, env=dict(os.environ), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case_id", TARGETS)
def test_a_case_alone_and_after_others_computes_the_same_bits(case_id):
    alone = _digest(case_id, threads=16)
    in_run = _digest(case_id, *BEFORE, case_id, threads=1)
    assert alone["inputs"] == in_run["inputs"]
    assert alone["outputs"] == in_run["outputs"]


def test_a_case_alone_and_inside_a_run_records_the_same_numbers(run_suite):
    """Through the suite itself: the target inside an xdist run of several cases, then alone
    (its repro command), record the same errors, bit for bit."""
    # --profile full: the second target is a full-profile case (its list splits in the interpreter).
    # One worker: every target runs after others in the same process.
    run = run_suite("--device", "cpu", "--profile", "full", "-n", "1",
                    *[f"cases/{c.split('[')[0]}.py::{c}" for c in BEFORE + TARGETS])
    assert run.returncode == 0, run.output[-3000:]
    inside = run.by_case()
    for case_id in TARGETS:
        alone = run_suite("--device", "cpu", "--profile", "full",
                          f"cases/{case_id.split('[')[0]}.py::{case_id}").by_case()[case_id]
        for out, m in inside[case_id]["metrics"].items():
            for key in ("max_abs_err", "baseline_err", "score_err"):
                a, b = m[key], alone["metrics"][out][key]
                assert a == b or (math.isnan(a) and math.isnan(b)), (case_id, out, key, a, b)
