"""block_sparse: the sparsity generator (attnsuite/sparsity.py), bad input (a clear error before
any launch), and the origin's LSE checks run directly on the kernel."""
import math

import pytest
import torch
import triton
import triton.language as tl

import kernels._checks
from attnsuite.sparsity import (PAD, block_index, blocks_for_tokens, forced_mask,
                                frame_exceeds_budget, frame_from_tokens, grid_shape, kept_per_row)
from kernels._block_index import listed_blocks
from kernels.block_sparse import block_sparse


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def listed(row):
    return [int(x) for x in row if int(x) != PAD]


# --- the generator ---

@pytest.mark.parametrize("n_cols,s", [(10, 0.0), (10, 0.5), (10, 0.9), (7, 0.3), (1, 0.0), (40, 0.95)])
def test_kept_count_per_row(n_cols, s):
    sabi = block_index(6, n_cols, s, generator=gen(), batch_heads=(2, 3))
    assert sabi.shape == (2, 3, 6, n_cols) and sabi.dtype == torch.int32
    counts = (sabi != PAD).sum(-1)
    assert (counts == round(n_cols * (1 - s))).all()


def test_rows_sorted_and_right_padded():
    sabi = block_index(9, 13, 0.6, frame=(1, 2, 1, 1), generator=gen(), batch_heads=(2, 2))
    valid = sabi != PAD
    # padding only at the right
    assert (valid[..., :-1] | ~valid[..., 1:]).all()
    for row in sabi.reshape(-1, 13):
        ids = listed(row)
        assert ids == sorted(set(ids)) and all(0 <= i < 13 for i in ids)


def test_frame_blocks_forced_on_top_of_budget():
    n_rows, n_cols, s, frame = 8, 12, 0.75, (1, 2, 1, 2)
    sabi = block_index(n_rows, n_cols, s, frame=frame, generator=gen(), batch_heads=(1, 2))
    keep = kept_per_row(n_cols, s)
    for h in range(2):
        for r in range(n_rows):
            ids = listed(sabi[0, h, r])
            if r < 1 or r >= n_rows - 2:
                assert ids == list(range(n_cols))          # top/bottom rows: every column
            else:
                assert {0, n_cols - 2, n_cols - 1} <= set(ids)
                assert len(ids) == keep + 3                 # frame on top of the budget
    assert forced_mask(n_rows, n_cols, frame).sum() == 3 * 12 + 5 * 3


def test_deterministic_from_seed():
    a = block_index(5, 9, 0.5, generator=gen(7), batch_heads=(2, 2))
    b = block_index(5, 9, 0.5, generator=gen(7), batch_heads=(2, 2))
    c = block_index(5, 9, 0.5, generator=gen(8), batch_heads=(2, 2))
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_blocks_for_tokens_and_frames():
    assert blocks_for_tokens(3600, 128) == 29 and blocks_for_tokens(256, 256) == 1
    assert blocks_for_tokens(257, 256) == 2
    assert frame_from_tokens(256, (128, 512)) == (1, 1, 2, 2)
    assert frame_from_tokens(0, (128, 512)) == (0, 0, 0, 0)
    assert grid_shape(10000, (128, 512)) == (79, 20)


def test_skip_rule():
    assert frame_exceeds_budget(5, 5, 0.5) is None
    assert frame_exceeds_budget(5, 5, 0.5, (1, 1, 1, 1)) is None       # 2 <= 2.5
    assert "fewer than 1" in frame_exceeds_budget(5, 5, 0.9)            # round(0.5) = 0
    assert "frame forces" in frame_exceeds_budget(11, 11, 0.9, (2, 2, 2, 2))
    assert "frame forces" in frame_exceeds_budget(10, 10, 0.5, (3, 3, 0, 0))
    assert frame_exceeds_budget(10, 10, 0.0, (5, 5, 5, 5)) is None


# --- bad input: each error before launch ---

@pytest.fixture
def no_launch(monkeypatch):
    def refuse(plan):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr("kernels.block_sparse.launch", refuse)
    monkeypatch.setattr(kernels._checks, "launch", refuse)


def t(*shape, dtype=torch.float16):
    return torch.zeros(shape, dtype=dtype)


def good(B=2, H=2, S=300, bs=(128, 256)):
    n_rows, n_cols = grid_shape(S, bs)
    sabi = block_index(n_rows, n_cols, 0.0, generator=gen(), batch_heads=(B, H))
    return dict(q=t(B, H, S, 16), k=t(B, H, S, 16), v=t(B, H, S, 16), sabi=sabi, block_shape=bs)


def with_row(row, at=(1, 0, 2)):
    kw = good()                     # sabi [2, 2, 3, 2]
    kw["sabi"] = kw["sabi"].clone()
    kw["sabi"][at] = torch.tensor(row, dtype=torch.int32)
    return kw


def bad_sabi(**kw):
    g = good()
    g.update(kw)
    return g


BAD = [
    ("unsorted", with_row([1, 0]), ValueError, "block_sparse: sabi rows must be strictly ascending"),
    ("duplicate", with_row([1, 1]), ValueError, "strictly ascending"),
    ("pad-then-block", with_row([PAD, 1]), ValueError, "sabi"),
    ("empty-row", with_row([PAD, PAD]), ValueError, "at least one KV block"),
    ("past-last-block", with_row([0, 2]), ValueError, "block_sparse: sabi entries"),
    ("negative", with_row([-1, 0]), ValueError, "block_sparse: sabi entries"),
    ("block-shape-value", bad_sabi(block_shape=(64, 128)), ValueError, "block_sparse: block_shape entries"),
    ("block-shape-type", bad_sabi(block_shape=128), TypeError, "block_sparse: block_shape must be a pair"),
    ("sabi-shape", bad_sabi(sabi=torch.zeros(2, 2, 3, 3, dtype=torch.int32)), ValueError,
     "block_sparse: sabi must have shape"),
    ("sabi-dtype", bad_sabi(sabi=torch.zeros(2, 2, 3, 2, dtype=torch.int64)), TypeError,
     "block_sparse: sabi must be int32"),
    ("k-shape", bad_sabi(k=t(2, 2, 299, 16)), ValueError, "block_sparse: k must have shape"),
    ("v-dtype", bad_sabi(v=t(2, 2, 300, 16, dtype=torch.float32)), TypeError, "block_sparse: v must have dtype"),
    ("q-rank", bad_sabi(q=t(2, 300, 16)), ValueError, "block_sparse: q must have rank 4"),
    ("lse-dtype", bad_sabi(return_lse=True, lse=t(2, 2, 300)), TypeError, "block_sparse: lse must have dtype"),
    ("out-shape", bad_sabi(out=t(2, 2, 300, 8)), ValueError, "block_sparse: out must have shape"),
]


@pytest.mark.parametrize("kw,exc,msg", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(no_launch, kw, exc, msg):
    kw = dict(kw)
    q, k, v, sabi = kw.pop("q"), kw.pop("k"), kw.pop("v"), kw.pop("sabi")
    with pytest.raises(exc, match=msg):
        block_sparse(q, k, v, sabi, **kw)


def test_good_input_reaches_launch(no_launch):
    kw = good()
    with pytest.raises(AssertionError, match="launched"):
        block_sparse(kw["q"], kw["k"], kw["v"], kw["sabi"], block_shape=kw["block_shape"])


# --- the origin's LSE checks, on the kernel itself ---

def runnable():
    return kernels._checks.is_interpret() or torch.cuda.is_available()


needs_kernel = pytest.mark.skipif(not runnable(), reason="needs a GPU or TRITON_INTERPRET=1")


def device():
    return "cpu" if kernels._checks.is_interpret() else "cuda"


@needs_kernel
def test_zeros_give_lse_log_s():
    B, H, S, bs = 2, 2, 300, (128, 128)
    z = torch.zeros(B, H, S, 32, dtype=torch.float16, device=device())
    n_rows, n_cols = grid_shape(S, bs)
    sabi = torch.arange(n_cols, dtype=torch.int32).expand(B, H, n_rows, n_cols).contiguous().to(z.device)
    o, lse = block_sparse(z, z.clone(), z.clone(), sabi, block_shape=bs, return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == (B, H, S)
    torch.testing.assert_close(lse, torch.full_like(lse, math.log(S)), atol=1e-5, rtol=1e-6)
    assert (o == 0).all()


@needs_kernel
def test_disabled_lse_is_empty():
    kw = good(S=200)
    kw = {n: (x.to(device()) if isinstance(x, torch.Tensor) else x) for n, x in kw.items()}
    o, lse = block_sparse(kw["q"], kw["k"], kw["v"], kw["sabi"], block_shape=kw["block_shape"])
    assert lse.numel() == 0 and lse.dtype == torch.float32
    assert o.shape == kw["q"].shape


@triton.jit
def _count_rows(SABI, OUT, stride_r, stride_c, n_cols):
    r = tl.program_id(0)
    tl.store(OUT + r, listed_blocks(SABI + r * stride_r, stride_c, n_cols))


@needs_kernel
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "entry-stride-2"])
def test_programs_count_their_rows_listed_blocks_over_several_loads(strided):
    """The CUDA fast kernel counts its row's listed blocks itself (kernels/_block_index.py), 256
    entries per load: rows of 600 columns listing 0 to 600 blocks, around each load's end, give
    the torch count. The family's cases have at most 64 columns, one load."""
    n_cols = 600
    lengths = [0, 1, 2, 255, 256, 257, 511, 512, 513, 599, 600]
    rows = torch.full((len(lengths), n_cols * (2 if strided else 1)), 7, dtype=torch.int32)
    sabi = rows[:, ::2] if strided else rows
    sabi.fill_(PAD)
    picks = torch.Generator().manual_seed(3)
    for r, n in enumerate(lengths):
        sabi[r, :n] = torch.randperm(n_cols, generator=picks)[:n].sort().values.to(torch.int32)
    sabi = sabi.to(device())
    out = torch.full((len(lengths),), -1, dtype=torch.int32, device=sabi.device)
    _count_rows[(len(lengths),)](sabi, out, sabi.stride(0), sabi.stride(1), n_cols)
    assert out.tolist() == (sabi != PAD).sum(-1).tolist() == lengths


def test_the_reference_cost_key_leaves_out_the_query_block_size_only():
    """A sweep reuses the reference's time across points with one key (attnsuite/bench/run.py):
    points that differ in the query block size share it; sparsity, key block size and sizes do
    not (each moved the measured time more)."""
    from cases.block_sparse import FAMILY

    points = [c for c in FAMILY.cases if "block_shape" in c.tags]
    headline = [c for c in FAMILY.cases if "bench" in c.tags and "block_shape" not in c.tags]
    keys = {}
    for c in points + headline:
        keys.setdefault(FAMILY.reference_cost_key(c, _meta_inputs(c)), set()).add(
            (c["S"], c["H"], c["bkv"], c["s"], c.params.get("lse", True)))
    assert all(len(v) == 1 for v in keys.values())  # nothing but the query block size merged
    assert len(keys) < len(points) + len(headline)   # and that merges some points


def _meta_inputs(case):
    B, H, S, D = (case.params[k] for k in ("B", "H", "S", "D"))
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case.params["dtype"]]
    return {"q": torch.empty(B, H, S, D, dtype=dtype), "k": torch.empty(B, H, S, D, dtype=dtype)}
