"""FlashInfer-Trace ``dsa_paged`` workloads -> cases of ``dsa_topk_indexer`` and
``dsa_sparse_attention`` (schema: their docs/op-types/dsa-paged.mdx).

- ``indexer`` definitions (inputs ``q_index_fp8``, ``k_index_cache_fp8 [num_pages, page_size, 1,
  132]``, ``weights``, ``seq_lens``, ``block_table``; output ``topk_indices``) ->
  ``dsa_topk_indexer`` with the packed layout (DeepGEMM's page-blocked bytes, as the suite's
  family takes them). Sequence lengths are the workload's ``seq_lens`` when it stores them, else
  ``max_num_pages * page_size`` tokens split over ``batch_size`` sequences from the workload's
  seed. The family draws its own page table, values and weights.
- ``sparse_attention`` definitions (``q_nope``, ``q_pe``, ``ckv_cache``, ``kpe_cache``,
  ``sparse_indices [num_tokens, topk]``, ``sm_scale``; outputs ``output``, ``lse``) ->
  ``dsa_sparse_attention``: ``num_tokens`` decode rows, each over its own sequence of the
  ``num_pages * page_size``-slot pool, ``topk`` ids a row drawn by the family. Their LSE is base 2
  (``lse_e = lse_2 * ln 2``); the case checks ours (natural log), as for the other op types.

Only shapes (and stored lengths) are read, never tensor values: the same rule as workloads.py.
"""
from __future__ import annotations

OP_TYPE = "dsa_paged"
FAMILIES = {"indexer": "dsa_topk_indexer", "sparse_attention": "dsa_sparse_attention"}


def family(definition: dict) -> str:
    """The family a ``dsa_paged`` definition maps to (by its inputs: the indexer's are fp8)."""
    return FAMILIES["indexer" if "q_index_fp8" in definition["inputs"] else "sparse_attention"]


def indexer_params(axis, lengths, split) -> dict:
    """The case of an indexer workload. ``axis(name)`` reads an axis value, ``lengths`` the stored
    seq_lens or None, ``split(total, parts)`` the workload's seeded split. ValueError: unmappable."""
    Hi, Di, P, topk = (axis(n) for n in ("num_index_heads", "index_head_dim", "page_size", "topk"))
    if Di != 128 or axis("head_dim_with_scale") != 132:
        raise ValueError(f"index_head_dim {Di} with head_dim_with_scale {axis('head_dim_with_scale')}: the "
                         "packed layout holds 128 fp8 values and a 4-byte scale a token")
    if lengths is None:
        B, max_pages = axis("batch_size"), axis("max_num_pages")
        lengths = [min(n, max_pages * P) for n in split(max_pages * P * B // 2 + B, B)]
    if not lengths or any(n < 0 for n in lengths):
        raise ValueError(f"seq_lens {list(lengths)[:8]} are not a batch")
    return dict(dtype="fp32", layout="packed", Hi=Hi, Di=Di, P=P, lengths=tuple(int(n) for n in lengths), topk=topk,
                vals="randn", kscale="unit", logits=False, extra_pages=0, view="contig")


def sparse_attention_params(axis, dtype: str, scale, lse: bool) -> dict:
    """The case of a sparse_attention workload (``axis`` as above; ``dtype`` our name of q's)."""
    T, H, Dc, Dr, P, topk = (axis(n) for n in ("num_tokens", "num_qo_heads", "head_dim_ckv", "head_dim_kpe",
                                                "page_size", "topk"))
    pages = axis("num_pages")
    if T < 1:
        raise ValueError(f"num_tokens {T}")
    per_row = max(pages // T, 1)  # pages of each row's own sequence: the pool shared out
    return dict(dtype=dtype, mode="decode", nq=1, H=H, Dc=Dc, Dr=Dr, P=P, ctx=(per_row * P,) * T, topk=topk,
                cache="fused", holes=0.0, empty=False, dup=False, lse=lse, vals="randn", scale=scale,
                pool=max(pages, T * per_row), pair=0, view="contig")
