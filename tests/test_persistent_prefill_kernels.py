"""The persistent grid (kernels/_grid.py) of the varlen prefill and block-sparse kernels: the npu
plan launches at most one program per AI core, every other plan keeps the plain grid, and the
loop over tiles (run in the interpreter with ``persistent_programs=3``) writes exactly what the
plain grid writes, on work counts that 3 does and does not divide."""
from __future__ import annotations

import pytest
import torch

import kernels._checks as checks
import kernels._grid as grid
import kernels.settings as ks
from kernels import block_sparse as bs
from kernels import prefill_varlen as pv

interpreted = pytest.mark.skipif(not checks.is_interpret(), reason="needs TRITON_INTERPRET=1 (the cpu device)")


def _qkv(*shape_q, hkv, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g).to(dtype)
    kv_shape = list(shape_q)
    kv_shape[-3 if len(shape_q) == 4 else -2] = hkv
    k = torch.randn(*kv_shape, generator=g).to(dtype)
    v = torch.randn(*kv_shape, generator=g).to(dtype)
    return q, k, v


def _sabi(B, H, S, block_shape, seed=0):
    """Each block-row lists a random non-empty ascending subset of the KV blocks, right-padded."""
    g = torch.Generator().manual_seed(seed)
    n_rows, n_cols = -(-S // block_shape[0]), -(-S // block_shape[1])
    sabi = torch.full((B, H, n_rows, n_cols), bs.PAD, dtype=torch.int32)
    for idx in range(B * H * n_rows):
        keep = (torch.rand(n_cols, generator=g) < 0.6).nonzero().flatten()
        if keep.numel() == 0:
            keep = torch.tensor([idx % n_cols])
        sabi.view(-1, n_cols)[idx, :keep.numel()] = keep.to(torch.int32)
    return sabi


# (call, rows, B*H): one call per kernel layout, on host tensors
def _calls():
    q4, k4, v4 = _qkv(2, 8, 1000, 64, hkv=2)
    lengths = torch.tensor([1000, 333], dtype=torch.int32)
    q3, k3, v3 = _qkv(700, 8, 128, hkv=8)
    cu = torch.tensor([0, 100, 650, 700], dtype=torch.int32)
    qb, kb, vb = _qkv(1, 6, 2000, 128, hkv=6)
    sabi = _sabi(1, 6, 2000, (128, 256))
    return {
        "padded-causal": (lambda: pv.prefill_padded(q4, k4, v4, lengths, causal=True), 1000, 16),
        "packed": (lambda: pv.prefill_packed(q3, k3, v3, cu, causal=False, max_seqlen=550,
                                             return_lse=True), 550, 24),
        "block_sparse": (lambda: bs.block_sparse(qb, kb, vb, sabi, block_shape=(128, 256),
                                                 return_lse=True), 2000, 6),
    }


def _plan(call, monkeypatch, ascend: bool, **settings):
    if ascend:
        monkeypatch.setattr(grid, "on_ascend", lambda t: True)
        monkeypatch.setattr(pv, "on_ascend", lambda t: True)  # the npu tiles
        monkeypatch.setattr(bs, "on_ascend", lambda t: True)
    with ks.using(host_compile=True, **settings), checks.capture_launches() as plans:
        call()
    (plan,) = plans
    return plan


@pytest.mark.parametrize("name", ["padded-causal", "packed", "block_sparse"])
def test_npu_plan_is_persistent_with_at_most_one_program_per_ai_core(name, monkeypatch):
    call, rows, n_bh = _calls()[name]
    plan = _plan(call, monkeypatch, ascend=True)
    n_work = -(-rows // plan.meta["BLOCK_M"]) * n_bh
    assert plan.meta["PERSISTENT"] is True
    assert plan.grid == (min(n_work, grid.NPU_AI_CORES),)
    assert tuple(plan.args[-3:]) == (n_bh, n_work, plan.grid[0])
    assert n_work > grid.NPU_AI_CORES  # the loop takes turns


@pytest.mark.parametrize("name", ["padded-causal", "packed", "block_sparse"])
@pytest.mark.parametrize("how", ["default", "forced-plain-on-ascend"])
def test_other_plans_keep_the_plain_grid(name, how, monkeypatch):
    call, rows, n_bh = _calls()[name]
    if how == "default":  # host tensors without triton-ascend: planned as for a GPU
        with ks.using(host_compile=True):
            if checks.on_ascend(torch.empty(0)):
                pytest.skip("triton-ascend installed: host tensors are planned for Ascend")
        plan = _plan(call, monkeypatch, ascend=False)
    else:
        plan = _plan(call, monkeypatch, ascend=True, persistent_programs=0)
    n_m = -(-rows // plan.meta["BLOCK_M"])
    assert plan.meta["PERSISTENT"] is False
    assert plan.grid == (n_m, n_bh)
    assert tuple(plan.args[-3:]) == (n_bh, n_m * n_bh, n_m * n_bh)


def _run_both(call, plan_of):
    """call() under the plain grid and under 3 persistent programs; n_work of the latter."""
    results = []
    for n in (0, 3):
        with ks.using(persistent_programs=n):
            results.append(call())
            n_work, n_programs = plan_of()[-2:]
    assert n_programs == 3
    for a, b in zip(*results):
        if a is not None:
            assert torch.equal(a, b)
    return n_work


@interpreted
def test_persistent_loop_matches_the_plain_grid_varlen():
    """Padded causal (heaviest blocks first in the loop) and packed, with n_work = 2 * 4 * 2 = 16
    and 3 * 2 * 2 = 12 on the interpreter's 128-row tiles."""
    q, k, v = _qkv(2, 4, 200, 32, hkv=2, seed=1)
    lengths = torch.tensor([200, 77], dtype=torch.int32)
    scale = 32 ** -0.5

    def padded_plan():
        return pv.prefill_padded_plan(q, k, v, lengths, torch.empty_like(q), None, causal=True,
                                      scale=scale).args

    n_work = _run_both(lambda: pv.prefill_padded(q, k, v, lengths, causal=True, return_lse=True),
                       padded_plan)
    assert n_work % 3 != 0

    q3, k3, v3 = _qkv(300, 2, 32, hkv=1, seed=2)
    cu = torch.tensor([0, 9, 200, 300], dtype=torch.int32)
    for causal in (True, False):
        def packed_plan():
            return pv.prefill_packed_plan(q3, k3, v3, cu, torch.empty_like(q3), None, causal=causal,
                                          scale=scale, max_seqlen=191).args

        n_work = _run_both(lambda: pv.prefill_packed(q3, k3, v3, cu, causal=causal, return_lse=True),
                           packed_plan)
        assert n_work % 3 == 0


@interpreted
def test_persistent_loop_matches_the_plain_grid_block_sparse():
    """n_work = ceil(300 / 128) * 1 * 2 = 6 and ceil(200 / 128) * 2 * 2 = 8 on the interpreter's
    128-row tiles."""
    for B, H, S, shape, divisible in ((1, 2, 300, (128, 128), True), (2, 2, 200, (128, 256), False)):
        q, k, v = _qkv(B, H, S, 32, hkv=H, seed=S + H)
        sabi = _sabi(B, H, S, shape, seed=B + H)

        def plan_args():
            return bs.block_sparse_plan(q, k, v, sabi, torch.empty_like(q), None, block_shape=shape,
                                        scale=32 ** -0.5).args

        n_work = _run_both(lambda: bs.block_sparse(q, k, v, sabi, block_shape=shape, return_lse=True),
                           plan_args)
        assert (n_work % 3 == 0) == divisible
