"""Top-k of each row of an fp32 [B, N] tensor by radix select, on the device, with no host sync.

Each logit maps to an int32 ``key`` whose signed order is the float order (``order_key``). The
k-th largest key of a row is found one byte at a time, most significant first (4 passes of 256
bins): pass p counts, among the row's keys whose top p bytes equal the bytes found so far, how
many have each value of byte p (a histogram in ``ws``, summed over the row's programs with
atomic adds); the byte of the k-th key is the largest one with at least ``need`` keys at or
above it, and ``need`` drops by the keys above it. After the 4th pass the k-th key ``thr`` is
known exactly, with ``need`` = how many of the keys equal to it to take. The gather then writes
every position with a key above ``thr`` and the first ``need`` (in ticket or scan order: any of
them are right, the contract leaves ties open) of those equal to it: exactly min(topk, seq_len)
distinct positions, -1 after them.

The launches: ``_radix_count`` for passes 0-3 (a producer of the logits may count pass 0 itself
with ``count_digits`` + ``flush_counts``, as the indexer's logits kernel does on the fast path),
then ``_radix_gather``. Each program of a later launch re-derives the bytes found so far from the
histograms (a few 256-wide sums), so nothing but the histograms passes between launches. ``ws``
must be zero before the first launch, and the gather leaves it zero again (the row's last
program clears it once every program of the row has read it): a caller may keep one workspace
for every call, with no memset per call.

The CUDA fast path (``use_fast_path``) counts a tile's bytes with ``tl.histogram`` and spreads
the gather over many programs a row, which take their output slots by atomic tickets and rank
within a tile by ``tl.cumsum``. For rows up to ``ROW_PROGRAM_MAX_N`` logits it replaces that
chain by one launch, ``_radix_select_rows``: one program a row runs every pass and the gather
itself (the chain's cost was four dependent launches and the bytes re-derived in each program,
not the reads), counting in registers with no atomics, 6-bit digits after the top byte, and
the keys still in question copied to the row's scratch words once they fit.

The portable path (Ascend; the interpreter unless kernel_path is "fast") counts with a one-hot
compare and sum and gathers with one program a row, ranking by a masked sum: triton-ascend is
not known to lower ``tl.histogram``, and 3.2.0 does not lower a scalar atomic whose old value
is used.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._checks import LaunchPlan, cdiv, is_interpret, launch, on_ascend, use_fast_path
from ._split import last_to_arrive

RADIX_BITS = 8
RADIX = 1 << RADIX_BITS
PASSES = 32 // RADIX_BITS
#: int32 words of one row's workspace: PASSES histograms, then the two gather counters (above
#: the threshold, equal to it), padded to keep rows 128-byte aligned.
WS_COUNTERS = PASSES * RADIX
WS_ROW = PASSES * RADIX + 32
#: One program a row (``_radix_select_rows``): scratch words after the chain's, for the keys
#: still in question once they are this few, and their positions.
ROW_SCRATCH = 4096
WS_WORDS = WS_ROW + 2 * ROW_SCRATCH
#: The gather's done tickets (fast path), after the two counters.
WS_DONE = WS_COUNTERS + 2
#: Words a program clears per step.
CLEAR_BLOCK = 512


@triton.jit
def order_key(x):
    """fp32 -> int32 with the same order as signed ints (a positive NaN sorts above +inf, as in
    torch.topk): non-negative floats keep their bits, negative ones flip their magnitude bits."""
    bits = x.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def key_digit(key, PASS: tl.constexpr, RADIX_BITS: tl.constexpr):
    """Byte PASS (0 = most significant) of ``key`` read as unsigned (the sign bit flipped)."""
    d = (key >> (32 - RADIX_BITS * (PASS + 1))) & ((1 << RADIX_BITS) - 1)
    if PASS == 0:
        d = d ^ (1 << (RADIX_BITS - 1))
    return d


@triton.jit
def count_digits(d, HBINS: tl.constexpr, HISTOGRAM: tl.constexpr):
    """Counts of the values 0 .. HBINS-1 (= RADIX) in the 1-d tile ``d``; a value >= HBINS is a
    key that takes no part. ``tl.histogram`` takes those out by its mask: its ballot lowering
    (Triton 3.6) folds bin indices to log2(HBINS) bits, and each bin more costs every element."""
    if HISTOGRAM:
        c = tl.histogram(d, HBINS, mask=d < HBINS)
    else:
        c = tl.sum((d[:, None] == tl.arange(0, HBINS)[None, :]).to(tl.int32), 0)
    return c


@triton.jit
def flush_counts(WS_HIST, counts, HBINS: tl.constexpr, HISTOGRAM: tl.constexpr):
    """Adds a program's counts to the row's histogram: the bins it saw on the fast path; every
    bin on the portable path (triton-ascend rc2 does not lower a masked vector atomic)."""
    bins = tl.arange(0, HBINS)
    if HISTOGRAM:
        tl.atomic_add(WS_HIST + bins, counts, mask=counts > 0)
    else:
        tl.atomic_add(WS_HIST + bins, counts)


@triton.jit
def select_state(WS_ROW_PTR, need, UPTO: tl.constexpr, RADIX: tl.constexpr, RADIX_BITS: tl.constexpr):
    """(the top UPTO bytes of the k-th largest key as an int32 bit pattern, how many of the keys
    sharing them are still to take) from the first UPTO histograms; ``need`` = min(topk, seq_len)
    >= 1 on entry. A histogram is read as a [16, 16] tile (bin = 16 * row + column) and its
    suffix sums taken by masked sums, not ``tl.cumsum`` (triton-ascend rc2 does not lower it)."""
    SIDE: tl.constexpr = 1 << (RADIX_BITS // 2)
    r = tl.arange(0, SIDE)
    bins = r[:, None] * SIDE + r[None, :]
    prefix = need * 0
    for p in tl.static_range(UPTO):
        h = tl.load(WS_ROW_PTR + p * RADIX + bins)
        rows = tl.sum(h, 1)
        rows_above = tl.sum(tl.where(r[None, :] > r[:, None], rows[None, :], 0), 1)
        in_row = tl.sum(tl.where(r[None, None, :] >= r[None, :, None], h[:, None, :], 0), 2)
        at_or_above = rows_above[:, None] + in_row          # keys with this byte or a larger one
        d = tl.max(tl.max(tl.where(at_or_above >= need, bins, -1), 1), 0)
        need = need - tl.sum(tl.sum(tl.where(bins > d, h, 0), 1), 0)
        if p == 0:
            d = d ^ (RADIX // 2)
        prefix = (prefix << RADIX_BITS) | d
    return prefix, need


@triton.jit
def ranks_before(flags, BLOCK: tl.constexpr, CUMSUM: tl.constexpr):
    """Exclusive prefix count of a 0/1 int32 tile: ``tl.cumsum`` on the fast path, a
    [BLOCK, BLOCK] masked sum on the portable one (triton-ascend rc2 does not lower cumsum)."""
    if CUMSUM:
        rank = tl.cumsum(flags, 0) - flags
    else:
        i = tl.arange(0, BLOCK)
        rank = tl.sum(tl.where(i[None, :] < i[:, None], flags[None, :], 0), 1)
    return rank


@triton.jit(do_not_specialize=["N", "topk"])
def _radix_count(LOGITS, SEQ, WS, stride_lb, stride_wb, N, topk,
                 PASS: tl.constexpr, BLOCK: tl.constexpr, RADIX: tl.constexpr, RADIX_BITS: tl.constexpr,
                 HBINS: tl.constexpr, HISTOGRAM: tl.constexpr):
    """Pass PASS: the histogram of byte PASS among the row's keys that match the bytes found
    (pass 0, all of them, is usually counted by the producer of the logits instead)."""
    b = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    n_prog = tl.num_programs(1)
    seq_len = tl.maximum(tl.minimum(tl.load(SEQ + b), N), 0)
    n = tl.minimum(seq_len, topk)
    if n > 0:
        ws = WS + b * stride_wb
        prefix, need = select_state(ws, n, PASS, RADIX, RADIX_BITS)
        high = 32 - RADIX_BITS * PASS
        counts = tl.zeros([HBINS], dtype=tl.int32)
        for start in range(g * BLOCK, seq_len, n_prog * BLOCK):
            j = start + tl.arange(0, BLOCK)
            ok = j < seq_len
            key = order_key(tl.load(LOGITS + b * stride_lb + j, mask=ok, other=0.0))
            if PASS == 0:
                match = ok
            else:
                match = ok & (((key >> high) & ((1 << (RADIX_BITS * PASS)) - 1)) == prefix)
            d = tl.where(match, key_digit(key, PASS, RADIX_BITS), RADIX)
            counts += count_digits(d, HBINS, HISTOGRAM)
        flush_counts(ws + PASS * RADIX, counts, HBINS, HISTOGRAM)


@triton.jit
def clear_row(WS_ROW_PTR, WORDS: tl.constexpr, CLEAR_BLOCK: tl.constexpr):
    """Zeroes a row's WORDS workspace words."""
    for start in tl.static_range(0, WORDS, CLEAR_BLOCK):
        offs = start + tl.arange(0, CLEAR_BLOCK)
        tl.store(WS_ROW_PTR + offs, tl.zeros([CLEAR_BLOCK], dtype=tl.int32), mask=offs < WORDS)


@triton.jit(do_not_specialize=["N", "topk"])
def _radix_gather(LOGITS, SEQ, WS, OUT, stride_lb, stride_wb, stride_ob, N, topk,
                  BLOCK: tl.constexpr, RADIX: tl.constexpr, RADIX_BITS: tl.constexpr, PASSES: tl.constexpr,
                  COUNTERS: tl.constexpr, DONE: tl.constexpr, WORDS: tl.constexpr, CLEAR_BLOCK: tl.constexpr,
                  FAST: tl.constexpr):
    """The chosen positions into OUT[b, :n] (order unspecified), -1 into OUT[b, n:topk]. FAST:
    any number of programs a row, slots by atomic tickets, ranks by ``tl.cumsum``; else one
    program a row (the portable path). Either way the row's WORDS workspace words are zero
    again when the launch ends: cleared by the one program of the row, or on the fast path by
    the row's program that takes the last done ticket (the barrier and the acq_rel atomic order
    every program's workspace reads before its ticket)."""
    b = tl.program_id(0).to(tl.int64)
    g = tl.program_id(1)
    n_prog = tl.num_programs(1)
    # Clamped: with the data checks off, a seq_len outside [0, N] must not move a store out of OUT.
    seq_len = tl.maximum(tl.minimum(tl.load(SEQ + b), N), 0)
    n = tl.minimum(seq_len, topk)
    out = OUT + b * stride_ob
    offs = tl.arange(0, BLOCK)
    for s in range(n + g * BLOCK, topk, n_prog * BLOCK):
        tl.store(out + s + offs, tl.full([BLOCK], -1, tl.int32), mask=s + offs < topk)
    if n > 0:
        ws = WS + b * stride_wb
        thr, need = select_state(ws, n, PASSES, RADIX, RADIX_BITS)
        above = n - need                      # keys above thr: all taken, slots [0, above)
        base_gt = n * 0
        base_eq = n * 0
        for start in range(g * BLOCK, seq_len, n_prog * BLOCK):
            j = start + offs
            ok = j < seq_len
            key = order_key(tl.load(LOGITS + b * stride_lb + j, mask=ok, other=0.0))
            gt = (ok & (key > thr)).to(tl.int32)
            eq = (ok & (key == thr)).to(tl.int32)
            if FAST:
                # The row's programs take slots by atomic tickets, both in one two-lane atomic
                # (one round trip).
                pair = tl.arange(0, 2)
                old = tl.atomic_add(ws + COUNTERS + pair, tl.where(pair == 0, tl.sum(gt, 0), tl.sum(eq, 0)))
                at_gt = tl.sum(tl.where(pair == 0, old, 0), 0)
                at_eq = tl.sum(tl.where(pair == 1, old, 0), 0)
            else:
                # One program a row: running counts.
                at_gt = base_gt
                at_eq = base_eq
                base_gt += tl.sum(gt, 0)
                base_eq += tl.sum(eq, 0)
            tl.store(out + at_gt + ranks_before(gt, BLOCK, FAST), j, mask=gt > 0)
            slot = at_eq + ranks_before(eq, BLOCK, FAST)
            tl.store(out + above + slot, j, mask=(eq > 0) & (slot < need))
    ws_row = WS + b * stride_wb
    if FAST:
        if last_to_arrive(ws_row + DONE, n_prog):
            clear_row(ws_row, WORDS, CLEAR_BLOCK)
    else:
        # One program a row: its reads of the workspace all fed the reductions above, which every
        # thread of the program has passed.
        clear_row(ws_row, WORDS, CLEAR_BLOCK)


@triton.jit
def pick_digit(counts, need, BINS: tl.constexpr):
    """(the digit of the k-th largest key, how many keys with that digit are still to take, how
    many keys have it) from one program's counts of the matching keys' digits; 1 <= ``need`` <=
    the counts' sum on entry. The fast path's own suffix sums by ``tl.cumsum``."""
    bins = tl.arange(0, BINS)
    at_or_above = tl.sum(counts, 0) - tl.cumsum(counts, 0) + counts
    d = tl.max(tl.where(at_or_above >= need, bins, -1), 0)
    above = tl.sum(tl.where(bins > d, counts, 0), 0)
    return d, need - above, tl.sum(tl.where(bins == d, counts, 0), 0)


@triton.jit
def count_digit(SRC, length, shift, prefix, KEYS: tl.constexpr, BLOCK: tl.constexpr, DIGIT_BITS: tl.constexpr):
    """Counts of the digit at bit ``shift`` among the keys of SRC[:length] whose bits above it
    are ``prefix`` (signed, as ``key >> (shift + DIGIT_BITS)`` reads them): SRC holds the
    row's fp32 logits, or (KEYS) int32 keys."""
    BINS: tl.constexpr = 1 << DIGIT_BITS
    offs = tl.arange(0, BLOCK)
    c = tl.zeros([BINS], dtype=tl.int32)
    for start in range(0, length, BLOCK):
        j = start + offs
        ok = j < length
        if KEYS:
            key = tl.load(SRC + j, mask=ok, other=0)
        else:
            key = order_key(tl.load(SRC + j, mask=ok, other=0.0))
        match = ok & ((key >> (shift + DIGIT_BITS)) == prefix)
        d = tl.where(match, (key >> shift) & (BINS - 1), BINS)
        c += tl.histogram(d, BINS, mask=d < BINS)
    return c


@triton.jit
def gather_keys(SRC, POS, length, shift, prefix, out, gt_at, eq_at, need, KEYS: tl.constexpr, BLOCK: tl.constexpr):
    """Of the keys at SRC[:length] (fp32 logits at positions 0..; or, KEYS, int32 keys with their
    positions at POS), writes the positions of those whose top bits (key >> shift) exceed
    ``prefix`` to out[gt_at:] and of the first ``need`` equal to it to out[eq_at:], in scan
    order. One scan ranks both (16 bits each: BLOCK < 2**16)."""
    offs = tl.arange(0, BLOCK)
    base_gt = length * 0
    base_eq = length * 0
    for start in range(0, length, BLOCK):
        j = start + offs
        ok = j < length
        if KEYS:
            key = tl.load(SRC + j, mask=ok, other=0)
            pos = tl.load(POS + j, mask=ok, other=0)
        else:
            key = order_key(tl.load(SRC + j, mask=ok, other=0.0))
            pos = j
        hi = key >> shift
        gt = (ok & (hi > prefix)).to(tl.int32)
        eq = (ok & (hi == prefix)).to(tl.int32)
        both = gt | (eq << 16)
        rank = tl.cumsum(both, 0) - both
        tl.store(out + gt_at + base_gt + (rank & 0xFFFF), pos, mask=gt > 0)
        slot = base_eq + (rank >> 16)
        tl.store(out + eq_at + slot, pos, mask=(eq > 0) & (slot < need))
        total = tl.sum(both, 0)
        base_gt += total & 0xFFFF
        base_eq += total >> 16
    return base_gt


@triton.jit(do_not_specialize=["N", "topk"])
def _radix_select_rows(LOGITS, SEQ, WS, OUT, stride_lb, stride_wb, stride_ob, N, topk,
                       COUNT_TOP: tl.constexpr, BLOCK: tl.constexpr, DIGIT_BITS: tl.constexpr,
                       SCRATCH: tl.constexpr, CAP: tl.constexpr, RADIX: tl.constexpr, RADIX_BITS: tl.constexpr):
    """The whole selection of row b in program b (the CUDA fast path for rows one SM reads fast):
    the top byte's counts from the producer's histogram in WS (COUNT_TOP: counted here), the
    remaining 24 bits DIGIT_BITS at a time, counted in registers (no atomics: the program sees
    every key of its row), then the gather with running slots.

    A pass over the row costs its counting and scans, so once the keys still in question (those
    sharing the digits found) are at most CAP, one pass writes the positions of the keys above
    them to OUT and copies them, with their positions, to the row's scratch words (CAP keys at
    WS + SCRATCH, then CAP positions); the later passes and the gather read those alone. A digit
    whose keys are all taken ends the passes early: the gather compares the keys' top bits (an
    arithmetic shift keeps the signed order). WS is left zero: the top byte's histogram and the
    scratch words are cleared."""
    b = tl.program_id(0).to(tl.int64)
    seq_len = tl.maximum(tl.minimum(tl.load(SEQ + b), N), 0)
    n = tl.minimum(seq_len, topk)
    row = LOGITS + b * stride_lb
    ws = WS + b * stride_wb
    keys = ws + SCRATCH
    positions = keys + CAP
    out = OUT + b * stride_ob
    offs = tl.arange(0, BLOCK)
    for s in range(n, topk, BLOCK):
        tl.store(out + s + offs, tl.full([BLOCK], -1, tl.int32), mask=s + offs < topk)
    top_bins = tl.arange(0, RADIX)
    if n > 0:
        if COUNT_TOP:
            counts = tl.zeros([RADIX], dtype=tl.int32)
            for start in range(0, seq_len, BLOCK):
                j = start + offs
                ok = j < seq_len
                key = order_key(tl.load(row + j, mask=ok, other=0.0))
                d = tl.where(ok, key_digit(key, 0, RADIX_BITS), RADIX)
                counts += tl.histogram(d, RADIX, mask=d < RADIX)
        else:
            counts = tl.load(ws + top_bins)
        d, need, bucket = pick_digit(counts, n, RADIX)
        prefix = d - RADIX // 2          # the signed top byte: key >> 24 of the keys in the bucket
        shift = n * 0 + (32 - RADIX_BITS)
        kept = n * 0                     # keys in the scratch words (0: the passes read the row)
        taken = n * 0                    # positions the copying pass wrote to OUT
        for p in tl.static_range((32 - RADIX_BITS) // DIGIT_BITS):
            if need < bucket:
                if (kept == 0) & (bucket <= CAP):
                    for start in range(0, seq_len, BLOCK):
                        j = start + offs
                        ok = j < seq_len
                        hi = order_key(tl.load(row + j, mask=ok, other=0.0))
                        gt = (ok & ((hi >> shift) > prefix)).to(tl.int32)
                        eq = (ok & ((hi >> shift) == prefix)).to(tl.int32)
                        both = gt | (eq << 16)
                        rank = tl.cumsum(both, 0) - both
                        tl.store(out + taken + (rank & 0xFFFF), j, mask=gt > 0)
                        slot = kept + (rank >> 16)
                        copy = (eq > 0) & (slot < CAP)    # (at most CAP: the caller's count)
                        tl.store(keys + slot, hi, mask=copy)
                        tl.store(positions + slot, j, mask=copy)
                        total = tl.sum(both, 0)
                        taken += total & 0xFFFF
                        kept += total >> 16
                    kept = tl.minimum(kept, CAP)   # (the same: a bound for the reads below)
                    tl.debug_barrier()       # the copies visible to every thread of the program
                shift -= DIGIT_BITS
                if kept > 0:
                    c = count_digit(keys, kept, shift, prefix, True, BLOCK, DIGIT_BITS)
                else:
                    c = count_digit(row, seq_len, shift, prefix, False, BLOCK, DIGIT_BITS)
                d, need, bucket = pick_digit(c, need, 1 << DIGIT_BITS)
                prefix = (prefix << DIGIT_BITS) | d
        # The keys above the prefix fill slots [0, n - need) (``taken`` of them already there),
        # the first ``need`` of those equal to it the rest.
        if kept > 0:
            gather_keys(keys, positions, kept, shift, prefix, out, taken, n - need, need, True, BLOCK)
        else:
            gather_keys(row, row, seq_len, shift, prefix, out, taken, n - need, need, False, BLOCK)
        tl.debug_barrier()                   # every read of the scratch words done
        for s in range(0, kept, BLOCK):
            zero = tl.zeros([BLOCK], dtype=tl.int32)
            tl.store(keys + s + offs, zero, mask=s + offs < kept)
            tl.store(positions + s + offs, zero, mask=s + offs < kept)
    if not COUNT_TOP:
        # Every read of these words fed the reductions above, which all threads have passed.
        tl.store(ws + top_bins, tl.zeros([RADIX], dtype=tl.int32))


def select_config(t: torch.Tensor) -> dict:
    """Tile of the pass and gather launches for tensors like ``t``: ``tl.histogram`` on the CUDA
    fast path (``use_fast_path``; the interpreter runs it too under kernel_path "fast"), the
    one-hot count elsewhere."""
    histogram = use_fast_path(t)
    if on_ascend(t):
        block = 32          # the one-hot [BLOCK, 256] int32 compare stays a small part of the UB
    elif histogram or is_interpret():
        block = 1024
    else:
        block = 64          # one-hot on a GPU: [64, 256] a step
    # The gather's ranks: tl.cumsum on the fast path, a [BLOCK, BLOCK] masked sum elsewhere.
    gather = 1024 if histogram else (256 if is_interpret() else 32 if on_ascend(t) else 64)
    # One program a row (fast path): 16 warps, 4096 keys a step, 6-bit digits after the top byte
    # (Triton 3.6 counts by ballots, one per bin bit, then a popcount per bin a thread owns: on
    # sm_90 a 64-bin step of 4096 keys is 429 instructions a thread against 707 for 256 bins:
    # four passes of 6 bits cost less than three of 8).
    return dict(BLOCK=block, GATHER_BLOCK=gather, HISTOGRAM=histogram, HBINS=RADIX,
                ROW_BLOCK=4096, ROW_WARPS=16, DIGIT_BITS=6, ROW_CAP=ROW_SCRATCH)


#: Longest row (logits capacity N) the fast path selects in one program a row; longer rows take
#: the chain of passes spread over many programs a row (one program's digit counting and scans
#: bound it). Measured on an H200, the whole indexer call at the bench shapes: one program a row
#: 22.7 us at 8k tokens against 31.4 for the chain, 57.5 against 33.9 at 32k, 181 against 45 at
#: 128k (docs/hardware-log.md); the two cross near 14k.
ROW_PROGRAM_MAX_N = 12288


def one_program_a_row(N: int, cfg: dict) -> bool:
    """Whether the selection of rows of N logits is one launch of one program a row: on the fast
    path (``tl.histogram``, ``tl.cumsum``) for rows up to ``ROW_PROGRAM_MAX_N``."""
    return bool(cfg["HISTOGRAM"]) and N <= ROW_PROGRAM_MAX_N


def workspace(B: int, device) -> torch.Tensor:
    """The zeroed histograms, counters and scratch words of B rows (the launches leave them zero)."""
    return torch.zeros((B, WS_WORDS), dtype=torch.int32, device=device)


def select_plans(logits: torch.Tensor, seq_lens: torch.Tensor, topk: int, out: torch.Tensor, ws: torch.Tensor,
                 grid: tuple, cfg: dict, first_pass: int = 1) -> tuple[LaunchPlan, LaunchPlan]:
    """(first, last) of the chained launches of passes ``first_pass``..3 and the gather; a
    producer that counted pass 0 itself starts at 1. Where ``one_program_a_row`` says so, both
    are the one launch of ``_radix_select_rows`` (grid (B,)) instead."""
    N = logits.shape[1]
    if one_program_a_row(N, cfg):
        assert cfg["ROW_BLOCK"] < 1 << 16, "a step's two ranks share one int32 scan, 16 bits each"
        plan = LaunchPlan(kernel=_radix_select_rows, grid=(logits.shape[0],),
                          args=(logits, seq_lens, ws, out, logits.stride(0), ws.stride(0), out.stride(0), N, topk),
                          meta=dict(COUNT_TOP=first_pass == 0, BLOCK=cfg["ROW_BLOCK"], DIGIT_BITS=cfg["DIGIT_BITS"],
                                    SCRATCH=WS_ROW, CAP=min(cfg["ROW_CAP"], ROW_SCRATCH),
                                    RADIX=RADIX, RADIX_BITS=RADIX_BITS, num_warps=cfg["ROW_WARPS"]))
        return plan, plan
    radix = dict(RADIX=RADIX, RADIX_BITS=RADIX_BITS, HBINS=cfg["HBINS"], HISTOGRAM=cfg["HISTOGRAM"])
    plans = [LaunchPlan(kernel=_radix_count, grid=grid,
                        args=(logits, seq_lens, ws, logits.stride(0), ws.stride(0), N, topk),
                        meta=dict(PASS=p, BLOCK=cfg["BLOCK"], num_warps=4, **radix))
             for p in range(first_pass, PASSES)]
    plans.append(LaunchPlan(kernel=_radix_gather, grid=grid if cfg["HISTOGRAM"] else (grid[0], 1),
                            args=(logits, seq_lens, ws, out, logits.stride(0), ws.stride(0), out.stride(0), N,
                                  topk),
                            meta=dict(BLOCK=cfg["GATHER_BLOCK"], RADIX=RADIX, RADIX_BITS=RADIX_BITS, PASSES=PASSES,
                                      COUNTERS=WS_COUNTERS, DONE=WS_DONE, WORDS=WS_ROW, CLEAR_BLOCK=CLEAR_BLOCK,
                                      FAST=cfg["HISTOGRAM"], num_warps=4)))
    for a, b in zip(plans, plans[1:]):
        a.then = b
    return plans[0], plans[-1]


def radix_topk(logits: torch.Tensor, seq_lens: torch.Tensor, topk: int, out: torch.Tensor,
               programs_per_row: int = 4, ws: torch.Tensor | None = None) -> torch.Tensor:
    """The top ``topk`` of ``logits[b, :seq_lens[b]]`` (fp32 [B, N], row stride any, unit column
    stride) as positions into ``out`` [B, topk] int32, -1 past min(topk, seq_len): all four
    passes and the gather here. For inputs the caller has checked. ``programs_per_row``: the
    chain's (rows ``one_program_a_row`` takes have one). ``ws``: a zeroed ``workspace(B,
    device)`` to use (it is zero again afterwards), else a fresh one."""
    B, N = logits.shape
    cfg = select_config(logits)
    grid = (B, max(1, min(programs_per_row, cdiv(N, cfg["BLOCK"]))))
    ws = workspace(B, logits.device) if ws is None else ws
    first, _ = select_plans(logits, seq_lens, int(topk), out, ws, grid, cfg, first_pass=0)
    launch(first)
    return out
