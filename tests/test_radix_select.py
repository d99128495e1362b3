"""The device top-k of the lightning indexer (kernels/_radix_select.py): for every row it picks
exactly min(topk, seq_len) distinct positions below seq_len whose values are the row's largest
(ties at the k-th value taken in any order), -1 after them, whatever the values' spread: ties
across the whole row, keys equal in their top 1-3 bytes (every pass decides), signs and zeros
of both signs, a row stride wider than the row."""
import pytest
import torch

import kernels.settings as ks
from kernels._radix_select import radix_topk

#: "portable": the one-hot count, one gather program a row; "fast": the CUDA fast path's
#: ``tl.histogram``, atomic tickets and ``tl.cumsum``, run by the interpreter.


def _check(logits, seq_lens, topk, out):
    for b in range(logits.shape[0]):
        L = int(seq_lens[b])
        n = min(topk, L)
        row = out[b].to(torch.int64)
        assert (row[n:] == -1).all(), f"row {b}: entries from {n} on must be -1"
        head = row[:n]
        assert ((head >= 0) & (head < L)).all(), f"row {b}: positions outside [0, {L})"
        assert head.unique().numel() == n, f"row {b}: duplicate positions"
        want = torch.topk(logits[b, :L], n).values.sort().values if n else logits.new_zeros(0)
        got = logits[b, head].sort().values
        assert torch.equal(got, want), f"row {b}: chosen values differ from the top {n}"


def _rows(kind, B, N, gen):
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
    return x


@pytest.mark.parametrize("kind, topk, path", [(k, 37, "portable") for k in ("randn", "ties", "equal", "close", "zeros",
                                                                           "negative", "wide")]
                         + [("randn", 1, "portable"), ("ties", 300, "portable"), ("close", 300, "portable")]
                         + [(k, t, "fast") for k, t in (("randn", 37), ("ties", 300), ("close", 37), ("zeros", 37))])
def test_radix_topk_takes_the_largest_values(kind, topk, path):
    gen = torch.Generator().manual_seed(topk)
    lengths = [1000, 0, 5, 299, 2100]
    logits = _rows(kind, len(lengths), 2100, gen)
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    out = torch.full((len(lengths), topk), 12345, dtype=torch.int32)
    with ks.using(kernel_path=path):
        radix_topk(logits, seq_lens, topk, out, programs_per_row=2)
    _check(logits, seq_lens, topk, out)


def test_radix_topk_reads_rows_through_their_stride():
    gen = torch.Generator().manual_seed(1)
    wide = torch.randn((3, 700), generator=gen)
    logits = wide[:, 50:650]
    seq_lens = torch.tensor([600, 333, 64], dtype=torch.int32)
    out = torch.empty((3, 100), dtype=torch.int32)
    with ks.using(kernel_path="fast"):
        radix_topk(logits, seq_lens, 100, out, programs_per_row=2)
    _check(logits, seq_lens, 100, out)


@pytest.mark.parametrize("path", ["portable", "fast"])
def test_radix_topk_leaves_its_workspace_zero_for_the_next_call(path):
    """One workspace for call after call (as the indexer's call cache keeps it): the launches
    leave every word of it zero, so the next call's histograms start from nothing."""
    from kernels._radix_select import workspace

    gen = torch.Generator().manual_seed(5)
    lengths = [1000, 0, 37, 2100]
    seq_lens = torch.tensor(lengths, dtype=torch.int32)
    ws = workspace(len(lengths), "cpu")
    with ks.using(kernel_path=path):
        for kind, topk in (("randn", 37), ("ties", 300), ("close", 37)):
            logits = _rows(kind, len(lengths), 2100, gen)
            out = torch.full((len(lengths), topk), 12345, dtype=torch.int32)
            radix_topk(logits, seq_lens, topk, out, programs_per_row=3, ws=ws)
            _check(logits, seq_lens, topk, out)
            assert not ws.any(), f"{kind}: workspace words left non-zero: {ws.nonzero()[:5].tolist()}"
