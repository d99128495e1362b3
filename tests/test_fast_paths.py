"""The CUDA fast paths (flat paged loop, in-kernel sparse page lookup, in-kernel split merge,
the dense core's descriptor loads and flat block-sparse loop)
run in the interpreter with ``--kernel-path fast``, so CPU CI checks them against the same
references as the portable kernels; and the switch picks the kernel it says it does."""
import pytest
import torch

import kernels.settings as ks
from kernels._checks import capture_launches

FAST_FAMILIES = ("decode", "paged_decode", "sparse_decode", "sparse_paged_decode", "magicpig_decode",
                 "prefill", "prefill_varlen", "block_sparse")


@pytest.mark.profile_run
def test_fast_paths_pass_the_quick_conformance_cases_in_the_interpreter(run_suite):
    files = [f"cases/{name}.py" for name in FAST_FAMILIES]
    # One process: no xdist worker to start (the quick run and the runs of test_records_stay_true
    # cover the suite under xdist).
    # 1200 s: about 100 s on an idle 2-core machine, but the longest run of these tests in one
    # process, and past 600 s on one shared by several suites at once.
    run = run_suite(*files, "--device", "cpu", "--kernel-path", "fast", timeout=1200)
    assert run.returncode == 0, run.output[-3000:]
    outcomes = run.outcomes()
    assert outcomes and set(outcomes.values()) <= {"pass", "xfail", "skip"}
    assert sum(v == "pass" for v in outcomes.values()) >= 170


def _kernels(monkeypatch, path, call):
    with ks.using(kernel_path=path), capture_launches() as plans:
        call()
    return [getattr(p.kernel, "fn", p.kernel).__name__ for plan in plans for p in plan.chain()]


def _paged_inputs():
    import cases.paged_decode as family

    case = next(c for c in family.FAMILY.cases if c.profile == "quick" and c["P"] == 16)
    inputs = family.FAMILY.make_inputs(case, case.generator())
    return family, case, inputs


def test_kernel_path_switch_picks_the_flat_paged_kernel_only_when_asked(monkeypatch):
    family, case, inputs = _paged_inputs()
    outputs = {n: torch.empty(s, dtype=d) for n, (s, d) in family.FAMILY.output_specs(case, inputs).items()}
    impl = family.FAMILY.impls["triton"]
    call = lambda: family.FAMILY.call(impl, case, inputs, outputs)  # noqa: E731
    assert _kernels(monkeypatch, "fast", call)[0] == "_paged_decode_flat"
    assert _kernels(monkeypatch, "portable", call)[0] == "_paged_decode_fwd"
    # auto on CPU tensors (compile-only, interpreter): the portable kernel
    assert _kernels(monkeypatch, "auto", call)[0] == "_paged_decode_fwd"


def test_fused_merge_replaces_the_merge_launch_on_the_fast_path(monkeypatch):
    from kernels.decode import decode

    q = torch.randn(1, 4, 1, 64, dtype=torch.float16)
    k = torch.randn(1, 2, 700, 64, dtype=torch.float16)
    call = lambda: decode(q, k, k, num_splits=3)  # noqa: E731
    assert _kernels(monkeypatch, "portable", call) == ["_decode_fwd", "_merge_splits"]
    assert _kernels(monkeypatch, "fast", call) == ["_decode_fwd"]


def test_unknown_kernel_path_is_refused():
    try:
        ks.configure(kernel_path="fastest")
    except ValueError as exc:
        assert "kernel_path" in str(exc) and "fastest" in str(exc)
    else:
        raise AssertionError("no error for an unknown kernel path")
    assert ks.current().kernel_path != "fastest"


def test_the_environment_is_read_once_as_the_user_s_default():
    assert ks.Settings.from_env({"ATTNSUITE_KERNEL_PATH": "fast", "ATTNSUITE_AUTOTUNE": "1"}) == ks.Settings(
        kernel_path="fast", autotune=True)
    assert ks.Settings.from_env({}) == ks.Settings()


def test_in_kernel_split_merge_matches_the_reference_in_the_interpreter():
    """decode's fused merge (the last split program merges) runs only with several splits; the
    quick cases are too short for the interpreter to split, so this forces 1, 3 and 5 splits."""
    import os
    from tests.conftest import ROOT
    from tests.processes import run_python

    script = (
        "import torch\n"
        "from kernels.decode import decode\n"
        "from references.attention import decode_reference\n"
        "g = torch.Generator().manual_seed(0)\n"
        "q = torch.randn(2, 8, 1, 64, generator=g).half()\n"
        "k = torch.randn(2, 2, 700, 64, generator=g).half(); v = torch.randn(2, 2, 700, 64, generator=g).half()\n"
        "ro, rl = decode_reference(q, k, v)\n"
        "for n in (1, 3, 5):\n"
        "    o, l = decode(q, k, v, return_lse=True, num_splits=n)\n"
        "    eo, el = (o.double() - ro).abs().max().item(), (l.double() - rl).abs().max().item()\n"
        "    assert eo < 2e-3 and el < 1e-4, (n, eo, el)\n"
        "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "ATTNSUITE_KERNEL_PATH": "fast"}
    proc = run_python(["-c", script], cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr


def test_mustafar_fast_path_launches_its_tensor_core_kernels(monkeypatch):
    """Mustafar: fast -> kernels/mustafar_fast.py (values with a long cache add the chunk merge),
    portable and auto-on-CPU -> the portable kernels Ascend runs."""
    from kernels.mustafar import mustafar_keys, mustafar_values
    from kernels.mustafar_format import compress

    k = torch.randn(1, 2, 1024, 128, dtype=torch.float16)
    q = torch.randn(1, 4, 128, dtype=torch.float16)
    p = torch.softmax(torch.randn(1, 4, 1024), -1)
    for bits in (2, 16):
        kc = compress(k, 0.7, kind="key", bits=bits)
        vc = compress(k, 0.7, kind="value", bits=bits)
        keys = lambda: mustafar_keys(q, kc)  # noqa: E731
        values = lambda: mustafar_values(p, vc)  # noqa: E731
        assert _kernels(monkeypatch, "fast", keys) == ["_keys_fast"]
        assert _kernels(monkeypatch, "fast", values) == ["_values_fast", "_merge_chunks"]
        for path in ("portable", "auto"):
            assert _kernels(monkeypatch, path, keys) == ["_mustafar_keys_fwd"]
            assert _kernels(monkeypatch, path, values)[0] == "_mustafar_values_fwd"
