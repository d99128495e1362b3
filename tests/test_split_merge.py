"""The in-kernel split merge (``_split.merge_in_last_program``) of the CUDA fast paths, run in the
interpreter with ``--kernel-path fast`` semantics: every family that uses it, split counts that
take the one-tile merge and the chunked one, empty rows and splits, garbage past nnz, LSE on;
and ``merge_meta``'s sizing rule. The quick conformance cases rarely split under the
interpreter (its tiles are large), so these force the split counts."""
import os

from kernels._split import MERGE_ELEMS_PER_WARP, merge_meta
from tests.processes import run_python

SCRIPT = r"""
import torch
from attnsuite import interpreted
interpreted.as_in_a_run()
from kernels.decode import decode
from kernels.sparse_decode import sparse_decode
from kernels.sparse_paged_decode import sparse_paged_decode
from kernels._split import merge_meta
from references.attention import decode_reference
from references.sparse import sparse_decode_reference
from references.paged import sparse_paged_decode_reference

g = torch.Generator().manual_seed(0)
def close(name, got, ref, tol):
    e = (got.double() - ref.double()).nan_to_num(posinf=1e9, neginf=-1e9).abs().max().item()
    assert e < tol, (name, e)
    assert torch.equal(torch.isinf(got), torch.isinf(ref)), name  # -inf LSE of empty rows

# dense decode: D=256, G=4 -> 10 splits take the chunked merge; 3 splits the one-tile merge
q = torch.randn(1, 8, 1, 256, generator=g).half()
k = torch.randn(1, 2, 1200, 256, generator=g).half(); v = torch.randn(1, 2, 1200, 256, generator=g).half()
ro, rl = decode_reference(q, k, v)
for n in (3, 10):
    o, l = decode(q, k, v, return_lse=True, num_splits=n)
    close(f"decode splits={n} o", o, ro, 2e-3); close(f"decode splits={n} lse", l, rl, 1e-4)
assert merge_meta(10, 4, 256, 4)["BLOCK_SPLITS"] > merge_meta(10, 4, 256, 4)["SPLIT_CHUNK"]

# sparse decode: an empty row, a row whose entries past nnz are out of range, rows shorter
# than some splits (empty splits merge as -inf)
B, Hq, Hkv, S, D = 2, 4, 2, 300, 64
q = torch.randn(B, Hq, 1, D, generator=g).half()
k = torch.randn(B, Hkv, S, D, generator=g).half(); v = torch.randn(B, Hkv, S, D, generator=g).half()
L = 400
ind = torch.randint(0, S, (B, Hq, L), generator=g, dtype=torch.int32)
nnz = torch.tensor([[400, 0, 333, 5], [1, 269, 164, 132]], dtype=torch.int32)
ind[0, 2, 333:] = 10**6
ro, rl = sparse_decode_reference(q, k, v, ind, nnz)
for n in (2, 3):
    o, l = sparse_decode(q, k, v, ind, nnz, return_lse=True, num_splits=n)
    close(f"sparse splits={n} o", o, ro, 2e-3); close(f"sparse splits={n} lse", l, rl, 1e-4)

# sparse paged: a sequence without pages, pages of 16, lists split in 3
P, lengths = 16, (300, 0, 170)
pages = [-(-n // P) for n in lengths]
indptr = torch.tensor([0, pages[0], pages[0] + pages[1], sum(pages)], dtype=torch.int32)
indices = torch.randperm(sum(pages) + 3, generator=g)[:sum(pages)].to(torch.int32)
last = torch.tensor([n - (p - 1) * P if p else 0 for n, p in zip(lengths, pages)], dtype=torch.int32)
cache = torch.randn(sum(pages) + 3, 2, Hkv, P, D, generator=g).half()
qp = torch.randn(3, Hq, D, generator=g).half()
ind = torch.full((3, Hq, L), -1, dtype=torch.int32)
nnz = torch.zeros(3, Hq, dtype=torch.int32)
for b, n in enumerate(lengths):
    if n:
        for h in range(Hq):
            c = (n * (h + 1)) // Hq
            ind[b, h, :c] = torch.randint(0, n, (c,), generator=g, dtype=torch.int32)
            nnz[b, h] = c
ro, rl = sparse_paged_decode_reference(qp, cache, indptr, indices, ind, nnz, layout="HND")
for n in (2, 3):
    o, l = sparse_paged_decode(qp, cache, indptr, indices, ind, nnz, kv_last_page_len=last,
                               return_lse=True, num_splits=n)
    close(f"sparse paged splits={n} o", o, ro, 2e-3); close(f"sparse paged splits={n} lse", l, rl, 1e-4)
print("ok")
"""


def test_in_kernel_merge_matches_the_references_for_every_family_in_the_interpreter():
    from tests.conftest import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "ATTNSUITE_KERNEL_PATH": "fast"}
    proc = run_python(["-c", SCRIPT], cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_merge_meta_reads_every_split_as_one_tile_when_it_fits_the_registers():
    for splits, G, block_d, warps in [(1, 1, 64, 4), (16, 4, 128, 4), (20, 1, 128, 4), (64, 8, 256, 4),
                                      (7, 16, 64, 8), (1000, 1, 256, 2)]:
        meta = merge_meta(splits, G, block_d, warps)
        gm, chunk, tile = meta["BLOCK_GM"], meta["SPLIT_CHUNK"], meta["BLOCK_SPLITS"]
        assert gm >= G and gm & (gm - 1) == 0
        assert chunk & (chunk - 1) == 0 and tile & (tile - 1) == 0
        one_tile = tile <= chunk
        fits = meta["BLOCK_GM"] * block_d * max(1, 1 << (splits - 1).bit_length()) \
            <= MERGE_ELEMS_PER_WARP * warps
        assert one_tile == fits, (splits, G, block_d, warps, meta)
        if one_tile:
            assert tile >= splits
        else:  # each chunk within the budget (a single split at least)
            assert chunk == 1 or chunk * gm * block_d <= MERGE_ELEMS_PER_WARP * warps
