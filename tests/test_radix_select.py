"""The device top-k of the lightning indexer (kernels/_radix_select.py): for every row it picks
exactly min(topk, seq_len) distinct positions below seq_len whose values are the row's largest
(ties at the k-th value taken in any order, NaN above everything as in torch.topk), -1 after
them, whatever the values' spread: ties across the whole row, keys equal in their top 1-3 bytes
(every pass decides), a k-th value whose whole digit is taken (the passes end early), signs and
zeros of both signs, a row stride wider than the row, seq_len outside [0, N]."""
import contextlib

import pytest
import torch

import kernels._radix_select as rs
import kernels.settings as ks
from kernels._radix_select import radix_topk

#: "portable": the one-hot count, one gather program a row; "fast": the CUDA fast path as its
#: planner picks it for these rows (one program a row: ``_radix_select_rows``); "fast_chain": the
#: fast path's chain of passes spread over programs a row (``tl.histogram``, atomic tickets,
#: ``tl.cumsum``), which longer rows take; "fast_small": one program a row in 256-key steps (the
#: running counts across steps) that copies the keys still in question to its scratch words only
#: once they are at most 64 (after a later pass, or never), where "fast" copies them after the
#: top byte. The interpreter runs all four.
PATHS = ("portable", "fast", "fast_chain", "fast_small")


@contextlib.contextmanager
def _path(path, monkeypatch):
    if path == "fast_chain":
        monkeypatch.setattr(rs, "ROW_PROGRAM_MAX_N", 0)
    if path == "fast_small":
        config = rs.select_config
        monkeypatch.setattr(rs, "select_config", lambda t: {**config(t), "ROW_CAP": 64, "ROW_BLOCK": 256})
    with ks.using(kernel_path="portable" if path == "portable" else "fast"):
        yield


def _plans(path, N, monkeypatch):
    """The kernels radix_topk launches on ``path`` for rows of N (so a test knows which it ran)."""
    from kernels._checks import capture_launches
    with _path(path, monkeypatch), capture_launches() as plans:
        radix_topk(torch.zeros((1, N)), torch.tensor([N], dtype=torch.int32), 1, torch.empty((1, 1), dtype=torch.int32))
    return [p.kernel.fn.__name__ if hasattr(p.kernel, "fn") else p.kernel.__name__ for q in plans for p in q.chain()]


def _check(logits, seq_lens, topk, out):
    for b in range(logits.shape[0]):
        L = max(0, min(int(seq_lens[b]), logits.shape[1]))      # the kernels clamp seq_len
        n = min(topk, L)
        row = out[b].to(torch.int64)
        assert (row[n:] == -1).all(), f"row {b}: entries from {n} on must be -1"
        head = row[:n]
        assert ((head >= 0) & (head < L)).all(), f"row {b}: positions outside [0, {L})"
        assert head.unique().numel() == n, f"row {b}: duplicate positions"
        want = torch.topk(logits[b, :L], n).values.sort().values if n else logits.new_zeros(0)
        got = logits[b, head].sort().values      # NaN last in both
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan) and torch.equal(got[~nan], want[~nan]), \
            f"row {b}: chosen values differ from the top {n}"


def _rows(kind, B, N, gen, split=0):
    x = torch.randn((B, N), generator=gen)
    if kind == "ties":        # three values across the whole row
        x = torch.tensor([-1.5, 0.25, 3.0])[torch.randint(0, 3, (B, N), generator=gen)]
    elif kind == "equal":
        x = torch.full((B, N), 7.0)
    elif kind == "close":     # neighbours in the last bits: all four bytes decide
        base = torch.tensor(1.0).view(torch.int32)
        x = (base + torch.randint(-300, 300, (B, N), generator=gen, dtype=torch.int32)).view(torch.float32)
    elif kind == "zeros":     # +0.0 and -0.0 and tiny values of both signs
        pick = torch.randint(0, 4, (B, N), generator=gen)
        x = torch.tensor([0.0, -0.0, 1e-40, -1e-40])[pick]
    elif kind == "negative":
        x = -x.abs() - 1.0
    elif kind == "wide":
        x = x * torch.pow(2.0, torch.randint(-60, 60, (B, N), generator=gen).float())
    elif kind == "uniform":   # one top byte for all: the first digit below it splits them
        x = 1.0 + torch.rand((B, N), generator=gen)
    elif kind == "nan":       # NaN, +-inf and finite values; NaN ranks above +inf
        pick = torch.randint(0, 8, (B, N), generator=gen)
        x = torch.where(pick == 0, float("nan"), torch.where(pick == 1, float("inf"),
                                                             torch.where(pick == 2, float("-inf"), x)))
    elif kind in ("exact0", "exact1"):
        # The first ``split`` positions are the row's largest and share a digit no other key has:
        # the passes end after the top byte (exact0: [64, 128) against randn) or after the first
        # digit below it (exact1: [1.5, 1.5 + 2**-7) against [1, 1.25)).
        if kind == "exact0":
            x = x.clamp(-8, 8)
            x[:, :split] = 64.0 + 60.0 * torch.rand((B, split), generator=gen)
        else:
            x = 1.0 + 0.25 * torch.rand((B, N), generator=gen)
            x[:, :split] = 1.5 + 2.0 ** -8 * torch.rand((B, split), generator=gen)
    return x


@pytest.mark.parametrize("kind, topk, path", [(k, 37, "portable") for k in ("randn", "ties", "equal", "close", "zeros",
                                                                           "negative", "wide", "nan")]
                         + [("randn", 1, "portable"), ("ties", 300, "portable"), ("close", 300, "portable")]
                         + [(k, t, "fast") for k, t in (("ties", 300), ("zeros", 37), ("nan", 37))]
                         + [(k, t, p) for p in ("fast", "fast_chain", "fast_small")
                            for k, t in (("randn", 37), ("close", 37))]
                         + [(k, t, p) for p in ("fast_chain", "fast_small") for k, t in (("ties", 300), ("nan", 37))]
                         + [(k, t, "fast") for k, t in (("randn", 1), ("equal", 37), ("close", 300), ("negative", 37),
                                                        ("wide", 37), ("exact0", 37), ("exact1", 300))])
def test_radix_topk_takes_the_largest_values(kind, topk, path, monkeypatch):
    gen = torch.Generator().manual_seed(topk)
    lengths = [1000, 0, 5, 299, 2100]
    logits = _rows(kind, len(lengths), 2100, gen, split=topk)
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    out = torch.full((len(lengths), topk), 12345, dtype=torch.int32)
    with _path(path, monkeypatch):
        radix_topk(logits, seq_lens, topk, out, programs_per_row=2)
    _check(logits, seq_lens, topk, out)


@pytest.mark.parametrize("path", PATHS)
def test_radix_topk_clamps_seq_len_to_the_row(path, monkeypatch):
    """seq_len past N reads N keys, a negative one none (the data checks may be off): nothing is
    read or written outside the row and its output."""
    gen = torch.Generator().manual_seed(3)
    logits = _rows("randn", 3, 700, gen)
    seq_lens = torch.tensor([5000, -7, 700], dtype=torch.int32)
    out = torch.full((3, 50), 12345, dtype=torch.int32)
    with _path(path, monkeypatch):
        radix_topk(logits, seq_lens, 50, out, programs_per_row=2)
    _check(logits, seq_lens, 50, out)


@pytest.mark.parametrize("kind", ["randn", "ties", "uniform", "close", "equal"])
def test_one_program_a_row_over_rows_of_several_steps(kind, monkeypatch):
    """Rows longer than a step and than the scratch words, as the planner gives one program a
    row: the keys in question copied after the top byte (randn, ties), after the next digit
    (uniform), or never (close, equal: too many share every digit but the last)."""
    gen = torch.Generator().manual_seed(11)
    lengths = [9000, 4097, 8192, 4095]
    logits = _rows(kind, len(lengths), 9000, gen)
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    out = torch.full((len(lengths), 2048), 12345, dtype=torch.int32)
    assert _plans("fast", 9000, monkeypatch) == ["_radix_select_rows"]
    with _path("fast", monkeypatch):
        radix_topk(logits, seq_lens, 2048, out)
    _check(logits, seq_lens, 2048, out)


def test_the_fast_path_selects_short_rows_in_one_launch(monkeypatch):
    """The planner's rule: one program a row up to ROW_PROGRAM_MAX_N logits, the chain past it."""
    assert _plans("fast", rs.ROW_PROGRAM_MAX_N, monkeypatch) == ["_radix_select_rows"]
    assert _plans("fast", rs.ROW_PROGRAM_MAX_N + 1, monkeypatch) == ["_radix_count"] * 4 + ["_radix_gather"]
    assert _plans("portable", 100, monkeypatch) == ["_radix_count"] * 4 + ["_radix_gather"]


@pytest.mark.parametrize("path", ["fast", "fast_chain", "fast_small"])
def test_radix_topk_reads_rows_through_their_stride(path, monkeypatch):
    gen = torch.Generator().manual_seed(1)
    wide = torch.randn((3, 700), generator=gen)
    logits = wide[:, 50:650]
    seq_lens = torch.tensor([600, 333, 64], dtype=torch.int32)
    out = torch.empty((3, 100), dtype=torch.int32)
    with _path(path, monkeypatch):
        radix_topk(logits, seq_lens, 100, out, programs_per_row=2)
    _check(logits, seq_lens, 100, out)


@pytest.mark.parametrize("path", PATHS)
def test_radix_topk_leaves_its_workspace_zero_for_the_next_call(path, monkeypatch):
    """One workspace for call after call (as the indexer's call cache keeps it): the launches
    leave every word of it zero, so the next call's histograms start from nothing."""
    from kernels._radix_select import workspace

    gen = torch.Generator().manual_seed(5)
    lengths = [1000, 0, 37, 2100]
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    ws = workspace(len(lengths), "cpu")
    with _path(path, monkeypatch):
        for kind, topk in (("randn", 37), ("ties", 300), ("close", 37)):
            logits = _rows(kind, len(lengths), 2100, gen)
            out = torch.full((len(lengths), topk), 12345, dtype=torch.int32)
            radix_topk(logits, seq_lens, topk, out, programs_per_row=3, ws=ws)
            _check(logits, seq_lens, topk, out)
            assert not ws.any(), f"{kind}: workspace words left non-zero: {ws.nonzero()[:5].tolist()}"


def _top_byte_counts(logits, seq_lens):
    """What a producer of the logits leaves in the workspace (pass 0's histogram), in torch: the
    top byte of each key of the row, read as unsigned with the sign bit flipped."""
    bits = logits.contiguous().view(torch.int32).to(torch.int64)
    key = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    digit = ((key >> 24) & 255) ^ 128
    L = seq_lens.to(torch.int64).clamp(0, logits.shape[1])
    live = torch.arange(logits.shape[1])[None, :] < L[:, None]
    return torch.stack([torch.bincount(d[m], minlength=256) for d, m in zip(digit, live)]).to(torch.int32)


@pytest.mark.parametrize("path", ["fast", "fast_chain", "fast_small"])
def test_the_selection_after_a_producer_that_counted_the_top_byte(path, monkeypatch):
    """The indexer's chain: the logits' producer leaves pass 0's histogram in the workspace and the
    selection starts at pass 1; call after call on one workspace, which it leaves zero."""
    from kernels._checks import launch
    from kernels._radix_select import select_plans, workspace

    gen = torch.Generator().manual_seed(9)
    lengths = [1000, 0, 37, 2100]
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    ws = workspace(len(lengths), "cpu")
    with _path(path, monkeypatch):
        for kind, topk in (("randn", 37), ("ties", 300), ("exact0", 37), ("nan", 37)):
            logits = _rows(kind, len(lengths), 2100, gen, split=topk)
            ws[:, :256] = _top_byte_counts(logits, seq_lens)
            out = torch.full((len(lengths), topk), 12345, dtype=torch.int32)
            first, _ = select_plans(logits, seq_lens, topk, out, ws, (len(lengths), 3), rs.select_config(logits),
                                    first_pass=1)
            launch(first)
            _check(logits, seq_lens, topk, out)
            assert not ws.any(), f"{kind}: workspace words left non-zero: {ws.nonzero()[:5].tolist()}"
