"""FlashInfer-Trace ``mla_paged`` definitions -> cases of ``mla_paged_decode`` / ``mla_paged_prefill``.

Their schema (FlashInfer-Bench's ``mla_paged_{decode,prefill_causal}_h<H>_ckv<Dc>_kpe<Dr>_ps<P>``):
``q_nope [batch_size | total_q, num_qo_heads, head_dim_ckv]``, ``q_pe [.., head_dim_kpe]``,
``ckv_cache [num_pages, page_size, head_dim_ckv]``, ``kpe_cache [num_pages, page_size,
head_dim_kpe]``, ``kv_indptr [len_indptr]``, ``kv_indices [num_kv_indices]``, prefill adds
``qo_indptr``; ``sm_scale`` a scalar; outputs ``output`` and a base-2 ``lse`` (ours is natural:
the reference judges ours, traces say so). Without a ``kv_last_page_len`` input every page is
full (their reference reads whole pages). The page table is the workload's when it stores one
(safetensors), else drawn from its axes, seeded by the workload uuid, as for ``gqa_paged``.
Prefill queries are the last n_b of each sequence's m_b tokens; a stored ``qo_indptr`` with
n_b > m_b under a causal definition is not mapped. A ``float8_e4m3fn`` cache is our ``fp8``
class (k_scale = v_scale = 1: the schema carries no scales).
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

#: The workload-reading helpers of workloads.py (``Unmapped``, ``axis_values``, ``split``, ...),
#: handed in by its dispatch as ``w``: this module must not import workloads, which imports it.


def target_family(definition: dict) -> str:
    return "mla_paged_prefill" if "qo_indptr" in definition["inputs"] else "mla_paged_decode"


def params(definition: dict, workload: dict, root: Path, w: ModuleType) -> dict:
    """The case parameters of one ``mla_paged`` workload (``w.Unmapped``: why not)."""
    Unmapped, split = w.Unmapped, w.split
    axes = w.axis_values(definition, workload)
    H, Dc, Dr, P = (w._axis(axes, n) for n in ("num_qo_heads", "head_dim_ckv", "head_dim_kpe", "page_size"))
    dtype, cache = _dtypes(definition, w)
    if P < 1:
        raise Unmapped(f"page_size {P}")
    rng = w._rng(workload)
    indptr, indices = w._given(workload, "kv_indptr", root), w._given(workload, "kv_indices", root)
    if (indptr is None) != (indices is None):
        raise Unmapped("only one of kv_indptr / kv_indices is stored; a page table needs both")
    if indptr is not None:
        B = len(indptr) - 1
        counts = [indptr[b + 1] - indptr[b] for b in range(B)]
        if B < 1 or indptr[0] != 0 or min(counts, default=0) < 0 or indptr[-1] != len(indices):
            raise Unmapped(f"kv_indptr {indptr[:8]}... is no CSR offset array over {len(indices)} kv_indices")
        num_pages = axes.get("num_pages", max(indices, default=-1) + 1)
        if any(not 0 <= i < num_pages for i in indices):
            raise Unmapped(f"kv_indices outside [0, num_pages={num_pages})")
        placement, pages, pool = "given", tuple(indices), max(num_pages, 1)
    else:
        B = axes["batch_size"] if "batch_size" in axes else w._axis(axes, "len_indptr") - 1
        total = w._axis(axes, "num_kv_indices")
        counts = split(rng, total, B, minimum=1 if total >= B else 0)
        num_pages = axes.get("num_pages", total)
        placement, pages = ("scattered", None) if num_pages >= total else ("shuffled", None)
        pool = max(num_pages, 1) if placement == "scattered" else None
    has_last = "kv_last_page_len" in definition["inputs"]
    last = w._given(workload, "kv_last_page_len", root) if has_last else None
    if last is None:
        last = [(rng.randint(1, P) if has_last else P) if c else 0 for c in counts]
    if len(last) != len(counts) or any(c and not 1 <= n <= P for c, n in zip(counts, last)):
        raise Unmapped(f"kv_last_page_len is no 1..page_size={P} per sequence with pages")
    lengths = tuple(P * (c - 1) + n if c else 0 for c, n in zip(counts, last))
    p = dict(dtype=dtype, P=P, placement=placement, lengths=lengths, H=H, Dc=Dc, Dr=Dr,
             lse="lse" in definition["outputs"], cache=cache, pool=pool, view="contig", vals="randn",
             scale=w.sm_scale(workload), pages=pages)
    if target_family(definition) == "mla_paged_prefill":
        p["causal"] = w.is_causal(definition)
        p["queries"] = _queries(workload, root, axes, rng, lengths, p["causal"], w)
    return p


def _queries(workload, root, axes, rng, lengths, causal, w) -> tuple:
    Unmapped, split = w.Unmapped, w.split
    qo = w._given(workload, "qo_indptr", root)
    if qo is not None:
        if len(qo) != len(lengths) + 1 or qo[0] != 0:
            raise Unmapped(f"qo_indptr {qo[:8]}... does not pair with {len(lengths)} sequences")
        queries = tuple(qo[b + 1] - qo[b] for b in range(len(lengths)))
        if any(n < 0 for n in queries):
            raise Unmapped("qo_indptr is not non-decreasing")
    else:
        total_q = w._axis(axes, "total_q")
        room = sum(lengths) if causal else None
        if room is not None and total_q > room:
            raise Unmapped(f"total_q {total_q} exceeds the {room} cached tokens a causal chunk can be the tail of")
        queries = tuple(_bounded_split(rng, total_q, lengths, split) if causal else split(rng, total_q, len(lengths), 0))
    if causal and any(n > m for n, m in zip(queries, lengths)):
        raise Unmapped("a sequence has more queries than cached tokens (causal bottom-right needs n <= m)")
    return tuple(int(n) for n in queries)


def _bounded_split(rng, total: int, caps, split) -> list[int]:
    """``total`` queries over the sequences, sequence b taking at most caps[b]: drawn cut points,
    overflow moved on to the sequences with room (deterministic given ``rng``)."""
    counts = split(rng, total, len(caps), 0)
    spill = 0
    for b, cap in enumerate(caps):
        counts[b] += spill
        spill = max(0, counts[b] - cap)
        counts[b] -= spill
    for b, cap in enumerate(caps):  # what the last sequences could not take goes to earlier ones
        take = min(spill, cap - counts[b])
        counts[b] += take
        spill -= take
    return counts


def _dtypes(definition: dict, w: ModuleType) -> tuple[str, str]:
    """(query dtype, cache class): a cache of the query's dtype, or fp8 under a 16-bit query."""
    Unmapped = w.Unmapped
    q = {w._dtype(definition, n) for n in ("q_nope", "q_pe")}
    c = {w._dtype(definition, n) for n in ("ckv_cache", "kpe_cache")}
    if len(q) != 1 or len(c) != 1:
        raise Unmapped(f"q_nope / q_pe dtypes {sorted(map(str, q))}, caches {sorted(map(str, c))}: each pair must agree")
    q, c = q.pop(), c.pop()
    if q not in ("float16", "bfloat16"):
        raise Unmapped(f"query dtype {q}: the MLA families run float16 and bfloat16")
    if c == q:
        return w.DTYPES[q], "same"
    if c == "float8_e4m3fn":
        return w.DTYPES[q], "fp8"
    raise Unmapped(f"cache dtype {c} under {q} queries")
