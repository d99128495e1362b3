"""Dense and paged decode, and the split merge, on a persistent grid (kernels/_grid.py): on the
npu path one program per core, each looping over its (batch x KV head x split) tiles, with the
split aimed at the core count; the CUDA plan untouched; and the loop gives the plain grid's
results bit for bit in the interpreter."""
import os

import pytest
import torch

import kernels._grid as grid
import kernels.settings as ks
from kernels import decode as dec
from kernels import paged_decode as pdec
from kernels._checks import capture_launches
from kernels._grid import npu_splits
from tests.processes import run_python


def _names(plan):
    return [getattr(p.kernel, "fn", p.kernel).__name__ for p in plan.chain()]


def _capture(call, **settings):
    with ks.using(host_compile=True, **settings), capture_launches() as plans:
        call()
    assert len(plans) == 1
    return plans[0]


def _paged_table(lens, page_size, Hkv, D, g):
    pages = [-(-n // page_size) for n in lens]
    indptr = torch.tensor([0] + torch.tensor(pages).cumsum(0).tolist(), dtype=torch.int32)
    total = int(indptr[-1])
    kv = torch.randn(total + 3, 2, Hkv, page_size, D, generator=g).half()
    indices = torch.randperm(total + 3, generator=g)[:total].int()
    last = torch.tensor([n - (p - 1) * page_size if p else 0 for n, p in zip(lens, pages)],
                        dtype=torch.int32)
    return kv, indptr, indices, last


def _decode_call(B=1, Hq=8, Hkv=2, S=32000, D=128):
    q = torch.randn(B, Hq, 1, D, dtype=torch.float16)
    k = torch.randn(B, Hkv, S, D, dtype=torch.float16)
    return lambda: dec.decode(q, k, k, return_lse=True)


def _paged_call(lens=(5000, 3000), Hq=8, Hkv=2, D=128, page_size=16):
    g = torch.Generator().manual_seed(0)
    kv, indptr, indices, last = _paged_table(lens, page_size, Hkv, D, g)
    q = torch.randn(len(lens), Hq, D, dtype=torch.float16)
    return lambda: pdec.paged_decode(q, kv, indptr, indices, last, return_lse=True)


@pytest.fixture
def ascend(monkeypatch):
    for mod in (grid, dec, pdec):
        monkeypatch.setattr(mod, "on_ascend", lambda t: True)


def test_split_count_aims_at_the_cores():
    assert npu_splits(2, 24, 1000) == 12        # 24 tiles
    assert npu_splits(16, 24, 1000) == 3        # 48 tiles: 2 rounds of a third, not 32 tiles
    assert npu_splits(24, 24, 1000) == 1         # the cores are covered: no merge added
    assert npu_splits(25, 24, 1000) == 7         # 8/7 of a row on the busiest core, not 2 rows
    assert npu_splits(1000, 24, 1000) == 1       # under 10% to gain: no merge added
    assert npu_splits(2, 24, 5) == 5            # short keys: at most one split per 512


@pytest.mark.parametrize("call, kernel, groups", [
    (_decode_call(), "_decode_fwd", 1 * 2),
    (_decode_call(B=2, Hkv=8, S=4096, D=64), "_decode_fwd", 2 * 8),
    (_paged_call(), "_paged_decode_fwd", 2 * 2),
])
def test_npu_plan_is_persistent_within_the_cores(ascend, call, kernel, groups):
    plan = _capture(call, kernel_path="portable")
    assert _names(plan) == [kernel, "_merge_splits"]
    n_bk, n_work, n_programs = plan.args[-3:]
    assert plan.meta["PERSISTENT"] and plan.grid == (n_programs,) and n_bk == groups
    assert n_programs <= grid.NPU_AI_CORES and n_work >= grid.NPU_AI_CORES
    assert n_work == n_bk * npu_splits(groups, grid.NPU_AI_CORES, 10**6)
    merge = plan.then
    m_work, m_programs = merge.args[-2:]
    assert merge.meta["PERSISTENT"] and merge.grid == (m_programs,)
    assert m_programs == min(m_work, grid.NPU_VECTOR_CORES)


def test_plain_plan_is_unchanged():
    # Host tensors off Ascend: the split aims at ~256 programs as before, on the plain 2-D grid.
    for call, kernel, plain in ((_decode_call(), "_decode_fwd", (2, 63)),
                                (_paged_call(), "_paged_decode_fwd", (4, 10))):
        plan = _capture(call, kernel_path="portable")
        assert _names(plan) == [kernel, "_merge_splits"]
        n_bk, n_work, n_programs = plan.args[-3:]
        assert not plan.meta["PERSISTENT"] and plan.grid == plain
        assert (n_bk, n_work, n_programs) == (plain[0], plain[0] * plain[1], plain[0] * plain[1])
        merge = plan.then
        assert not merge.meta["PERSISTENT"] and merge.grid == (merge.args[-2],) == (merge.args[-1],)


def test_fast_path_plans_keep_the_plain_grid():
    for call, kernel in ((_decode_call(), "_decode_fwd"), (_paged_call(), "_paged_decode_flat")):
        plan = _capture(call, kernel_path="fast")
        assert _names(plan) == [kernel] and plan.meta["FUSED_MERGE"]
        assert not plan.meta["PERSISTENT"] and plan.grid[0] == plan.args[-3]
        forced = _capture(call, kernel_path="fast", persistent_programs=3)
        assert forced.meta["PERSISTENT"] and forced.grid == (3,)


SCRIPT = r"""
import torch
from attnsuite import interpreted
interpreted.as_in_a_run()
import kernels.settings as ks
from kernels.decode import decode
from kernels.paged_decode import paged_decode
from tests.test_persistent_decode_kernels import _paged_table

g = torch.Generator().manual_seed(0)
q = torch.randn(1, 4, 1, 64, generator=g).half()
k = torch.randn(1, 2, 700, 64, generator=g).half()
v = torch.randn(1, 2, 700, 64, generator=g).half()
kv, indptr, indices, last = _paged_table([40, 100, 0], 16, 2, 64, g)
qp = torch.randn(3, 4, 64, generator=g).half()
# (kernel path, call): 2 x 2, 2 x 5, 6 x 3 and 6 x 1 tiles on 3 programs (with the plain
# grid's result first), the fast ones merging in the last split program.
calls = [("portable", lambda: decode(q, k, v, return_lse=True, num_splits=2)),
         ("fast", lambda: decode(q, k, v, return_lse=True, num_splits=5)),
         ("portable", lambda: paged_decode(qp, kv, indptr, indices, last, return_lse=True, num_splits=3)),
         ("fast", lambda: paged_decode(qp, kv, indptr, indices, last, return_lse=True, num_splits=1))]
for i, (path, fn) in enumerate(calls):
    results = []
    for n in (0, 3):
        with ks.using(kernel_path=path, persistent_programs=n):
            results.append(fn())
    (o0, l0), (o, l) = results
    assert torch.equal(o, o0) and torch.equal(l, l0), (i, path)
print("ok")
"""


def test_persistent_loop_gives_the_plain_grid_results_in_the_interpreter():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root, "TRITON_INTERPRET": "1"}
    proc = run_python(["-c", SCRIPT], cwd=root, env=env, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr
