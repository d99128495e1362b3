"""A new family needs four files (kernel, reference, catalog, mutants) and one registry line,
nothing in attnsuite/: a toy family written here, in a package of its own, runs its conformance
cases and its mutation catalog through the suite's normal entry points."""
import json
import os
import textwrap
from pathlib import Path

from tests.processes import run_python

ROOT = Path(__file__).resolve().parents[1]

FILES = {
    # 1. the kernel
    "toy_kernels.py": '''
        import torch
        import triton
        import triton.language as tl


        @triton.jit
        def _scale(X, Y, n, alpha, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(X + offs, mask=offs < n)
            tl.store(Y + offs, (x.to(tl.float32) * alpha).to(Y.dtype.element_ty), mask=offs < n)


        def toy_scale(x, *, alpha, out=None):
            out = torch.empty_like(x) if out is None else out
            _scale[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), alpha, BLOCK=64)
            return out
    ''',
    # 2. the reference
    "toy_reference.py": '''
        def scale_ref(x, alpha, dtype):
            return x.to(dtype) * alpha
    ''',
    # 3. the catalog, and the one registry line
    "toycases/__init__.py": '''
        FAMILIES = ("toy",)
    ''',
    "toycases/toy.py": '''
        import torch

        from attnsuite.case import make_cases
        from attnsuite.family import Family
        from attnsuite.interfaces import Interface
        from toy_kernels import toy_scale
        from toy_reference import scale_ref


        class Toy(Family):
            name = "toy"
            interface = Interface(positional=("x",), keywords=("alpha", "out"), returns="y",
                                  arguments=("x  [N]  fp16 | fp32",))
            impls = {"triton": toy_scale}

            def label(self, p):
                return f"{p['dtype']}-N{p['N']}"

            def make_inputs(self, case, gen):
                return {"x": torch.randn(case["N"], generator=gen).to(case.dtype)}

            def output_specs(self, case, inputs):
                return {"y": (tuple(inputs["x"].shape), inputs["x"].dtype)}

            def call(self, impl, case, inputs, outputs):
                return {"y": impl(inputs["x"], alpha=1.5, out=outputs["y"])}

            def reference(self, case, inputs, compute_dtype):
                return {"y": scale_ref(inputs["x"], 1.5, compute_dtype)}


        FAMILY = Toy()
        FAMILY.cases = make_cases("toy", FAMILY.label,
                                  [{"dtype": d, "N": n} for d in ("fp16", "fp32") for n in (1, 63, 200)])
    ''',
    # 4. the mutants
    "toy_mutants.py": '''
        from toy_kernels import toy_scale
        from toycases.toy import FAMILY


        def forgets_the_tail(x, *, alpha, out=None):
            """Scales all but the last element."""
            y = toy_scale(x, alpha=alpha, out=out)
            if x.numel() > 1:
                y[-1] = x[-1]
            return y


        MUTANTS = {"forgets_the_tail": forgets_the_tail}
        CONTROLS = {"triton": toy_scale}
    ''',
}


def _write(tmp_path):
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    (tmp_path / "pytest.ini").write_text("[pytest]\nattnsuite_families = toycases\ntestpaths = toycases\n")


def _env(tmp_path):
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]), "TRITON_INTERPRET": "1"}


def test_a_toy_family_runs_its_cases_with_four_files_and_one_registry_line(tmp_path):
    _write(tmp_path)
    records = tmp_path / "records"
    proc = run_python(["-m", "pytest", "-q", "-p", "attnsuite.plugin", "--records-dir",
                       str(records), "--report-html", str(tmp_path / "index.html")],
                      cwd=tmp_path, env=_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    recs = [json.loads(line) for f in records.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(r["case_id"] for r in recs) == sorted(
        f"toy[{d}-N{n}]" for d in ("fp16", "fp32") for n in (1, 63, 200))
    assert {r["outcome"] for r in recs} == {"pass"} and (tmp_path / "index.html").exists()


def test_the_toy_mutant_is_killed_and_the_control_passes(tmp_path):
    _write(tmp_path)
    proc = run_python(["-m", "attnsuite.mutate", "--catalog", "toy_mutants", "--jobs", "1",
                       "--json", str(tmp_path / "verdicts.json")], cwd=tmp_path, env=_env(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    verdicts = {v["name"]: v for v in json.loads((tmp_path / "verdicts.json").read_text())}
    assert verdicts["forgets_the_tail"]["ok"] and verdicts["triton"]["ok"], verdicts
