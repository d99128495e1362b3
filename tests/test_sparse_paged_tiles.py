"""Every GPU tile config of MagicPIG's kernel (``sparse_paged_candidates(..., magicpig=True)``:
per-slot softmax, gathers in flight ahead, chunked rows), and the plain kernel's tiles with the
same loop options, run in the interpreter on lists that end inside a tile, split, and are empty,
against the float64 references."""
from __future__ import annotations

import pytest
import torch

import kernels._checks
import kernels.settings as ks
from kernels import sparse_paged_decode as SP
from references.magicpig import magicpig_decode_reference
from references.paged import sparse_paged_decode_reference

interpreted = pytest.mark.skipif(not kernels._checks.is_interpret(),
                                 reason="needs TRITON_INTERPRET=1 (the cpu device)")


def _inputs(D, seed=0):
    """HND cache of shuffled 16-slot pages; per-row lists of assorted lengths (0, 1, tile and
    split residues) of logical positions, K and L of the paper's kind on some rows, floats on
    others."""
    g = torch.Generator().manual_seed(seed)
    B, Hq, Hkv, P, pages, L_max = 2, 4, 2, 16, 12, 150
    q = torch.randn(B, Hq, D, generator=g, dtype=torch.float16)
    kv = torch.randn(B * pages, 2, Hkv, P, D, generator=g, dtype=torch.float16)
    indptr = torch.arange(0, B * pages + 1, pages, dtype=torch.int32)
    indices = torch.randperm(B * pages, generator=g).to(torch.int32)
    ind = torch.randint(0, pages * P, (B, Hq, L_max), generator=g, dtype=torch.int32)
    nnz = torch.tensor([[150, 0, 1, 37], [9, 150, 64, 101]], dtype=torch.int32)
    # A key parallel to its query: the tile branch near |c| = 1.
    page = indices[indptr[1] + ind[1, 1, 3] // P].long()
    kv[page, 0, 0, ind[1, 1, 3] % P] = q[1, 1] * 2
    lsh_k = torch.tensor([[10.0, 10.0, 2.0, 10.0], [1.5, 10.0, 0.6, 10.0]])
    lsh_l = torch.tensor([[150.0, 150.0, 3.0, 150.0], [5.0, 150.0, 1.2, 150.0]])
    return q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l


def _run(q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l, config, magicpig):
    out = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:2], float("nan"))
    kw = dict(K=lsh_k, L=lsh_l) if magicpig else {}
    plan = SP.sparse_kernel_plan(q, kv, indptr, indices, ind, nnz, out, lse, layout="HND",
                                 scale=q.shape[-1] ** -0.5, num_splits=3, config=dict(config), **kw)
    assert plan.meta["LOOKUP"] == (ks.current().kernel_path == "fast")
    kernels._checks.run_plan(plan)
    return out, lse


def _slot_configs(D, magicpig):
    return [c for c in SP.sparse_paged_candidates(D, torch.float16, magicpig)
            if c.get("SLOT_SOFTMAX")]


@interpreted
@pytest.mark.parametrize("magicpig, D, path", [  # 48: a D tail (BLOCK_D 64)
    (True, 256, "fast"), (True, 48, "portable"), (False, 256, "portable"), (False, 48, "fast")])
def test_slot_tiles_match_the_reference(magicpig, D, path):
    """``fast``: the CUDA path's in-kernel page lookup (``LOOKUP``) and merge in the last split
    program; ``portable``: host row ids and the merge kernel."""
    q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l = _inputs(D)
    args = (q, kv, indptr, indices, ind, nnz)
    if magicpig:
        o_ref, lse_ref = magicpig_decode_reference(*args, lsh_k, lsh_l, layout="HND",
                                                   scale=D ** -0.5, compute_dtype=torch.float64)
    else:
        o_ref, lse_ref = sparse_paged_decode_reference(*args, layout="HND", scale=D ** -0.5,
                                                       compute_dtype=torch.float64)
    configs = _slot_configs(D, magicpig)
    if magicpig:  # MagicPIG's list starts with them (its default among them)
        assert configs == SP.sparse_paged_candidates(D, torch.float16, True)[:len(configs)]
    # The loop's shapes (under the interpreter a tile is its rows, chunk width and gathers ahead;
    # warps and program counts change nothing): the first, one without the gathers ahead, and
    # for MagicPIG one of another chunk width where the list has it.
    first = configs[0]
    configs = [first, next(c for c in configs if not c["PREFETCH"])]
    if magicpig:
        configs += [c for c in _slot_configs(D, magicpig) if c["D_CHUNK"] != first["D_CHUNK"]][:1]
    for cfg in configs:
        with ks.using(kernel_path=path):
            out, lse = _run(q, kv, indptr, indices, ind, nnz, lsh_k, lsh_l, cfg, magicpig)
        torch.testing.assert_close(out.double(), o_ref.to(torch.float64), atol=2e-3, rtol=2e-3,
                                   msg=lambda m: f"{cfg}: {m}")
        torch.testing.assert_close(lse.double(), lse_ref.to(torch.float64), atol=1e-4, rtol=1e-5,
                                   msg=lambda m: f"{cfg}: {m}")
