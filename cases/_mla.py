"""Input generation shared by the two MLA families (kernels.md sections 10 and 11): a paged latent
cache ``[pages, P, Dc + Dr]`` (the fused buffer vLLM and SGLang keep, or two separate caches),
queries, value distributions, FP8 caches and legal views.

MLA seen as ordinary attention: the key of token j is ``cat(ckv_j, kpe_j)`` (Dc + Dr wide), the
query ``cat(q_nope, q_pe)`` and the value ``ckv_j``. The value distributions of cases/_dims.py are
applied to that concatenation; where a distribution moves V (offset, cancel), q_nope is first
made orthogonal to the all-ones direction the offset moves ckv along, so the scores do not move
with V (ckv is both).

Slots no sequence owns hold NaN; an fp8 cache holds both of e4m3fn's NaN encodings there (0x7F,
0xFF: it has no infinities), so a kernel that lets an unowned slot into its result fails.
"""
from __future__ import annotations

import math

import torch

from . import _paged
from ._attention import randn
from ._dims import (CONTIG, RANDN, SLACK, ZERO_EVERY, ZERO_FIRST, cancel_values, late_mask, offset_values,
                    scale_late, second_half, shift_scores, zero_query, LARGE_SCALE)

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
#: Cache classes: "same" (the query's dtype) or fp8 with (k_scale, v_scale) and how the stored
#: values are drawn. fp8: N(0, 1) rounded to e4m3, scales 1; fp8_scaled: scales far from 1
#: (1/64 on the key side, 8 on the value side) over values drawn 8x wider; fp8_edge: the same
#: scales over values at e4m3's largest magnitude (448) and in its subnormal range (2^-9 .. 2^-7).
CACHES = {"same": (1.0, 1.0), "fp8": (1.0, 1.0), "fp8_scaled": (1.0 / 64, 8.0), "fp8_edge": (1.0 / 64, 8.0)}
#: Views: "fused" ckv / kpe (and q_nope / q_pe) are the two halves of one buffer; "pool" the
#: fused buffer is a page slice of a larger pool with rows wider than Dc + Dr; "rowpad" two
#: separate caches whose rows are wider than Dc (Dr).
MLA_VIEWS = ("fused", "pool", "rowpad")


def cache_scales(case) -> tuple[float, float]:
    return CACHES[case.params.get("cache", "same")]


def is_fp8(case) -> bool:
    return case.params.get("cache", "same") != "same"


def owned_slots(lengths, page_size: int, indptr, indices, num_pages: int) -> torch.Tensor:
    """bool [num_pages, P]: the slots that hold a token of some sequence."""
    used = torch.zeros(num_pages, page_size, dtype=torch.bool)
    for b, n in enumerate(lengths):  # per sequence: marks its pages' used slots
        pages = indices[indptr[b]:indptr[b + 1]].long()
        used[pages] |= (torch.arange(len(pages) * page_size) < n).view(-1, page_size)
    return used


def fp8_values(gen, x: torch.Tensor, cache: str) -> torch.Tensor:
    """Stored fp8 values from N(0, 1) draws ``x`` (fp32) for a cache class."""
    if cache == "fp8":
        return x.to(FP8)
    if cache == "fp8_scaled":
        return (x * 8).to(FP8)
    # fp8_edge: ~2% of the entries at +-448, ~30% subnormal (+-k * 2^-9, k = 1..3), the rest N(0, 4).
    u = torch.rand(x.shape, generator=gen)
    sign = torch.where(x >= 0, 1.0, -1.0)
    sub = sign * torch.randint(1, 4, x.shape, generator=gen).float() * 2.0**-9
    edge = torch.where(u < 0.02, sign * FP8_MAX, torch.where(u < 0.32, sub, x * 4))
    return edge.to(FP8)


def latent_cache(gen, case, lengths, page_size, Dc, Dr, indptr, indices, num_pages, device=None):
    """(buffer [pages, P, Dc + Dr] in the cache dtype, owned [pages, P]); unowned slots NaN."""
    shape = (num_pages, page_size, Dc + Dr)
    owned = owned_slots(lengths, page_size, indptr, indices, num_pages)
    cache = case.params.get("cache", "same")
    if cache == "same":
        buf = randn(gen, shape, case.dtype, device)
        buf.masked_fill_(~owned.to(buf.device)[:, :, None], float("nan"))
        return buf, owned
    buf = fp8_cache(gen, randn(gen, shape, torch.float32), cache, owned)
    return buf.to(device) if device is not None else buf, owned


def fp8_cache(gen, x: torch.Tensor, cache: str, owned: torch.Tensor) -> torch.Tensor:
    """Rows ``x`` [pages, P, D] (fp32 N(0, 1) draws) stored as the fp8 cache class ``cache``;
    slots not ``owned`` hold both NaN encodings, alternating over the columns."""
    buf = fp8_values(gen, x, cache)
    nan_bits = torch.where(torch.arange(x.shape[-1]) % 2 == 0, 0x7F, 0xFF).to(torch.uint8)
    buf.view(torch.uint8)[~owned] = nan_bits
    return buf


def mla_values(vals: str, qn, qp, buf, Dc: int, owned: torch.Tensor, positions, lens, scale: float):
    """(q_nope, q_pe, buffer) moved to distribution ``vals`` (cases/_dims.py); ``positions`` /
    ``lens`` [pages, P]: each slot's logical position and its sequence's length (-1 / 0: none)."""
    if vals == RANDN:
        return qn, qp, buf
    if vals == "large":
        return (qn.float() * LARGE_SCALE).to(qn.dtype), (qp.float() * LARGE_SCALE).to(qp.dtype), buf
    buf = buf.clone()
    positions, lens = positions.to(buf.device), lens.to(buf.device)
    if vals in ("offset", "cancel"):
        qn = (qn.float() - qn.float().mean(-1, keepdim=True)).to(qn.dtype)  # scores blind to the offset
        ckv = buf[..., :Dc]
        buf[..., :Dc] = offset_values(ckv) if vals == "offset" else cancel_values(ckv, second_half(positions, lens))
    elif vals == "late":
        late = (positions >= 0) & late_mask(positions, lens)
        buf.copy_(scale_late(buf, late))
    elif vals == "zeros":
        zero = (positions >= 0) & (positions % ZERO_EVERY == ZERO_FIRST)
        buf.masked_fill_(zero[:, :, None], 0)
        qn, qp = zero_query(qn), zero_query(qp)
    else:  # score ranges at the edges of the exponent, on the concatenated query and key
        q, k = shift_scores(vals, torch.cat([qn, qp], -1), buf, scale)
        qn, qp, buf = q[..., :Dc].contiguous(), q[..., Dc:].contiguous(), k
    return qn, qp, buf


def latent_views(view: str, qn, qp, buf, Dc: int):
    """(q_nope, q_pe, ckv_cache, kpe_cache) as the legal views of ``view`` (CONTIG: separate
    contiguous tensors)."""
    if view == CONTIG:
        return qn.contiguous(), qp.contiguous(), buf[..., :Dc].contiguous(), buf[..., Dc:].contiguous()
    if view == "fused":
        q = torch.cat([qn, qp], -1)
        return q[..., :Dc], q[..., Dc:], buf[..., :Dc], buf[..., Dc:]
    if view == "pool":
        n, P, W = buf.shape
        pool = torch.full((n + 2 * SLACK, P, W + 16), float("nan"), dtype=torch.float32, device=buf.device).to(buf.dtype)
        pool[SLACK:SLACK + n, :, :W] = buf
        inner = pool[SLACK:SLACK + n, :, :W]
        q = torch.full((*qn.shape[:-1], W + 16), float("nan"), dtype=qn.dtype, device=qn.device)
        q[..., :Dc], q[..., Dc:W] = qn, qp
        return q[..., :Dc], q[..., Dc:W], inner[..., :Dc], inner[..., Dc:]
    if view == "rowpad":
        from ._dims import row_pad
        return row_pad(qn), row_pad(qp), _row_pad_any(buf[..., :Dc].contiguous()), _row_pad_any(buf[..., Dc:].contiguous())
    raise ValueError(f"unknown view {view!r}")


def _row_pad_any(t: torch.Tensor, pad: int = 16) -> torch.Tensor:
    """``t`` as the first D columns of rows D + pad wide; the rest NaN (fp8 too)."""
    wide = torch.full((*t.shape[:-1], t.shape[-1] + pad), float("nan"), dtype=torch.float32,
                      device=t.device).to(t.dtype)
    wide[..., :t.shape[-1]] = t
    return wide[..., :t.shape[-1]]


def paged_latent_inputs(case, gen, lengths, H: int, rows: int, device=None) -> dict:
    """Queries ([rows, H, Dc] / [rows, H, Dr]), the two caches and the page table of a case."""
    P, Dc, Dr = case["P"], case["Dc"], case["Dr"]
    indptr, indices, last, num_pages = _paged.page_table(gen, lengths, P, case["placement"], case.params.get("pool"),
                                                         case.params.get("pages"))
    buf, owned = latent_cache(gen, case, lengths, P, Dc, Dr, indptr, indices, num_pages, device)
    qn = randn(gen, (rows, H, Dc), case.dtype, device)
    qp = randn(gen, (rows, H, Dr), case.dtype, device)
    # The helpers below combine queries and cache (concatenations, score shifts): where any of
    # them was drawn on the device (a bulk tensor), the others follow it there, values unchanged.
    if device is not None and any(t.device.type != "cpu" for t in (qn, qp, buf)):
        qn, qp, buf = (t.to(device) for t in (qn, qp, buf))
    vals = case.params.get("vals", RANDN)
    if vals != RANDN:
        from ._dims import effective_scale
        positions, lens = _paged.slot_positions(indptr, indices, lengths, P, num_pages)
        qn, qp, buf = mla_values(vals, qn, qp, buf, Dc, owned, positions, lens, effective_scale(case, Dc + Dr))
    qn, qp, ckv, kpe = latent_views(case.params.get("view", CONTIG), qn, qp, buf, Dc)
    return {"q_nope": qn, "q_pe": qp, "ckv_cache": ckv, "kpe_cache": kpe, "kv_page_indptr": indptr,
            "kv_page_indices": indices, "kv_last_page_len": last}


def latent_score_bound(inputs: dict, scale: float, k_scale: float) -> float:
    """scale * max |cat(q_nope, q_pe)| * max |cat(ckv, kpe)| over owned (finite) rows
    (Cauchy-Schwarz, as ``cases._attention.score_bound``)."""
    return (abs(scale) * _largest_row_norm(inputs["q_nope"], inputs["q_pe"])
            * _largest_row_norm(inputs["ckv_cache"], inputs["kpe_cache"]) * abs(k_scale))


#: Rows whose norms one pass of ``_largest_row_norm`` takes at once (float64: 2**16 x 576 x 8 B).
NORM_ROWS = 1 << 16


def _largest_row_norm(first: torch.Tensor, second: torch.Tensor) -> float:
    """The largest norm of the rows cat(first, second) over the rows that are finite, a block of
    rows at a time: a bench cache of a million tokens, widened to float64 at once, took 18 GB."""
    a, b = first.reshape(-1, first.shape[-1]), second.reshape(-1, second.shape[-1])
    best = 0.0
    for r0 in range(0, a.shape[0], NORM_ROWS):
        sq = a[r0:r0 + NORM_ROWS].double().square().sum(-1) + b[r0:r0 + NORM_ROWS].double().square().sum(-1)
        sq = sq[torch.isfinite(sq)]
        if sq.numel():
            best = max(best, float(sq.max()))
    return best ** 0.5


def latent_bytes(lengths, Dc: int, Dr: int, itemsize: int) -> int:
    """Bytes of latent cache a kernel must read at least: every token's row once."""
    return sum(lengths) * (Dc + Dr) * itemsize


def dense_latent(inputs: dict, dtype: torch.dtype, k_scale: float = 1.0, v_scale: float = 1.0):
    """(k [B, 1, N, Dc + Dr], v [B, 1, N, Dc]) of every sequence gathered and dequantised into
    ``dtype`` (N the longest; a baseline's inputs, built outside any timing), and the lengths."""
    from references.mla import gather_latent, sequence_lengths
    P = inputs["ckv_cache"].shape[1]
    lengths = sequence_lengths(inputs["kv_page_indptr"], inputs["kv_last_page_len"], P)
    ckv, valid = gather_latent(inputs["ckv_cache"], inputs["kv_page_indptr"], inputs["kv_page_indices"], lengths)
    kpe, _ = gather_latent(inputs["kpe_cache"], inputs["kv_page_indptr"], inputs["kv_page_indices"], lengths)
    ckv = torch.where(valid[..., None], ckv.float(), 0.0)
    kpe = torch.where(valid[..., None], kpe.float(), 0.0)
    k = torch.cat([ckv * k_scale, kpe * k_scale], -1).to(dtype)[:, None]
    v = (ckv * v_scale).to(dtype)[:, None]
    return k, v, lengths


def default_scale(Dc: int, Dr: int) -> float:
    return 1.0 / math.sqrt(Dc + Dr)
