"""The mustafar kernels' plans that conformance on the CPU does not run: the Ascend plan (persistent
grid smaller than the work, element axis inner, values split into chunks) and the CUDA fast path,
each checked in the interpreter against a dense decode of the same buffers."""
from __future__ import annotations

import os
import textwrap

import pytest

from tests.processes import run_python

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import torch
    from attnsuite import interpreted
    interpreted.as_in_a_run()
    import kernels.settings as ks
    from kernels import mustafar as M
    from kernels.mustafar_format import compress, decompress
    path = sys.argv[1]
    if path == "ascend":
        M.on_ascend = lambda t: True
        ks.configure(persistent_programs=3)  # fewer programs than work items: the loop takes turns
    ks.configure(kernel_path="fast" if path == "fast" else "portable")
    torch.manual_seed(0)
    for bits in (2, 16):
        for B, Hq, Hkv, S, D, s in ((2, 6, 2, 192, 64, 0.7), (1, 2, 1, 128, 128, 0.0)):
            k = torch.randn(B, Hkv, S, D, dtype=torch.float16)
            v = torch.randn(B, Hkv, S, D, dtype=torch.float16)
            k[:, :, :64, :4] = 0
            kc, vc = compress(k, s, kind="key", bits=bits), compress(v, s, kind="value", bits=bits)
            q = torch.randn(B, Hq, D, dtype=torch.float16)
            p = torch.softmax(torch.randn(B, Hq, S), -1)
            G = Hq // Hkv
            ref_s = (q.double().view(B, Hkv, G, D) @ decompress(kc).double().transpose(-1, -2))
            ref_o = p.double().view(B, Hkv, G, S) @ decompress(vc).double()
            err_s = (M.mustafar_keys(q, kc).double() - ref_s.reshape(B, Hq, S)).abs().max().item()
            err_o = (M.mustafar_values(p, vc).double() - ref_o.reshape(B, Hq, D)).abs().max().item()
            assert err_s < 2e-3 and err_o < 1e-5, (path, bits, B, Hq, Hkv, S, D, err_s, err_o)
    print("ok")
""")


# The fast path's 2-bit keys kernel fixes the split of q * scale and the odd-zero branch once per
# program, over all its 64-token blocks: programs that cover several blocks (programs_per_sm 0:
# one program per KV head, the whole cache), against one block per program, on caches whose
# blocks' scales differ by 10^5, with tiles whose zero is outside [0, 3], and with q of zeros.
@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="needs the Triton interpreter")
@pytest.mark.parametrize("mode", ["scales", "odd", "zero q"])
def test_mustafar_fast_keys_programs_over_several_blocks(mode):
    import torch

    import kernels.settings as ks
    from kernels import mustafar as M
    from kernels._checks import launch
    from kernels.mustafar_format import compress, decompress

    torch.manual_seed(1)
    B, Hq, Hkv, S, D, s = (2, 6, 2, 320, 64, 0.5) if mode == "odd" else (1, 4, 1, 320, 128, 0.7)
    k = torch.randn(B, Hkv, S, D, dtype=torch.float16)
    if mode == "scales":
        k[:, :, 256:] *= 300  # the last block: the fifth of a program's bound
        k[:, :, 64:128] *= 1e-3
    if mode == "odd":
        k[:, :, 64:128, :5] = k[:, :, 64:128, :5].abs() + 4  # kept values all positive
        k[:, :, 192:256, 7] = 2.0                              # a flat tile
    kc = compress(k, s, kind="key", bits=2)
    assert (mode == "odd") == bool(((kc.zero < 0) | (kc.zero > 3)).any())
    q = torch.randn(B, Hq, D, dtype=torch.float16) * (mode != "zero q")
    G = Hq // Hkv
    ref = (q.double().view(B, Hkv, G, D) @ decompress(kc).double().transpose(-1, -2)).reshape(B, Hq, S)
    # programs_per_sm 0: one program per KV head over every block; 8: one block a program (the
    # scales case only: the bound over one block is the kernel before this one's).
    for pps in (0, 8) if mode == "scales" else (0,):
        out = torch.full((B, Hq, S), float("nan"))
        with ks.using(kernel_path="fast"):
            plan = M.mustafar_keys_fast_plan(q, kc, out, dict(programs_per_sm=pps))
            launch(plan)
        assert (plan.args[-1] >= S // 64) == (pps == 0), plan.args[-1]  # blocks per program
        err = (out.double() - ref).abs()
        # fp32 products and sums, hi + lo keeping ~22 bits: far inside fp16's 2^-11.
        assert err.max().item() <= 2.0**-20 * max(1.0, ref.abs().max().item()), (mode, pps, err.max())
        small = slice(64, 128)  # the block of 10^-3 keys, in a program with one of 300
        assert (err[..., small].max().item()
                <= 2.0**-16 * max(2.0**-10, ref[..., small].abs().max().item())), (mode, pps)


@pytest.mark.parametrize("path", ["ascend", "fast"])
def test_mustafar_plan_in_interpreter(path):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = run_python(["-c", SCRIPT, path], cwd=ROOT, env=env, timeout=900)
    assert res.returncode == 0 and res.stdout.strip().endswith("ok"), res.stderr[-3000:]


def test_ascend_values_plan_splits_work_over_cores(monkeypatch):
    """Planning for an NPU: values chunks cover S_c in multiples of the step, and at most one
    program per vector core is launched."""
    import torch

    import kernels.settings as ks
    from kernels import mustafar as M
    from kernels import _grid
    from kernels.mustafar_format import compress

    monkeypatch.setattr(M, "on_ascend", lambda t: True)
    monkeypatch.setattr(_grid, "on_ascend", lambda t: True)
    vc = compress(torch.randn(1, 8, 4096, 128, dtype=torch.float16), 0.7, kind="value", bits=2)
    p = torch.randn(1, 32, 4096, dtype=torch.float16)
    with ks.using(kernel_path="portable", host_compile=True):
        plan = M.mustafar_values_plan(p, vc, torch.empty(1, 32, 128), interpret=False)
    chunk, n_chunks, n_work, n_programs = plan.args[-4:]
    assert n_programs == min(n_work, _grid.NPU_VECTOR_CORES)
    assert chunk % plan.meta["BLOCK_S"] == 0 and chunk * n_chunks >= 4096
    assert plan.then is not None and plan.then.kernel is M._sum_chunks
