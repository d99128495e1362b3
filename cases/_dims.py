"""Dimensions of the legal input space that every family's catalog crosses with its own cases
(docs/contract.md, "Contract details every implementation is held to"):

* memory layout (``view``): inputs that are legal views of larger buffers, innermost stride 1,
  with NaN (or, for index arrays, stale in-range entries) in the rest of the storage, so an
  implementation that reads a view as if it were contiguous computes garbage and fails;
* values (``vals``): distributions that stress accumulation and the online softmax rather than
  zero-mean noise;
* sizes: lengths that leave every residue of a tile partially filled, and lengths past the
  split-KV thresholds.

A case names its point on a dimension with a parameter whose default (``contig``, ``randn``) the
family's label omits, so case ids that predate a dimension never change. The fuzz profile draws
from the same dimensions (``draw_*``).
"""
from __future__ import annotations

import math

import torch

CONTIG = "contig"
RANDN = "randn"

# --- values ----------------------------------------------------------------------------------

#: V plus a large common offset: every output is ~V_OFFSET, so an accumulator with fewer bits
#: than fp32 loses digits that zero-mean V (outputs near 0) never exposes.
V_OFFSET = 32.0
#: Keys a row reaches in the last quarter of its processing order are scaled by LATE_SCALE:
#: their scores spread ~LATE_SCALE times wider, so the row max arrives late and is far above
#: the early tiles' max (a stale running max overflows exp or mis-weights the early tiles).
LATE_SCALE = 8.0
LATE_FRACTION = 0.75
#: q scaled by LARGE_SCALE: scores of standard deviation ~64, past exp's fp32 range (88.7) in
#: most rows, so an exponent taken without subtracting the row max overflows even in fp32.
LARGE_SCALE = 64.0
#: offset: V + V_OFFSET; cancel: see ``cancel_values``; late: see LATE_SCALE; large: see LARGE_SCALE.
VALUES = ("offset", "cancel", "late", "large")
#: Score ranges at the edges of the exponent (see ``shift_scores``): neg100, every score of every
#: row far below 0, centred at -104 so that row maxima sit around -100 (a running max clamped at 0,
#: or started at 0, takes exp of scores past fp32's smallest subnormal, e^-103, and gets 0); pm80,
#: rows alternately near -80 and +80 in one launch (a max shared by several rows leaves the low
#: rows with exp(-160) == 0). zeros: zero vectors (see ``ZERO_EVERY``).
EXTREMES = ("neg100", "pm80", "zeros")
#: Score levels of the extreme distributions: (sign of even rows, sign of odd rows) x SHIFT.
SHIFTS = {"neg100": (104.0, (-1.0, -1.0)), "pm80": (80.0, (-1.0, 1.0)), "neg130": (130.0, (-1.0, -1.0))}
#: Scores of every row centred at -130: the LSE of each split of a split-KV kernel (up to 512 keys
#: of noise ~1 around -130: about -123), not only each row's max, lies below fp32's smallest
#: subnormal (e^-103.3), so a merge that weights the partial results by e^(lse_i - m) with m
#: clamped at 0, or by e^lse_i, gets 0 / 0 even in the interpreter (neg100's partial LSEs, about
#: -94, are subnormal: a GPU flushes them, the interpreter does not). Meant for lengths past the
#: split threshold (SPLIT_LENGTHS).
SPLIT_EXTREME = "neg130"
#: zeros: the keys (and values) of every ZERO_EVERY-th token, from ZERO_FIRST, are all-zero (cache
#: slots filled with zeros), and the query of the first row (batch 0, head 0) is all-zero: a
#: cosine without its epsilon (MagicPIG) or a normalisation by a norm divides 0 by 0.
ZERO_EVERY, ZERO_FIRST = 5, 2

# --- softmax scale -----------------------------------------------------------------------------

#: Softmax scales other than the default 1/sqrt(D) (docs/contract.md, "Softmax scale"), by name: mla,
#: below the default (1/sqrt(192) at D = 128: MLA's query-key dim over its value dim); hot, above
#: it (a temperature folded into the scale); one, 1.0 (no scaling at all); neg, -1/sqrt(D) (the
#: row max of the scaled scores is the minimum of q.k: a kernel that takes the max before scaling
#: exponentiates scores far above its "max"); zero, 0.0 (every score 0: a uniform average of V,
#: and a scale a kernel may take for "not given").
SCALES = {"mla": lambda D: 1.0 / math.sqrt(1.5 * D), "hot": lambda D: 4.0 / math.sqrt(D),
          "one": lambda D: 1.0, "neg": lambda D: -1.0 / math.sqrt(D), "zero": lambda D: 0.0}
#: The scales of the catalogs' sign cases, each with the value distribution it is meant to meet:
#: a negative scale over scores of standard deviation ~64 (a max taken before scaling overflows
#: exp), and a zero scale over plain noise.
SIGNED_SCALES = (("neg", "large"), ("zero", RANDN))


def pairwise_legal(row) -> bool:
    """Whether a partial row of a pairwise crossing (attnsuite/pairwise.py) names a case that means
    what its parameters say: a zero scale makes every score 0, so it has no score range to shift."""
    return not (row.get("scale") == "zero" and row.get("vals") in SHIFTS)


def case_scale(params, D: int | None = None):
    """The scale a case passes (None: the default, which implementations resolve to 1/sqrt(D)).
    ``params``: a Case or its parameter dict; ``D`` defaults to the case's ``D``."""
    p = getattr(params, "params", params)
    name = p.get("scale")
    if name is None:
        return None
    if isinstance(name, (int, float)):  # a number as given (a FlashInfer-Trace workload's sm_scale)
        return float(name)
    return SCALES[name](p["D"] if D is None else D)


def effective_scale(params, D: int) -> float:
    s = case_scale(params, D)
    return 1.0 / math.sqrt(D) if s is None else s


def scale_label(p) -> str:
    return f"-scale_{p['scale']}" if p.get("scale") else ""


def values_label(p) -> str:
    vals = p.get("vals", RANDN)
    return "" if vals == RANDN else f"-vals_{vals}"


def view_label(p) -> str:
    view = p.get("view", CONTIG)
    return "" if view == CONTIG else f"-view_{view}"


def dims_label(p) -> str:
    """The label suffix of the shared dimensions (empty at their defaults)."""
    return view_label(p) + values_label(p) + scale_label(p)


def offset_values(v: torch.Tensor) -> torch.Tensor:
    return (v.float() + V_OFFSET).to(v.dtype)


def cancel_values(v: torch.Tensor, second_half: torch.Tensor) -> torch.Tensor:
    """v [..., N, D] plus V_OFFSET where ``second_half`` [..., N] (broadcastable) is False, minus
    it where True: with the first half of a row's keys met first, the running sum climbs far from
    the output before it cancels, so a low-precision accumulator errs by a multiple of what the
    output's own rounding allows (a common offset raises both alike, and the tolerance with them)."""
    sign = torch.where(second_half, -1.0, 1.0).to(torch.float32)
    return (v.float() + V_OFFSET * sign.unsqueeze(-1)).to(v.dtype)


def second_half(positions: torch.Tensor, lengths) -> torch.Tensor:
    """True where a position lies in the second half of its row's length (broadcasting)."""
    lengths = torch.as_tensor(lengths, dtype=torch.float64).to(positions.device)
    return positions >= torch.ceil(lengths / 2).to(positions.dtype)


def large_queries(q: torch.Tensor) -> torch.Tensor:
    return (q.float() * LARGE_SCALE).to(q.dtype)


def late_mask(positions: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """True where a position lies in the last quarter of its row's length (broadcasting)."""
    lengths = torch.as_tensor(lengths, dtype=torch.float64).to(positions.device)
    return positions >= torch.ceil(lengths * LATE_FRACTION).to(positions.dtype)


def scale_late(k: torch.Tensor, late: torch.Tensor) -> torch.Tensor:
    """k [..., N, D] with the rows where ``late`` [..., N] (broadcastable) scaled by LATE_SCALE."""
    factor = torch.where(late, LATE_SCALE, 1.0).to(torch.float32)
    return (k.float() * factor.unsqueeze(-1)).to(k.dtype)


def listed_last(vals: str, ind: torch.Tensor, nnz: torch.Tensor, lengths) -> torch.Tensor:
    """Index rows reordered for a value distribution tied to positions (``late``, ``cancel``):
    the marked tokens listed last, so a row meets them in the order a contiguous row would.
    ``lengths`` broadcasts against ``ind`` (each row's sequence length)."""
    if vals == "late":
        return late_last(ind, nnz, late_mask(ind, lengths))
    if vals == "cancel":
        return late_last(ind, nnz, second_half(ind, lengths))
    return ind


def shift_scores(vals: str, q: torch.Tensor, k: torch.Tensor, scale: float, low_extra: float = 0.0) -> tuple:
    """(q, k) with every score ``scale * q.k`` moved to about -SHIFT (or +SHIFT on the odd rows of
    ``pm80``), row r = b * H + h of q [B, H, ..., D]; keys [..., D]. Along the unit diagonal e the
    keys get -a e and the query rows +-(SHIFT / (a scale)) e, a = sqrt(SHIFT / scale); the noise is
    first made orthogonal to e and scaled by 1 / sqrt(scale sqrt(D)), so whatever the scale each
    score is -+SHIFT plus zero-mean noise of standard deviation ~1 (softmax not one-hot, no cross
    terms). ``low_extra`` moves the rows that go down by that much more (MagicPIG adds up to
    -log(1e-10) = 23 to the scores of keys anti-parallel to the query)."""
    shift, signs = SHIFTS[vals]
    if scale == 0:
        return q, k  # every score is 0 whatever q and k: no range to move them to
    D = q.shape[-1]
    e = torch.full((D,), 1.0 / math.sqrt(D))
    # |scale| sizes the vectors; the sign of the scale goes into coef (a negative scale moves
    # q to the other side of the keys' diagonal).
    f = 1.0 / math.sqrt(abs(scale) * math.sqrt(D))
    a = math.sqrt(shift / abs(scale))
    B, H = q.shape[0], q.shape[1]
    row = torch.arange(B * H).view(B, H)
    down = torch.where(row % 2 == 0, signs[0], signs[1]) < 0          # rows whose scores go to -SHIFT
    level = torch.where(down, shift + low_extra, -shift).to(torch.float32)
    coef = (level / (a * scale)).view(B, H, *([1] * (q.dim() - 2)))   # q.e: score = -coef * a * scale

    def noise(x):  # q and k may lie on different devices (either is drawn on the run's device when bulk)
        x, u = x.float(), e.to(x.device)
        return f * (x - (x @ u)[..., None] * u)

    q = (noise(q) + (coef * e).to(q.device)).to(q.dtype)
    k = (noise(k) - a * e.to(k.device)).to(k.dtype)
    return q, k


def zero_query(q: torch.Tensor) -> torch.Tensor:
    q = q.clone()
    q[:1, :1] = 0  # a slice: a draw may have no query row at all
    return q


def dense_values(vals: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 lengths: torch.Tensor | None = None, scale: float | None = None) -> tuple:
    """(q, k, v) of [B, H, S, D] tensors drawn as zero-mean noise, moved to distribution ``vals``.
    ``lengths`` [B] (default S): where each batch's keys end, for ``late`` and ``cancel``;
    ``scale`` the case's softmax scale (default 1/sqrt(D)), for the score shifts."""
    if vals == RANDN:
        return q, k, v
    if vals in SHIFTS:
        q, k = shift_scores(vals, q, k, 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
        return q, k, v
    if vals == "zeros":
        k, v = k.clone(), v.clone()
        k[..., ZERO_FIRST::ZERO_EVERY, :] = 0
        v[..., ZERO_FIRST::ZERO_EVERY, :] = 0
        return zero_query(q), k, v
    if vals == "offset":
        return q, k, offset_values(v)
    if vals == "large":
        return large_queries(q), k, v
    S = k.shape[-2]
    lens = (torch.full((k.shape[0],), S) if lengths is None else torch.as_tensor(lengths)).view(-1, 1, 1)
    positions = torch.arange(S, device=k.device)[None, None, :]
    if vals == "cancel":
        return q, k, cancel_values(v, second_half(positions, lens))
    if vals == "late":
        return q, scale_late(k, late_mask(positions, lens)), v
    raise ValueError(f"unknown value distribution {vals!r}")


def paged_values(vals: str, q: torch.Tensor, cache: torch.Tensor, layout: str, positions: torch.Tensor,
                 lengths: torch.Tensor, scale: float | None = None, low_extra: float = 0.0) -> tuple:
    """(q [B, Hq, D], paged cache) moved to distribution ``vals``; ``positions`` / ``lengths``
    [pages, P] give each slot's logical position and its sequence's length (-1 / 0: no token);
    ``scale`` the case's softmax scale (default 1/sqrt(D)), and ``low_extra``, for the score shifts."""
    if vals == RANDN:
        return q, cache
    if vals == "large":
        return large_queries(q), cache
    cache = cache.clone()
    positions, lengths = positions.to(cache.device), lengths.to(cache.device)
    hnd = cache if layout == "HND" else cache.transpose(2, 3)          # [pages, 2, Hkv, P, D]
    if vals in SHIFTS:
        q, hnd[:, 0] = shift_scores(vals, q, hnd[:, 0], 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale,
                                    low_extra)
    elif vals == "zeros":
        zero = (positions >= 0) & (positions % ZERO_EVERY == ZERO_FIRST)  # [pages, P]
        hnd.masked_fill_(zero[:, None, None, :, None], 0)
        q = zero_query(q)
    elif vals == "offset":
        hnd[:, 1] = offset_values(hnd[:, 1])
    elif vals == "cancel":
        hnd[:, 1] = cancel_values(hnd[:, 1], second_half(positions, lengths)[:, None, :])
    elif vals == "late":
        late = (positions >= 0) & late_mask(positions, lengths)           # [pages, P]
        hnd[:, 0] = scale_late(hnd[:, 0], late[:, None, :])
    else:
        raise ValueError(f"unknown value distribution {vals!r}")
    return q, cache


def late_last(ind: torch.Tensor, nnz: torch.Tensor, late: torch.Tensor) -> torch.Tensor:
    """Index rows [..., L] with each row's first ``nnz`` entries stably reordered so the ones
    where ``late`` (shaped like ``ind``) come last: the keys a value distribution marks as late
    (``late``'s scaled keys, ``cancel``'s second half) are the last a row reaches. Entries past
    nnz keep their place and content."""
    slot = torch.arange(ind.shape[-1])
    valid = slot < nnz.unsqueeze(-1)
    key = torch.where(valid, late.to(torch.int64), 2)
    order = torch.sort(key, dim=-1, stable=True).indices
    return torch.gather(ind, -1, order)


# --- memory layout -----------------------------------------------------------------------------

#: Extra elements around an embedded view: slots before/after along one axis.
SLACK = 3


def embed(t: torch.Tensor, shape, index, fill) -> torch.Tensor:
    """``t`` written at ``buffer[index]`` of a fresh ``fill``-filled buffer of ``shape``; returns
    that view (its storage is the whole buffer)."""
    buf = torch.full(tuple(shape), fill, dtype=t.dtype, device=t.device)
    buf[index] = t
    return buf[index]


def poison_of(dtype: torch.dtype):
    return float("nan") if dtype.is_floating_point else 0


def row_pad(t: torch.Tensor, pad: int = 8) -> torch.Tensor:
    """``t`` as the first D columns of rows D + pad wide (every stride but the innermost grows)."""
    D = t.shape[-1]
    return embed(t, (*t.shape[:-1], D + pad), (..., slice(0, D)), poison_of(t.dtype))


def seq_slice(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k/v [B, H, S, D] as a window of one longer cache [2, B, H, S + 2 * SLACK, D], starting
    SLACK tokens in (a sliding window over a preallocated cache)."""
    B, H, S, D = k.shape
    buf = torch.full((2, B, H, S + 2 * SLACK, D), float("nan"), dtype=k.dtype, device=k.device)
    window = (slice(None), slice(None), slice(SLACK, SLACK + S))
    buf[0][window] = k
    buf[1][window] = v
    return buf[0][window], buf[1][window]


def fused_bnsd(*parts: torch.Tensor) -> list[torch.Tensor]:
    """[B, H_i, S, D] tensors of equal S as head slices of one fused [B, S, sum H_i, D] tensor
    (a fused QKV projection in BSHD order), each seen as BNSD: head stride D, token stride
    sum(H_i) * D."""
    B, _, S, D = parts[0].shape
    total = sum(p.shape[1] for p in parts)
    buf = torch.full((B, S, total, D), float("nan"), dtype=parts[0].dtype, device=parts[0].device)
    out, h0 = [], 0
    for p in parts:
        h = p.shape[1]
        buf[:, :, h0:h0 + h] = p.transpose(1, 2)
        out.append(buf[:, :, h0:h0 + h].transpose(1, 2))
        h0 += h
    return out


def fused_rows(*parts: torch.Tensor) -> list[torch.Tensor]:
    """[N, H_i, D] tensors as head slices of one fused [N, sum H_i, D] tensor (packed varlen
    q/k/v from one QKV projection; a decode query from the fused projection of its token)."""
    N, _, D = parts[0].shape
    total = sum(p.shape[1] for p in parts)
    buf = torch.full((N, total, D), float("nan"), dtype=parts[0].dtype, device=parts[0].device)
    out, h0 = [], 0
    for p in parts:
        h = p.shape[1]
        buf[:, h0:h0 + h] = p
        out.append(buf[:, h0:h0 + h])
        h0 += h
    return out


def pool_slice(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """A paged cache as a slice of a larger pool: pages SLACK.. of a pool with 2 * SLACK more
    pages, and heads 1.. of a pool with 2 more KV heads (a tensor-parallel shard of a shared
    pool). Every stride but the innermost differs from the contiguous one."""
    N = cache.shape[0]
    head_axis = 2 if layout == "HND" else 3
    shape = list(cache.shape)
    shape[0] += 2 * SLACK
    shape[head_axis] += 2
    index = [slice(SLACK, SLACK + N), slice(None), slice(None), slice(None)]
    index[head_axis] = slice(1, 1 + cache.shape[head_axis])
    return embed(cache, shape, tuple(index), float("nan"))


#: The views every dense BNSD family (q [B, Hq, Sq, D], k/v [B, Hkv, S, D]) runs.
DENSE_VIEWS = ("kvslice", "fused", "rowpad")


def dense_views(view: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple:
    """(q, k, v) as the legal views of ``view``: ``kvslice`` K/V a window of a longer cache,
    ``fused`` slices of one fused BSHD projection (a decode query from its token's projection,
    its K/V from one BSHD cache), ``rowpad`` rows wider than D."""
    if view == CONTIG:
        return q, k, v
    if view == "kvslice":
        return (q, *seq_slice(k, v))
    if view == "fused":
        if q.shape[2] == k.shape[2]:
            return tuple(fused_bnsd(q, k, v))
        B, Hkv, _, D = k.shape
        rest = torch.full((B, 2 * Hkv, q.shape[2], D), float("nan"), dtype=q.dtype)  # the token's own K/V
        return (fused_bnsd(q, rest)[0], *fused_bnsd(k, v))
    if view == "rowpad":
        return row_pad(q), row_pad(k), row_pad(v)
    raise ValueError(f"unknown view {view!r}")


def index_view(t: torch.Tensor, fill) -> torch.Tensor:
    """An index array [..., L] as the first L entries of rows SLACK longer, the rest ``fill``
    (callers pass stale in-range values: a reader that ignores the row stride reads legal but
    wrong entries instead of crashing)."""
    L = t.shape[-1]
    return embed(t, (*t.shape[:-1], L + SLACK), (..., slice(0, L)), fill)


# --- sizes -------------------------------------------------------------------------------------

#: S % 16 and S % 64 in {0, 1, 2, tile - 1}: (63, 64, 65, 66) -> residues (15|63, 0, 1, 2).
TILE_RESIDUES = (63, 64, 65, 66)
#: The same past a 128-wide tile (the interpreter's tile, and the devices' BLOCK_M): 127, 129, 130.
LONG_RESIDUES = (127, 129, 130)
#: Past the split-KV thresholds of every profile (the project's kernels split past 512 keys or
#: list entries in the interpreter, and from 512 on devices): one and two splits beyond.
SPLIT_LENGTHS = (513, 1100)


# --- fuzz draws ----------------------------------------------------------------------------------

def draw_length(rng, hi: int, lo: int = 1) -> int:
    """A length in [lo, hi]: uniformly, near a tile residue, or past a split threshold."""
    kind = rng.random()
    if kind < 0.4:
        n = rng.randint(lo, hi)
    elif kind < 0.8:
        tile = rng.choice((16, 64, 128))
        n = tile * rng.randint(1, max(1, hi // tile)) + rng.choice((-1, 0, 1, 2))
    else:
        n = rng.choice(SPLIT_LENGTHS) + rng.randint(-2, 40)
    return max(lo, min(hi, n))


def draw_dtype(rng) -> str:
    # bf16 is rarer: on cpu the tl.dot kernels meet the interpreter's known bf16 failure there.
    return "bf16" if rng.random() < 0.15 else "fp16"


def draw_heads(rng, max_hq: int = 8) -> tuple[int, int]:
    """(Hq, Hkv) with Hq % Hkv == 0: GQA ratios 1 .. 8."""
    G = rng.choice([g for g in (1, 2, 4, 8) if g <= max_hq])
    Hkv = rng.choice([h for h in (1, 2, 4) if h * G <= max_hq] or [1])
    return Hkv * G, Hkv


def draw_head_dim(rng) -> int:
    return rng.choices((64, 128, 256), weights=(5, 3, 1))[0]


def draw_vals(rng) -> str:
    return RANDN if rng.random() < 0.4 else rng.choice(VALUES)


def draw_classes(rng, params: dict, *, gqa: bool = False, pages: bool = False, shared: bool | None = None) -> dict:
    """``params`` with, each now and then, a GQA group that is not a power of two (``gqa``), a page
    size of 12 or 48 (``pages``), an extreme score range or zero vectors, a softmax scale other
    than the default (negative and zero included), and pages shared by the sequences (``shared``,
    default ``pages``: a prefix cache). Every call takes the same draws, whatever it keeps."""
    p = dict(params)
    group, page, extreme, scale = (rng.random() for _ in range(4))
    G, P, vals = rng.choice((3, 5, 6, 7)), rng.choice((12, 48)), rng.choice(EXTREMES)
    sc = rng.choice(("mla", "hot", "one"))
    # Drawn after the draws above, so a seed's earlier draws keep their parameters.
    signed, prefix = rng.random(), rng.random()
    if signed < 0.3:
        sc = rng.choice(("neg", "zero"))
    if (pages if shared is None else shared) and prefix < 0.1:
        p["placement"] = "shared"
    if gqa and group < 0.15:
        p["Hq"] = p["Hkv"] * G
    if pages and page < 0.15:
        p["P"] = P
    if "vals" in p and extreme < 0.1:
        p["vals"] = vals
    if scale < 0.15:
        p["scale"] = sc
    return p


def draw_view(rng, kinds) -> str:
    return CONTIG if rng.random() < 0.4 else rng.choice(tuple(kinds))




def pairwise_shares_pages(row, smallest_page: int = 12) -> bool:
    """Whether a partial row of a paged crossing can share pages: a ``shared`` page table shares the
    pages every sequence fills, so it needs two non-empty sequences that each fill one
    (``smallest_page``: the least page size of the crossing, for a row that has no page size yet)."""
    if row.get("placement") != "shared" or "lengths" not in row:
        return True
    lengths = [n for n in row["lengths"] if n]
    return len(lengths) > 1 and min(lengths) >= row.get("P", smallest_page)
