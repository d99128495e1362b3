"""The MLA families: the references against the formula written token by token on tiny inputs,
bad input for the wrappers (a clear error naming the argument, before any launch), and the
fused-buffer views reaching the kernel uncopied."""
import math

import pytest
import torch

import kernels._checks
import kernels.mla_paged as mla
from kernels._checks import capture_launches
from references.mla import mla_paged_decode_reference, mla_paged_prefill_reference

FP8 = torch.float8_e4m3fn


def i32(*values):
    return torch.tensor(values, dtype=torch.int32)


def tiny(dtype=torch.float64, cache_dtype=None, H=3, Dc=5, Dr=2, P=3, seed=0):
    """Two sequences over a pool of 5 pages of 3 slots: 5 tokens on pages [3, 1] (last 2), 0
    tokens, 3 tokens on page [4] (last 3). Unowned slots hold NaN."""
    g = torch.Generator().manual_seed(seed)
    ckv = torch.randn(5, P, Dc, generator=g, dtype=torch.float64)
    kpe = torch.randn(5, P, Dr, generator=g, dtype=torch.float64)
    owned = torch.zeros(5, P, dtype=torch.bool)
    owned[3] = True
    owned[1, :2] = True
    owned[4] = True
    ckv[~owned] = float("nan")
    kpe[~owned] = float("nan")
    if cache_dtype is not None:
        ckv, kpe = ckv.to(cache_dtype), kpe.to(cache_dtype)
    return dict(ckv=ckv, kpe=kpe, indptr=i32(0, 2, 2, 3), indices=i32(3, 1, 4), last=i32(2, 0, 3),
                tokens=[[(3, 0), (3, 1), (3, 2), (1, 0), (1, 1)], [], [(4, 0), (4, 1), (4, 2)]],
                qn=torch.randn(3, H, Dc, generator=g, dtype=torch.float64).to(dtype),
                qp=torch.randn(3, H, Dr, generator=g, dtype=torch.float64).to(dtype))


def naive_row(qn, qp, rows, ckv, kpe, scale, k_scale=1.0, v_scale=1.0):
    """One query head over the listed (page, slot) rows, written out token by token."""
    if not rows:
        return torch.zeros(ckv.shape[-1], dtype=torch.float64), -math.inf
    scores = [scale * k_scale * (float(qn @ ckv[p, s].double()) + float(qp @ kpe[p, s].double())) for p, s in rows]
    top = max(scores)
    weights = [math.exp(x - top) for x in scores]
    total = sum(weights)
    o = sum(w * ckv[p, s].double() * v_scale for w, (p, s) in zip(weights, rows)) / total
    return o, top + math.log(total)


@pytest.mark.parametrize("scale", [None, 0.3])
def test_decode_reference_is_the_formula(scale):
    t = tiny()
    o, lse = mla_paged_decode_reference(t["qn"], t["qp"], t["ckv"], t["kpe"], t["indptr"], t["indices"], t["last"],
                                        scale=scale)
    s = 1 / math.sqrt(7) if scale is None else scale
    for b in range(3):
        for h in range(3):
            want_o, want_lse = naive_row(t["qn"][b, h], t["qp"][b, h], t["tokens"][b], t["ckv"], t["kpe"], s)
            torch.testing.assert_close(o[b, h], want_o)
            assert lse[b, h].item() == pytest.approx(want_lse)
    assert torch.equal(o[1], torch.zeros_like(o[1])) and bool((lse[1] == -math.inf).all())


def test_fp8_reference_dequantises_keys_with_k_scale_and_values_with_v_scale():
    t = tiny(cache_dtype=FP8)
    o, lse = mla_paged_decode_reference(t["qn"], t["qp"], t["ckv"], t["kpe"], t["indptr"], t["indices"], t["last"],
                                        scale=0.5, k_scale=1 / 64, v_scale=8.0)
    ckv, kpe = t["ckv"].to(torch.float32), t["kpe"].to(torch.float32)
    for b in (0, 2):
        want_o, want_lse = naive_row(t["qn"][b, 1], t["qp"][b, 1], t["tokens"][b], ckv, kpe, 0.5, 1 / 64, 8.0)
        torch.testing.assert_close(o[b, 1], want_o)
        assert lse[b, 1].item() == pytest.approx(want_lse)


@pytest.mark.parametrize("causal", [True, False])
def test_prefill_reference_is_the_formula_bottom_right(causal):
    t = tiny()
    # Sequence 0: 2 queries over its 5 tokens; sequence 1: none; sequence 2: all 3 (m == n).
    qo = i32(0, 2, 2, 5)
    g = torch.Generator().manual_seed(1)
    qn, qp = torch.randn(5, 3, 5, generator=g, dtype=torch.float64), torch.randn(5, 3, 2, generator=g, dtype=torch.float64)
    o, lse = mla_paged_prefill_reference(qn, qp, qo, t["ckv"], t["kpe"], t["indptr"], t["indices"], t["last"],
                                         causal=causal, scale=0.4)
    queries = [(0, 0, 2), (0, 1, 2), (2, 0, 3), (2, 1, 3), (2, 2, 3)]  # (sequence, i, n)
    for row, (b, i, n) in enumerate(queries):
        m = len(t["tokens"][b])
        seen = t["tokens"][b][:m - n + i + 1] if causal else t["tokens"][b]
        for h in range(3):
            want_o, want_lse = naive_row(qn[row, h], qp[row, h], seen, t["ckv"], t["kpe"], 0.4)
            torch.testing.assert_close(o[row, h], want_o)
            assert lse[row, h].item() == pytest.approx(want_lse)


# --- the wrappers ------------------------------------------------------------------------------

@pytest.fixture
def no_launch(monkeypatch):
    def refuse(plan):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr(kernels._checks, "launch", refuse)
    monkeypatch.setattr(mla, "launch", refuse)


def good(H=4, Dc=32, Dr=16, P=4, dtype=torch.float16, cache_dtype=None):
    """Two sequences: 6 tokens on pages [3, 1] and 3 tokens on page [0], a pool of 5 pages;
    prefill: 2 and 3 queries."""
    cache_dtype = cache_dtype or dtype
    return dict(q_nope=torch.zeros(2, H, Dc, dtype=dtype), q_pe=torch.zeros(2, H, Dr, dtype=dtype),
                ckv_cache=torch.zeros(5, P, Dc, dtype=cache_dtype), kpe_cache=torch.zeros(5, P, Dr, dtype=cache_dtype),
                kv_page_indptr=i32(0, 2, 3), kv_page_indices=i32(3, 1, 0), kv_last_page_len=i32(2, 3),
                qo_indptr=i32(0, 2, 5))


def decode(**change):
    kw = {k: change.pop(k) for k in list(change) if k in ("scale", "k_scale", "v_scale", "return_lse", "out", "lse",
                                                          "num_splits", "check_indices")}
    a = {**good(), **change}
    return mla.mla_paged_decode(a["q_nope"], a["q_pe"], a["ckv_cache"], a["kpe_cache"], a["kv_page_indptr"],
                                a["kv_page_indices"], a["kv_last_page_len"], **kw)


def prefill(**change):
    kw = {k: change.pop(k) for k in list(change) if k in ("scale", "k_scale", "v_scale", "return_lse", "out", "lse",
                                                          "causal", "num_splits", "check_indices")}
    a = {**good(), **change}
    a["q_nope"] = change.get("q_nope", torch.zeros(5, 4, 32, dtype=torch.float16))
    a["q_pe"] = change.get("q_pe", torch.zeros(5, 4, 16, dtype=torch.float16))
    return mla.mla_paged_prefill(a["q_nope"], a["q_pe"], a["qo_indptr"], a["ckv_cache"], a["kpe_cache"],
                                 a["kv_page_indptr"], a["kv_page_indices"], a["kv_last_page_len"], **kw)


BAD_DECODE = [
    (dict(q_nope=torch.zeros(2, 4, 32, dtype=torch.int32)), TypeError, "q_nope must have dtype"),
    (dict(q_nope=torch.zeros(2, 4, 32, 1, dtype=torch.float16)), ValueError, "q_nope must have rank 3"),
    (dict(q_nope=torch.zeros(2, 4, 24, dtype=torch.float16), ckv_cache=torch.zeros(5, 4, 24, dtype=torch.float16)),
     ValueError, "q_nope must be a multiple of 16"),
    (dict(q_nope=torch.zeros(2, 4, 1024, dtype=torch.float16)), ValueError, "q_nope must be a multiple of 16"),
    (dict(q_pe=torch.zeros(2, 4, 16, dtype=torch.bfloat16)), TypeError, "q_pe must have dtype"),
    (dict(q_pe=torch.zeros(2, 3, 16, dtype=torch.float16)), ValueError, "q_pe must have shape"),
    (dict(q_pe=torch.zeros(2, 4, 8, dtype=torch.float16), kpe_cache=torch.zeros(5, 4, 8, dtype=torch.float16)),
     ValueError, "q_pe must be a multiple of 16"),
    (dict(ckv_cache=torch.zeros(5, 4, 32, dtype=torch.float32)), TypeError, "ckv_cache must have dtype"),
    (dict(ckv_cache=torch.zeros(5, 4, 48, dtype=torch.float16)), ValueError, "ckv_cache must have shape"),
    (dict(ckv_cache=torch.zeros(5, 4, 64, dtype=torch.float16)[..., ::2]), ValueError,
     "ckv_cache must be contiguous in its last dimension"),
    (dict(kpe_cache=torch.zeros(5, 4, 16, dtype=FP8)), TypeError, "kpe_cache must have dtype"),
    (dict(kpe_cache=torch.zeros(6, 4, 16, dtype=torch.float16)), ValueError, "kpe_cache must have shape"),
    (dict(kv_page_indptr=torch.tensor([0, 2, 3])), TypeError, "kv_page_indptr must be int32"),
    (dict(kv_page_indptr=i32(0, 2)), ValueError, "kv_page_indptr must have shape"),
    (dict(kv_page_indices=i32(3, 1, 5)), ValueError, "kv_page_indices page ids must be in"),
    (dict(kv_page_indices=i32(3, 1)), ValueError, "kv_page_indices must have shape"),
    (dict(kv_last_page_len=i32(0, 3)), ValueError, "kv_last_page_len"),
    (dict(kv_last_page_len=i32(2, 5)), ValueError, "kv_last_page_len"),
    (dict(kv_page_indptr=i32(0, 3, 3), kv_last_page_len=i32(2, 1)), ValueError, "kv_last_page_len"),
    (dict(scale=float("nan")), ValueError, "scale must be finite"),
    (dict(scale="0.1"), TypeError, "scale must be a real number"),
    (dict(k_scale=0.0), ValueError, "k_scale must be finite and > 0"),
    (dict(v_scale=float("inf")), ValueError, "v_scale must be finite and > 0"),
    (dict(k_scale=None), TypeError, "k_scale must be a real number"),
    (dict(return_lse=1), TypeError, "return_lse must be a bool"),
    (dict(out=torch.zeros(2, 4, 16, dtype=torch.float16)), ValueError, "out must have shape"),
    (dict(out=torch.zeros(2, 4, 32, dtype=torch.float32)), TypeError, "out must have dtype"),
    (dict(lse=torch.zeros(2, 4)), ValueError, "lse buffer given but return_lse=False"),
    (dict(return_lse=True, lse=torch.zeros(2, 4, dtype=torch.float16)), TypeError, "lse must have dtype"),
    (dict(num_splits=0), ValueError, "num_splits must be in"),
]


@pytest.mark.parametrize("change,exc,message", BAD_DECODE, ids=[m for _, _, m in BAD_DECODE])
def test_decode_bad_input_names_the_argument_before_any_launch(no_launch, change, exc, message):
    with pytest.raises(exc, match=message.replace("(", r"\(").replace("[", r"\[")):
        decode(**change)


BAD_PREFILL = [
    (dict(qo_indptr=torch.tensor([0, 2, 5])), TypeError, "qo_indptr must be int32"),
    (dict(qo_indptr=i32(0, 2, 4)), ValueError, r"qo_indptr\[B\] must equal q_nope.shape\[0\] = 5"),
    (dict(qo_indptr=i32(1, 2, 5)), ValueError, r"qo_indptr\[0\] must be 0"),
    (dict(qo_indptr=i32(0, 3, 2, 5), kv_page_indptr=i32(0, 2, 3, 3), kv_last_page_len=i32(2, 3, 0)), ValueError,
     "qo_indptr must be non-decreasing"),
    # Sequence 1 has 3 cached tokens and 4 queries: causal prefill needs n <= m.
    (dict(qo_indptr=i32(0, 1, 5)), ValueError, "sequence 1 4 queries but it has only 3 cached tokens"),
    (dict(qo_indptr=i32(0, 2, 3, 5)), ValueError, "kv_page_indptr must have shape"),
    (dict(causal=1), TypeError, "causal must be a bool"),
    (dict(q_nope=torch.zeros(5, 4, 32, dtype=torch.float16), q_pe=torch.zeros(4, 4, 16, dtype=torch.float16)),
     ValueError, "q_pe must have shape"),
]


@pytest.mark.parametrize("change,exc,message", BAD_PREFILL, ids=[m for _, _, m in BAD_PREFILL])
def test_prefill_bad_input_names_the_argument_before_any_launch(no_launch, change, exc, message):
    with pytest.raises(exc, match=message):
        prefill(**change)


def test_non_causal_prefill_may_have_more_queries_than_cached_tokens():
    with capture_launches() as plans:
        prefill(qo_indptr=i32(0, 1, 5), causal=False)
    assert plans


def test_out_and_lse_must_not_alias_an_input(no_launch):
    a = good()
    with pytest.raises(ValueError, match="out must not share memory with q_nope"):
        decode(out=a["q_nope"], q_nope=a["q_nope"])
    fused = torch.zeros(5, 4, 64, dtype=torch.float16)
    out = fused.view(-1)[:2 * 4 * 32].view(2, 4, 32)
    with pytest.raises(ValueError, match="out must not share memory with ckv_cache"):
        decode(out=out, ckv_cache=fused[..., :32], kpe_cache=fused[..., 32:48])
    kpe = torch.zeros(5, 4, 16, dtype=torch.float16)
    with pytest.raises(ValueError, match="lse must not share memory with kpe_cache"):
        decode(kpe_cache=kpe, return_lse=True, lse=kpe.view(-1).view(torch.float32)[:8].view(2, 4))
    # lse's first elements are the page list's memory (a disjoint view of one buffer would be legal).
    pages = i32(3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="lse must not share memory with kv_page_indices"):
        decode(kv_page_indices=pages[:3], return_lse=True, lse=pages.view(torch.float32)[:8].view(2, 4))


def test_the_fused_buffer_views_reach_the_kernel_uncopied():
    buf = torch.zeros(5, 4, 48, dtype=torch.float16)
    q = torch.zeros(2, 4, 48, dtype=torch.float16)
    a = good()
    with capture_launches() as plans:
        mla.mla_paged_decode(q[..., :32], q[..., 32:], buf[..., :32], buf[..., 32:], a["kv_page_indptr"],
                             a["kv_page_indices"], a["kv_last_page_len"])
    args = plans[0].args
    assert args[0].data_ptr() == q.data_ptr() and args[1].data_ptr() == q.data_ptr() + 32 * 2
    assert args[2].data_ptr() == buf.data_ptr() and args[3].data_ptr() == buf.data_ptr() + 32 * 2
    assert args[2].stride() == (4 * 48, 48, 1)


def test_ascend_tiles_fit_a_512_wide_row():
    """The planner's Ascend tiles for the bench shape: 16 heads x 16 slots, full Dc, and a
    persistent grid no larger than the AI cores (the compile tier measures the UB itself)."""
    cfg = mla.mla_config(rows=128, H=16, Dc=512, Dr=64, page_size=64, max_pages=128, cache_dtype=torch.bfloat16,
                         interpret=False, cores=24)
    assert (cfg["BLOCK_H"], cfg["BLOCK_N"], cfg["BLOCK_DC"], cfg["num_stages"]) == (16, 16, 512, 1)


def test_the_kernels_e4m3_decoder_is_exact_on_every_byte():
    """Every finite float8_e4m3fn encoding (subnormals, +-448, both zeros) decodes to the value
    torch gives it; the NaN encodings are never decoded from an owned slot."""
    import triton
    import triton.language as tl

    @triton.jit
    def decode(X, Y):
        offs = tl.arange(0, 256)
        tl.store(Y + offs, mla._e4m3_bits(tl.load(X + offs)).to(tl.float32))

    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    got = torch.empty(256, dtype=torch.float32)
    decode[(1,)](bits, got)
    want = bits.view(FP8).to(torch.float32)
    finite = torch.isfinite(want)
    assert int(finite.sum()) == 254
    assert torch.equal(got[finite], want[finite])


def test_decode_reference_in_blocks_of_sequences_is_the_same(monkeypatch):
    """Long caches are gathered a block of sequences at a time (bounded float64 copies): one
    sequence per block gives the same numbers as the whole batch at once."""
    import references.mla as ref
    t = tiny()
    args = (t["qn"], t["qp"], t["ckv"], t["kpe"], t["indptr"], t["indices"], t["last"])
    whole = ref.mla_paged_decode_reference(*args, scale=0.3)
    monkeypatch.setattr(ref, "GATHER_ELEMENTS", 1)
    blocks = ref.mla_paged_decode_reference(*args, scale=0.3)
    for a, b in zip(whole, blocks):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def _lengths_table(lengths, P=4, pool=40, seed=1):
    g = torch.Generator().manual_seed(seed)
    pages = [(n + P - 1) // P for n in lengths]
    ids = torch.randperm(pool, generator=g)[:sum(pages)].to(torch.int32)
    indptr = torch.tensor([0] + list(torch.tensor(pages).cumsum(0)), dtype=torch.int32)
    last = torch.tensor([n - (p - 1) * P if p else 0 for n, p in zip(lengths, pages)], dtype=torch.int32)
    return indptr, ids, last


def test_a_device_plan_reads_no_page_table_data():
    """On a device the split is sized from shapes alone (no sync, so the call can be captured
    in a CUDA graph): two page tables of equal shapes but other lengths plan the same launch."""
    H, Dc, Dr, P = 4, 32, 16, 4
    ckv, kpe = torch.zeros(40, P, Dc, dtype=torch.float16), torch.zeros(40, P, Dr, dtype=torch.float16)
    q = torch.zeros(3, H, Dc + Dr, dtype=torch.float16)
    grids = []
    for lengths in ((100, 1, 1), (34, 34, 34)):
        indptr, ids, last = _lengths_table(lengths, P)
        assert indptr[-1] == ids.shape[0] == 27
        with capture_launches() as plans:
            mla.mla_paged_decode(q[..., :Dc], q[..., Dc:], ckv, kpe, indptr, ids, last, check_indices=False)
        splits = plans[0].args[mla._mla_paged_fwd.arg_names.index("NUM_SPLITS")]
        grids.append((tuple(plans[0].grid), splits))
    assert grids[0] == grids[1]


@pytest.mark.parametrize("num_splits", [1, 3, 40])
def test_each_sequence_is_cut_into_the_runs_asked_for(num_splits):
    """A split is a run of a sequence's own pages: sequences longer and shorter than the number
    of runs (empty runs included) and an empty one all come out as the reference."""
    H, Dc, Dr, P = 4, 32, 16, 4
    g = torch.Generator().manual_seed(2)
    lengths = (101, 2, 0, 37)
    indptr, ids, last = _lengths_table(lengths, P)
    ckv = torch.randn(40, P, Dc, generator=g).to(torch.float16)
    kpe = torch.randn(40, P, Dr, generator=g).to(torch.float16)
    qn = torch.randn(4, H, Dc, generator=g).to(torch.float16)
    qp = torch.randn(4, H, Dr, generator=g).to(torch.float16)
    o, lse = mla.mla_paged_decode(qn, qp, ckv, kpe, indptr, ids, last, return_lse=True, num_splits=num_splits)
    ro, rl = mla_paged_decode_reference(qn, qp, ckv, kpe, indptr, ids, last)
    torch.testing.assert_close(o.float(), ro.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse, rl.float(), atol=1e-3, rtol=1e-3)


def test_gpu_runs_per_row_fill_whole_waves():
    """The GPU plan's runs per row: never a grid just past a whole number of waves (the bench
    shapes measured on an H200), every run used when even that fills less than a wave."""
    assert mla.wave_splits(32, 264, 16) == 8     # 256 programs, not 288
    assert mla.wave_splits(128, 264, 16) == 2    # 256, not 384
    assert mla.wave_splits(128, 264, 2) == 2
    assert mla.wave_splits(1, 264, 64) == 64     # one sequence: as many runs as it has
    assert mla.wave_splits(600, 264, 16) == 3    # 1800 programs, 6.8 waves: 0.97 full
    # Over many grids: the pick fills the last wave within 5% of the best pick, and no fewer
    # runs do (a wave's fill is how full its last wave is, counted here from scratch).
    def fill(programs, runs):
        waves = programs * runs / 264
        return waves / -(-programs * runs // 264)

    for programs in (1, 5, 33, 70, 100, 132, 200, 264, 300, 529, 1000):
        for most in (1, 2, 3, 9, 16, 64):
            runs = mla.wave_splits(programs, 264, most)
            if programs * most <= 264:
                assert runs == most, (programs, most, runs)
                continue
            best = max(fill(programs, r) for r in range(1, most + 1))
            assert fill(programs, runs) >= 0.95 * best, (programs, most, runs)
            assert all(fill(programs, r) < 0.95 * best for r in range(1, runs)), (programs, most, runs)


@pytest.mark.parametrize("causal", [True, False])
def test_prefill_rows_find_their_sequence_among_many_with_empty_ones(causal):
    """The kernel finds each query row's sequence by a binary search of qo_indptr: nine
    sequences, empty ones first, last and in a run (no queries, or no cache and no queries),
    every row against the reference."""
    H, Dc, Dr, P = 2, 32, 16, 4
    g = torch.Generator().manual_seed(3)
    lengths = (0, 9, 0, 0, 17, 5, 30, 3, 0)
    queries = (0, 2, 0, 0, 17, 1, 4, 3, 0)
    indptr, ids, last = _lengths_table(lengths, P, pool=60)
    qo = torch.tensor([0, *torch.tensor(queries).cumsum(0).tolist()], dtype=torch.int32)
    T = int(qo[-1])
    ckv = torch.randn(60, P, Dc, generator=g).to(torch.float16)
    kpe = torch.randn(60, P, Dr, generator=g).to(torch.float16)
    qn = torch.randn(T, H, Dc, generator=g).to(torch.float16)
    qp = torch.randn(T, H, Dr, generator=g).to(torch.float16)
    o, lse = mla.mla_paged_prefill(qn, qp, qo, ckv, kpe, indptr, ids, last, causal=causal, return_lse=True)
    ro, rl = mla_paged_prefill_reference(qn, qp, qo, ckv, kpe, indptr, ids, last, causal=causal)
    torch.testing.assert_close(o.float(), ro.float(), atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(lse, rl.float(), atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("check_indices", [True, False])
def test_prefill_without_a_sequence_but_with_query_rows_is_refused(no_launch, check_indices):
    """qo_indptr of shape [1] says there are no queries: with query rows that is wrong from
    shapes alone, and the kernel would have no sequence to find them in."""
    with pytest.raises(ValueError, match="qo_indptr has no sequence"):
        prefill(qo_indptr=i32(0), kv_page_indptr=i32(0), kv_page_indices=i32(), kv_last_page_len=i32(),
                check_indices=check_indices)


@pytest.mark.parametrize("cache", ["fp16", "fp8"])
@pytest.mark.parametrize("variant", [dict(KEYS_M=True), dict(FP8_WORDS=True), dict(KEYS_M=True, FP8_WORDS=True)],
                         ids=["keys_m", "fp8_words", "both"])
def test_the_sm90_kernel_variants_give_the_reference(monkeypatch, variant, cache):
    """The kernel's CUDA-only shapes run in the interpreter: the tile's tokens as the dots' rows
    (KEYS_M) and an fp8 tile read as int32 words (FP8_WORDS; decoded byte by byte here, by the
    hardware conversion on sm_89+), on decode and causal prefill: a fused [.., Dc + Dr] buffer,
    NaN in every unowned slot, lengths off the page and tile, an empty sequence, split runs."""
    H, Dc, Dr, P = 3, 48, 16, 4
    g = torch.Generator().manual_seed(5)
    lengths = (37, 0, 9)
    indptr, ids, last = _lengths_table(lengths, P)
    buf = torch.full((40, P, Dc + Dr), float("nan"), dtype=torch.float64)
    for b, n in enumerate(lengths):
        pages = ids[indptr[b]:indptr[b + 1]].long()
        for t in range(n):
            buf[pages[t // P], t % P] = torch.randn(Dc + Dr, generator=g, dtype=torch.float64) * 3
    buf = buf.to(FP8 if cache == "fp8" else torch.float16)
    ckv, kpe = buf[..., :Dc], buf[..., Dc:]
    scales = dict(k_scale=0.75, v_scale=1.5) if cache == "fp8" else {}
    shipped = mla.mla_config
    monkeypatch.setattr(mla, "mla_config", lambda *a, **k: {**shipped(*a, **k), **variant})
    mla._DECODE.clear()
    mla._PREFILL.clear()
    try:
        qn = torch.randn(3, H, Dc, generator=g).to(torch.float16)
        qp = torch.randn(3, H, Dr, generator=g).to(torch.float16)
        o, lse = mla.mla_paged_decode(qn, qp, ckv, kpe, indptr, ids, last, return_lse=True, num_splits=3, **scales)
        ro, rl = mla_paged_decode_reference(qn, qp, ckv, kpe, indptr, ids, last, **scales)
        torch.testing.assert_close(o.double(), ro, atol=4e-3, rtol=4e-3)
        torch.testing.assert_close(lse.double(), rl, atol=1e-3, rtol=1e-3)
        if variant.get("FP8_WORDS") and cache == "fp8":
            # Words only where the planner may use them: a base off 16 bytes reads bytes.
            moved = torch.empty(buf.numel() + 4, dtype=buf.dtype)[4:].view(buf.shape)
            moved.copy_(buf)
            for b, words in ((buf, True), (moved, False)):
                with capture_launches() as plans:
                    mla.mla_paged_decode(qn, qp, b[..., :Dc], b[..., Dc:], indptr, ids, last, **scales)
                assert plans[0].meta["FP8_WORDS"] is words
            o, lse = mla.mla_paged_decode(qn, qp, moved[..., :Dc], moved[..., Dc:], indptr, ids, last,
                                          return_lse=True, num_splits=3, **scales)
            torch.testing.assert_close(o.double(), ro, atol=4e-3, rtol=4e-3)
        qo = i32(0, 5, 5, 8)
        qn = torch.randn(8, H, Dc, generator=g).to(torch.float16)
        qp = torch.randn(8, H, Dr, generator=g).to(torch.float16)
        o, lse = mla.mla_paged_prefill(qn, qp, qo, ckv, kpe, indptr, ids, last, return_lse=True, **scales)
        ro, rl = mla_paged_prefill_reference(qn, qp, qo, ckv, kpe, indptr, ids, last, **scales)
        torch.testing.assert_close(o.double(), ro, atol=4e-3, rtol=4e-3)
        torch.testing.assert_close(lse.double(), rl, atol=1e-3, rtol=1e-3)
    finally:
        mla._DECODE.clear()
        mla._PREFILL.clear()
