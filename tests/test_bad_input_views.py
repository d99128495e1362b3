"""The view/stride dimension of bad input, for every family: a tensor whose innermost stride is not
1 is outside the contract (docs/contract.md, "Views") and gets a clear error naming the argument before
any launch (or, for the plain-torch compressor, which takes any strides, the same result); the
legal views of the catalogs (every other stride whatever the view has) pass validation and reach
the launch."""
import pytest
import torch

import kernels._checks
from attnsuite import registry
from attnsuite.case import select
from cases._dims import CONTIG

FAMILIES = [name for name in registry.names() if name != "probes"]
#: Inputs a case carries for its reference only (the implementation never sees them).
REFERENCE_ONLY = ("_padded", "k_dense", "v_dense")


def view_cases(name):
    """One quick view case per operation of the family (mustafar has four)."""
    family = registry.family(name)
    found = {}
    for c in select(family.cases, "quick"):
        if c.params.get("view", CONTIG) != CONTIG:
            found.setdefault(c.params.get("op"), c)
    return family, list(found.values())


def implementation_args(case, inputs) -> list[str]:
    """The inputs an implementation receives (the rest feed the reference only)."""
    op = case.params.get("op")
    if op is None:
        return [n for n in inputs if not n.endswith(REFERENCE_ONLY)]
    wanted = {"compress": ("k", "v"), "keys": ("q", "kc_"), "values": ("p", "vc_"),
              "decode": ("q", "kc_", "vc_")}[op]
    return [n for n in inputs if n in wanted or n[:3] in wanted]


def run_validation(family, case, inputs):
    """The project's implementation called the harness's way, launches captured (nothing runs)."""
    outputs = {n: torch.empty(s, dtype=d) for n, (s, d) in family.output_specs(case, inputs).items()}
    with kernels._checks.capture_launches() as plans:
        family.call(family.default_impl()[1], case, inputs, outputs)
    return plans


def inner_strided(t: torch.Tensor) -> torch.Tensor:
    """The same values with innermost stride 2 (every other element of a buffer twice as wide)."""
    wide = torch.zeros((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype)
    wide[..., ::2] = t
    return wide[..., ::2]


def argument_cases():
    out = []
    for name in FAMILIES:
        family, cases = view_cases(name)
        for index, case in enumerate(cases):
            inputs = family.make_inputs(case, case.generator())
            for arg in implementation_args(case, inputs):
                t = inputs[arg]
                if isinstance(t, torch.Tensor) and t.dim() and t.shape[-1] > 1:
                    op = f"{case['op']}-" if "op" in case.params else ""
                    out.append(pytest.param(name, index, arg, id=f"{name}-{op}{arg}"))
    return out


@pytest.mark.parametrize("name", FAMILIES)
def test_legal_views_pass_validation_and_reach_the_launch(name):
    family, cases = view_cases(name)
    for case in cases:
        plans = run_validation(family, case, family.make_inputs(case, case.generator()))
        assert plans or case.params.get("op") == "compress", case.id  # the compressor is torch


@pytest.mark.parametrize("name,index,arg", argument_cases())
def test_an_inner_stride_other_than_one_is_refused_naming_the_argument(name, index, arg):
    family, cases = view_cases(name)
    case = cases[index]
    inputs = family.make_inputs(case, case.generator())
    if case.params.get("op") == "compress":
        # The compressor is plain torch and takes any strides: it must then compress the same.
        ops, x = family.default_impl()[1], inputs[arg]
        kind = "key" if arg == "k" else "value"
        strided = ops.decompress(ops.compress(inner_strided(x), case["s"], kind=kind, bits=case["bits"]))
        assert torch.equal(strided, ops.decompress(ops.compress(x.contiguous(), case["s"], kind=kind,
                                                                bits=case["bits"])))
        return
    inputs[arg] = inner_strided(inputs[arg])
    with pytest.raises((ValueError, TypeError)) as info:
        run_validation(family, case, inputs)
    message = str(info.value)
    named = {"kc_": "kc", "vc_": "vc"}.get(arg[:3], arg)
    assert named in message or arg in message, message
    assert "stride" in message or "contiguous" in message, message
