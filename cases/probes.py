"""Porting probes (porting_notes.md): each minimal kernel that reproduces a known failure,
and its rewrite, as ordinary cases. A probe whose original starts passing turns its strict
xfail into XPASS: the failure was fixed upstream and the ledger entry can go."""
from __future__ import annotations

import torch

from attnsuite.case import make_cases
from attnsuite.family import Family
from kernels.probes import interp_bf16_dot

from ._attention import randn

PROBES = {
    ("interp_bf16_dot", "original"): interp_bf16_dot.dot_original,
    ("interp_bf16_dot", "rewrite"): interp_bf16_dot.dot_rewrite,
}


def label(p) -> str:
    return f"{p['probe']}-{p['variant']}-{p['dtype']}"


CASES = [dict(probe="interp_bf16_dot", variant=v, dtype=dt, M=16, N=16, K=32)
         for v in ("original", "rewrite") for dt in ("bf16", "fp16")]


def _run_probe(case, a, b, out=None):
    return PROBES[(case["probe"], case["variant"])](a, b, out=out)


class Probes(Family):
    name = "probes"
    cases = make_cases(name, label, CASES)
    impls = {"triton": _run_probe}

    def make_inputs(self, case, gen):
        return {"a": randn(gen, (case["M"], case["K"]), case.dtype),
                "b": randn(gen, (case["K"], case["N"]), case.dtype)}

    def output_specs(self, case, inputs):
        return {"c": ((case["M"], case["N"]), torch.float32)}

    def call(self, impl, case, inputs, outputs):
        return {"c": impl(case, inputs["a"], inputs["b"], out=outputs["c"])}

    def reference(self, case, inputs, compute_dtype):
        return {"c": inputs["a"].to(compute_dtype) @ inputs["b"].to(compute_dtype)}


FAMILY = Probes()
