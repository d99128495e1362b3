"""Choosing the implementation under test: out-of-tree callables, entry points, registered
names, several implementations side by side, and the interface check at registration."""
import importlib
import textwrap

import pytest

from attnsuite.impls import ImplError, parse_options, resolve
from attnsuite.interfaces import BadImplementation, check_impl
from attnsuite.optional_keywords import fit
from attnsuite.registry import families
from attnsuite.ledger import KnownFailure
from tests.conftest import ROOT

DECODE_CASE = "cases/decode.py::decode[fp16-B2-Hq8-Hkv2-S17-D64-lse]"

OWN_KERNEL = '''
def decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """An out-of-tree decode: here the project's kernel, called through another package."""
    from kernels.decode import decode as project_decode
    return project_decode(q, k, v, scale=scale, return_lse=return_lse, out=out, lse=lse)


def wrong(q, k):
    return q


def _torch_decode(q, k, v, scale, return_lse, out, lse, bf16_scale=None):
    import torch
    G = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(G, 1).float(), v.repeat_interleave(G, 1).float()
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    if bf16_scale is not None and q.dtype == torch.bfloat16:
        scale = bf16_scale                                  # the bug: its bf16 path only
    s = (q.float() @ kk.transpose(-1, -2)) * scale
    p = torch.softmax(s, -1)
    o = p @ vv
    out.copy_(o)
    if return_lse:
        lse.copy_(torch.logsumexp(s, -1))
    return out, lse if return_lse else None


def torch_decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Plain torch, fp32: no Triton kernel at all."""
    return _torch_decode(q, k, v, scale, return_lse, out, lse)


def torch_decode_bf16_unscaled(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Plain torch whose bf16 path forgets the softmax scale."""
    return _torch_decode(q, k, v, scale, return_lse, out, lse, bf16_scale=1.0)


def origin_decode(q, k, v, *, return_lse=False, out=None, lse=None):
    """A decode written before callers passed their own scale: always 1/sqrt(D)."""
    from kernels.decode import decode as project_decode
    return project_decode(q, k, v, return_lse=return_lse, out=out, lse=lse)


def bare_decode(q, k, v):
    """No scale, no LSE, no output buffer: returns o in a tensor of its own."""
    from kernels.decode import decode as project_decode
    o, _ = project_decode(q, k, v)
    return o
'''
BF16_CASES = "cases/decode.py::decode[bf16-B2-Hq8-Hkv2-S300-D64-lse]"


@pytest.fixture
def mypkg(tmp_path):
    """A throwaway package ``mypkg.mykernel`` and an installed-looking distribution that
    registers it as the entry point ``decode.mine``."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mykernel.py").write_text(textwrap.dedent(OWN_KERNEL))
    dist = tmp_path / "mypkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mypkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[attnsuite.impls]\ndecode.mine = mypkg.mykernel:decode\n")
    return {"PYTHONPATH": f"{ROOT}:{tmp_path}"}


def test_an_out_of_tree_callable_runs_the_decode_cases(run_suite, mypkg):
    run = run_suite("cases/decode.py", "--impl", "decode=mypkg.mykernel:decode", env=mypkg)
    assert run.returncode == 0, run.output[-3000:]
    assert run.records and {r["impl"] for r in run.records} == {"mypkg.mykernel:decode"}
    assert {r["outcome"] for r in run.records} <= {"pass", "xfail"}
    assert all("--impl decode=mypkg.mykernel:decode" in r["repro"] for r in run.records)
    # mypkg came from a directory on PYTHONPATH: the repro command names it.
    assert all(r["repro"].startswith(f"PYTHONPATH={mypkg['PYTHONPATH'].split(':')[1]} pytest ") for r in run.records)


def _console_pytest(args: list[str], cwd, env: dict):
    """``pytest ARGS`` as typed in a shell: the console script, which (unlike ``python -m
    pytest``) does not put the working directory on sys.path."""
    import os
    import sys
    from pathlib import Path

    from tests.processes import run_python

    script = Path(sys.executable).parent / "pytest"
    if not script.exists():
        pytest.skip(f"no pytest console script beside {sys.executable}")
    return run_python([str(script), *args], cwd=cwd, env={**os.environ, **env}, timeout=600)


def test_impl_as_written_imports_from_where_pytest_started_and_says_so(mypkg, tmp_path):
    """``pytest --impl decode=mypkg.mykernel:decode`` with mypkg in the working directory and
    nothing on PYTHONPATH but the checkout: it imports, the summary names it, and each record's
    repro command carries the directory the import needed."""
    records = tmp_path / "records"
    proc = _console_pytest([str(ROOT / "cases" / "decode.py"), "-k", "S17-D64", "-p", "no:cacheprovider",
                            "--impl", "decode=mypkg.mykernel:decode", "--records-dir", str(records),
                            "--report-html", "none"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"implementation decode: mypkg.mykernel:decode ({tmp_path / 'mypkg' / 'mykernel.py'})" in proc.stdout
    from attnsuite.records import read_records

    recs = read_records([records])
    assert recs and all(r["repro"].startswith(f"PYTHONPATH={tmp_path} pytest '") for r in recs)


def test_an_impl_import_that_fails_says_where_it_looked(tmp_path):
    proc = _console_pytest(["cases/decode.py", "--impl", "decode=nosuchpkg.kernel:decode", "-p", "no:cacheprovider"],
                           cwd=ROOT, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 4
    assert "cannot import module 'nosuchpkg.kernel'" in proc.stderr and str(ROOT) in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("args,families", [
    (["--impl", "decode=triton"], {"decode"}),
    (["--impl", "decode=triton", "--impl", "prefill=triton"], {"decode", "prefill"}),
    (["--impl", "decode=triton", "cases/decode.py", "cases/prefill.py"], {"decode", "prefill"}),
    (["--impl", "decode=triton", "-k", "paged_decode"], {"paged_decode"}),
    (["--impl", "all"], None),
])
def test_impl_of_one_family_collects_that_family_unless_others_are_asked_for(args, families):
    import os

    from tests.processes import run_python

    out = run_python(["-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                     env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    found = {line.split("::")[1].split("[")[0] for line in out.stdout.splitlines() if line.startswith("cases/")}
    if families is None:  # every family
        assert found == set(__import__("attnsuite.registry").registry.families()), out.stdout[-2000:]
    else:
        assert found == families, out.stdout[-2000:] + out.stderr[-2000:]


def test_an_entry_point_is_selected_by_name(run_suite, mypkg):
    run = run_suite(DECODE_CASE, "--impl", "decode=mine", env=mypkg)
    assert run.returncode == 0, run.output[-3000:]
    assert [(r["impl"], r["outcome"]) for r in run.records] == [("mine", "pass")]


#: Default-scale cases with and without an LSE, and every case with a scale of its own.
FEW_DECODE_CASES = ("-k", "S17 or S33-D128 or scale")


@pytest.mark.parametrize("kernel", ["origin_decode", "bare_decode"])
def test_a_kernel_without_scale_or_lse_keywords_runs_as_it_is(run_suite, mypkg, kernel):
    run = run_suite("cases/decode.py", *FEW_DECODE_CASES, "--impl", f"decode=mypkg.mykernel:{kernel}", env=mypkg)
    assert run.returncode == 0, run.output[-3000:]
    scaled = [r for r in run.records if r["params"].get("scale")]
    plain = [r for r in run.records if not r["params"].get("scale")]
    assert scaled and all(r["outcome"] == "skip" and r["unsupported"] == "takes no scale keyword"
                          and "takes no scale keyword" in r["message"] for r in scaled)
    # xfail: the interpreter's bf16 tl.dot (the ledger's interp_bf16_dot), as for the project's kernel.
    assert plain and {r["outcome"] for r in plain} <= {"pass", "xfail"} and "pass" in {r["outcome"] for r in plain}
    plain = [r for r in plain if r["outcome"] == "pass"]
    with_lse = [r for r in plain if r["params"]["lse"]]
    assert with_lse and any(not r["params"]["lse"] for r in plain)
    if kernel == "origin_decode":  # it returns an LSE: judged like any other
        assert all(set(r["metrics"]) == {"o", "lse"} and r["not_provided"] == [] for r in with_lse)
    else:  # o judged; the LSE recorded as not provided; o copied into the caller's buffer
        assert all(set(r["metrics"]) == {"o"} and r["not_provided"] == ["lse"] for r in with_lse)
        assert all(any("takes no out=" in n for n in r["adapter_notes"]) for r in plain)
    assert f"implementation decode: mypkg.mykernel:{kernel}" in run.output


def test_a_declared_lse_less_kernel_is_judged_on_o():
    import torch

    from attnsuite.optional_keywords import FittedCall, fit

    family = families()["decode"]

    def full(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
        out.fill_(1.0)
        return out, None

    assert fit(family, full) is full  # every keyword taken: used as it is
    full.attnsuite_lse = False
    fitted = fit(family, full)
    assert isinstance(fitted, FittedCall) and fitted.attnsuite_lse is False
    out, lse = torch.empty(2), torch.empty(3)
    assert fitted(1, 2, 3, scale=0.5, return_lse=True, out=out, lse=lse) == (out, None)

    def wrong_shape(q, k, v):
        return torch.zeros(3)

    from attnsuite.result import CaseFailure
    with pytest.raises(CaseFailure, match=r"returned \[3\] torch.float32 on cpu; expected \[2\]"):
        fit(family, wrong_shape)(1, 2, 3, scale=None, return_lse=False, out=out, lse=None)


def test_a_wrong_signature_stops_the_run_before_any_case(run_suite, mypkg):
    run = run_suite("cases/decode.py", "--impl", "decode=mypkg.mykernel:wrong", env=mypkg)
    assert run.returncode == 4 and not run.records
    assert "cannot be called as decode(q, k, v, *, scale=..., return_lse=..., out=..., lse=...)" in run.output


def test_two_implementations_side_by_side_each_case_once_per_implementation(run_suite):
    run = run_suite(DECODE_CASE.replace("[fp16-B2-Hq8-Hkv2-S17-D64-lse]", ""), "-k", "S17-D64",
                    "--impl", "decode=triton", "--impl", "decode=sdpa")
    assert run.returncode == 0, run.output[-3000:]
    by_impl = {}
    for r in run.records:
        by_impl.setdefault(r["impl"], set()).add(r["case_id"])
    assert set(by_impl) == {"triton", "sdpa"} and by_impl["triton"] == by_impl["sdpa"]
    lse_cases = [r for r in run.records if r["impl"] == "sdpa" and r["params"]["lse"]]
    assert lse_cases and all(r["outcome"] == "skip" and "no LSE" in r["message"] for r in lse_cases)
    assert "decode · sdpa" in run.report.read_text().replace("</a> <span class=\"muted\">", " ").replace("</span>", "")


@pytest.mark.parametrize("family", sorted(set(families()) - {"probes"}))
def test_every_registered_implementation_fits_its_interface(family):
    fam = families()[family]
    assert fam.interface is not None
    for name, impl in fam.impls.items():
        check_impl(fam, name, impl)
        # Every keyword taken: called as it is, never through the harness's fitting.
        assert fit(fam, impl) is impl, name


def test_interface_check_names_the_expected_call():
    with pytest.raises(BadImplementation, match=r"block_sparse\(q, k, v, sabi, \*, block_shape=..."):
        check_impl(families()["block_sparse"], "mine", lambda q, k, v: None)
    with pytest.raises(BadImplementation, match="unexpected keyword argument 'layout'"):
        check_impl(families()["paged_decode"], "mine",
                   lambda q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, scale, return_lse,
                   out, lse: None)
    # The optional keywords (scale, return_lse, out, lse) may be left out: fitted, not refused.
    check_impl(families()["paged_decode"], "mine",
               lambda q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout: None)
    with pytest.raises(BadImplementation, match="missing compress, decompress, keys, values, decode"):
        check_impl(families()["mustafar"], "mine", object())


def test_interfaces_print_shapes_dtypes_and_the_scale():
    from tests.conftest import ROOT
    from tests.processes import run_python

    out = run_python(["-m", "attnsuite.interfaces"], cwd=ROOT,
                     env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, timeout=120).stdout
    for family in families():
        assert out.count(f"\n{family}") + out.startswith(family) >= 1, family
    assert "[B, Hq, S, D]" in out and "1/sqrt(D)" in out and "kv_page_indptr [B + 1]" in out
    # docs/contract.md, "Softmax scale": every family's call takes it (Mustafar's decode; keys unscaled).
    for line in out.splitlines():
        if line.startswith(tuple(f"{f}(" for f in families() if f != "probes")):
            assert "scale=..." in line, line
    assert "decode(q, keys, values, scale=None" in out


def test_option_parsing_and_unknown_names():
    assert parse_options(["decode=triton", "decode=a.b:c", "decode=triton"]) == {"decode": ["triton", "a.b:c"]}
    with pytest.raises(ImplError, match="FAMILY=NAME"):
        parse_options(["decode"])
    fam = importlib.import_module("cases.decode").FAMILY
    with pytest.raises(ImplError, match="registered: flag_gems, flashinfer, flex, npu_fused_infer, sdpa, sdpa_cudnn, sdpa_efficient, sdpa_flash, sdpa_math, triton, vllm"):
        resolve(fam, "nope")


def test_ledger_entries_can_be_limited_to_implementations():
    entry = KnownFailure(id="x", devices=("cpu",), package="triton", versions=">=0", families=("decode",),
                         stage="numeric", match=".", reason="r", impls=("triton", "*:*"))
    case = importlib.import_module("cases.decode").FAMILY.cases[0]
    versions = {"triton": "3.9.0"}
    assert entry.applies(case, "cpu", versions, impl="triton")
    assert entry.applies(case, "cpu", versions, impl="mypkg.mykernel:decode")
    assert not entry.applies(case, "cpu", versions, impl="sdpa")


def test_the_interpreter_bf16_entry_judges_only_cases_that_ran_a_triton_kernel(run_suite, mypkg):
    """interp_bf16_dot explains a failure only where the interpreter ran a Triton kernel: our
    kernel's bf16 case stays a known failure, a torch implementation's bf16 path is judged."""
    # The three side by side in one run (each gets its own inputs and buffers): one process.
    expected = {"decode": "xfail", "torch_decode": "pass", "torch_decode_bf16_unscaled": "fail"}
    ids = [f"{BF16_CASES}@mypkg.mykernel:{name}" for name in expected]  # a case's id names its impl
    run = run_suite(*ids, *(arg for name in expected for arg in ("--impl", f"decode=mypkg.mykernel:{name}")),
                    env=mypkg)
    outcomes = {r["impl"]: r["outcome"] for r in run.records}
    assert len(run.records) == len(expected), run.output[-2000:]
    assert outcomes == {f"mypkg.mykernel:{name}": outcome for name, outcome in expected.items()}, run.output[-2000:]
    assert run.returncode == 1


def test_interpreted_launches_are_counted():
    import os
    from tests.processes import run_python

    code = ("import torch\n"
            "from attnsuite import interpreted\n"
            "from kernels.decode import decode\n"
            "q = torch.randn(1, 2, 1, 64, dtype=torch.float16); k = torch.randn(1, 1, 40, 64, dtype=torch.float16)\n"
            "with interpreted.counting() as n:\n"
            "    decode(q, k, k)\n"
            "with interpreted.counting() as m:\n"
            "    torch.softmax(q.float(), -1)\n"
            "print(n[0], m[0])\n")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    out = run_python(["-c", code], cwd=ROOT, env=env, timeout=300)
    launched, none = out.stdout.split()
    assert int(launched) >= 1 and int(none) == 0, out.stderr[-2000:]
