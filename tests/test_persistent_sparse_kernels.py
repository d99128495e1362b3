"""Persistent grids of the sparse decode kernels (``_sparse_decode_fwd``, and ``_sparse_paged_fwd``
under sparse_paged_decode and magicpig_decode): the npu-path plan loops over at most one program
per vector core with the list splits aimed at those cores, the plain plan is the one before, and
the persistent loop gives the plain grid's results in the interpreter."""
from __future__ import annotations

import pytest
import torch

import kernels._checks
import kernels._grid
import kernels.settings as ks
from kernels import sparse_decode as SD
from kernels import sparse_paged_decode as SP
from kernels.magicpig_decode import magicpig_decode


interpreted = pytest.mark.skipif(not kernels._checks.is_interpret(),
                                 reason="needs TRITON_INTERPRET=1 (the cpu device)")


def _sparse_inputs(B, Hq, Hkv, S, L_max, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hq, 1, D, generator=g, dtype=torch.float16)
    k = torch.randn(B, Hkv, S, D, generator=g, dtype=torch.float16)
    v = torch.randn(B, Hkv, S, D, generator=g, dtype=torch.float16)
    ind = torch.randint(0, S, (B, Hq, L_max), generator=g, dtype=torch.int32)
    nnz = torch.randint(0, L_max + 1, (B, Hq), generator=g, dtype=torch.int32)
    nnz[0, 0] = L_max
    return q, k, v, ind, nnz


def _paged_inputs(B, Hq, Hkv, pages_per_seq, P, L_max, D, seed=0):
    """HND cache of B * pages_per_seq shuffled pages; lists of logical positions < the sequence."""
    g = torch.Generator().manual_seed(seed)
    n_pages = B * pages_per_seq
    q = torch.randn(B, Hq, D, generator=g, dtype=torch.float16)
    kv = torch.randn(n_pages, 2, Hkv, P, D, generator=g, dtype=torch.float16)
    indptr = torch.arange(0, n_pages + 1, pages_per_seq, dtype=torch.int32)
    indices = torch.randperm(n_pages, generator=g).to(torch.int32)
    ind = torch.randint(0, pages_per_seq * P, (B, Hq, L_max), generator=g, dtype=torch.int32)
    nnz = torch.randint(0, L_max + 1, (B, Hq), generator=g, dtype=torch.int32)
    nnz[0, 0] = L_max
    lsh_k = torch.full((B, Hq), 8.0)
    lsh_l = torch.full((B, Hq), 100.0)
    return q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l


def _captured(call):
    with ks.using(host_compile=True), kernels._checks.capture_launches() as plans:
        call()
    (plan,) = plans
    return plan


def _calls(B, Hq, L_max, D):
    sd = _sparse_inputs(B, Hq, Hq // 2, 300, L_max, D)
    sp = _paged_inputs(B, Hq, Hq // 2, 4, 16, L_max, D)
    q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l = sp
    return {
        "sparse_decode": lambda: SD.sparse_decode(*sd, check_indices=False),
        "sparse_paged_decode": lambda: SP.sparse_paged_decode(q, kv, indptr, indices, ind, nnz,
                                                              check_indices=False),
        "magicpig_decode": lambda: magicpig_decode(q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l,
                                                   check_indices=False),
    }


def _rows_splits(plan):
    n_bh, n_work, n_programs = plan.args[-3:]
    return n_bh, n_work // n_bh, n_work, n_programs


@pytest.mark.parametrize("name", ["sparse_decode", "sparse_paged_decode", "magicpig_decode"])
@pytest.mark.parametrize("B, Hq, L_max, want", [(1, 8, 4096, 6), (2, 16, 1024, 3), (4, 32, 300, 1)])
def test_npu_plan_is_persistent_over_the_vector_cores(monkeypatch, name, B, Hq, L_max, want):
    monkeypatch.setattr(kernels._grid, "on_ascend", lambda t: True)
    monkeypatch.setattr(SD, "on_ascend", lambda t: True)
    monkeypatch.setattr(SP, "on_ascend", lambda t: True)
    plan = _captured(_calls(B, Hq, L_max, 128)[name])
    n_bh, splits, n_work, n_programs = _rows_splits(plan)
    cores = kernels._grid.NPU_VECTOR_CORES
    assert plan.meta["PERSISTENT"] is True and plan.grid == (n_programs,)
    assert n_programs == min(n_work, cores) and n_bh == B * Hq
    # splits for the 48 cores, not the GPU's 256-1024 programs (8 rows x 6, 32 x 3: 96 work
    # items, 2 a core; 128 rows: 1), none shorter than MIN_SPLIT_LEN (256)
    assert splits == want == kernels._grid.npu_splits(B * Hq, cores, -(-L_max // 256))
    assert (plan.then is not None) == (splits > 1)


@pytest.mark.parametrize("name", ["sparse_decode", "sparse_paged_decode", "magicpig_decode"])
def test_gpu_plan_keeps_the_plain_grid(name):
    """CPU tensors outside compile-only: not Ascend; the plain (rows, splits) grid of the GPU's
    default (sparse_decode's portable kernel: 256 programs, splits of >= 256 slots, 64 rows;
    sparse paged: 4096 programs, splits of >= 64 slots, 16 rows; MagicPIG: 4096 programs,
    splits of >= 32 slots, one key a thread over 2 warps at D = 128: 4 rows)."""
    B, Hq, L_max = 1, 8, 4096
    with ks.using(host_compile=True), kernels._checks.capture_launches() as plans:
        kernels._checks._ASCEND, saved = False, kernels._checks._ASCEND
        try:
            _calls(B, Hq, L_max, 128)[name]()
        finally:
            kernels._checks._ASCEND = saved
    plan = plans[0]
    target, least, rows = {"sparse_decode": (256, 256, 64), "sparse_paged_decode": (4096, 64, 16),
                           "magicpig_decode": (4096, 32, 4)}[name]
    splits = min(-(-target // (B * Hq)), L_max // least)
    assert plan.grid == (B * Hq, splits) and plan.meta["PERSISTENT"] is False
    assert plan.args[-3:] == (B * Hq, B * Hq * splits, B * Hq * splits)
    assert plan.meta["BLOCK_N"] == rows


@pytest.mark.parametrize("name", ["sparse_decode", "sparse_paged_decode", "magicpig_decode"])
@pytest.mark.parametrize("B, Hq, L_max, splits", [(1, 4, 520, 2), (2, 2, 300, 1)])
@interpreted
def test_persistent_loop_matches_the_plain_grid(name, B, Hq, L_max, splits):
    """n_work 8 (4 rows x 2 splits) and 4 over 3 programs: a program runs 1 or 2 tiles."""
    sd = _sparse_inputs(B, Hq, Hq // 2, 300, L_max, 64, seed=1)
    q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l = _paged_inputs(B, Hq, Hq // 2, 60, 16, L_max,
                                                                   64, seed=1)
    call = {
        "sparse_decode": lambda: SD.sparse_decode(*sd, return_lse=True, num_splits=splits),
        "sparse_paged_decode": lambda: SP.sparse_paged_decode(
            q, kv, indptr, indices, ind, nnz, return_lse=True, num_splits=splits),
        "magicpig_decode": lambda: magicpig_decode(q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l,
                                                   return_lse=True, num_splits=splits),
    }[name]
    with ks.using(persistent_programs=0):
        o_plain, lse_plain = call()
    with ks.using(persistent_programs=3):
        o_pers, lse_pers = call()
    assert torch.equal(o_plain, o_pers) and torch.equal(lse_plain, lse_pers)


@interpreted
@pytest.mark.parametrize("magicpig", [False, True])
@pytest.mark.parametrize("D", [64, 48])  # 48: a D tail (BLOCK_D 64)
def test_npu_tiles_match_the_interpreter_tiles(monkeypatch, magicpig, D):
    """The npu plan (its rows, its splits, 3 persistent programs) run in the interpreter agrees
    with the interpreter's own plan."""
    from kernels.magicpig_decode import magicpig_decode_plan

    q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l = _paged_inputs(2, 4, 2, 40, 16, 600, D, seed=2)
    nnz[1, 1] = 0
    nnz[1, 2] = 5
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:2])
    o_ref, lse_ref = (magicpig_decode(q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l,
                                      return_lse=True) if magicpig else
                      SP.sparse_paged_decode(q, kv, indptr, indices, ind, nnz, return_lse=True))
    monkeypatch.setattr(kernels._grid, "on_ascend", lambda t: True)
    monkeypatch.setattr(SP, "on_ascend", lambda t: True)
    kw = dict(layout="HND", scale=D ** -0.5, interpret=False)
    with ks.using(persistent_programs=3):
        plan = (magicpig_decode_plan(q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l, out, lse, **kw)
                if magicpig else
                SP.sparse_paged_decode_plan(q, kv, indptr, indices, ind, nnz, out, lse, **kw))
        assert plan.meta["BLOCK_N"] == (32 if magicpig else 64) and plan.meta["PERSISTENT"]
        kernels._checks.run_plan(plan)
    torch.testing.assert_close(out, o_ref, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse, lse_ref, atol=1e-4, rtol=1e-4)
