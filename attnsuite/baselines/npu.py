"""Ascend baselines: torch_npu's fused attention operators on the suite's layouts.

Never run on an NPU by this project: written against the torch_npu documentation (Ascend/op-plugin
``docs/context/torch_npu-npu_fusion_attention.md``, ``...-npu_fused_infer_attention_score.md``,
``...-npu_incre_flash_attention.md``) and unit-tested on CPU tensors with a fake torch_npu.

Two layers:
- builders (``fusion_attention_args``, ``fused_infer_args``, ``paged_fused_infer_args``): plain
  PyTorch, no torch_npu; they return an ``NpuCall`` holding the operator's name, the tensors it
  takes positionally, its keyword arguments exactly as they will be passed, and the suite-layout
  shapes of the outputs. A case the operator's documented limits exclude raises
  ``BaselineUnavailable`` here, instead of becoming a call that fails or computes something else.
- ``run(call)`` and the callers (``fusion_attention``, ``fused_infer_decode``,
  ``fused_infer_paged_decode``): import torch_npu lazily, call, reshape to the suite's layout.

To time a baseline, build once and time ``run(call)`` alone: building the paged arguments copies
the KV cache, which is not the operator's cost.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional

import torch

from . import BaselineUnavailable

FUSION_ATTENTION = "npu_fusion_attention"
FUSED_INFER = "npu_fused_infer_attention_score"

#: sparse_mode values shared by both operators.
NO_MASK = 0  # with atten_mask=None: nothing is masked
LEFT_UP_CAUSAL = 2  # causal anchored at the top-left corner: key j > query i is masked, the spec's rule
#: The causal sparse modes take a compressed mask of this fixed side, whatever the sequence length.
CAUSAL_MASK_SIZE = 2048

#: Documented limits of npu_fused_infer_attention_score (A2/A3 parts).
MAX_GQA_GROUP = 64  # num_heads / num_key_value_heads
MAX_HEADS = 256
MAX_HEAD_DIM = 512


@dataclass
class NpuCall:
    """One operator call: ``getattr(torch_npu, op)(*args, **kwargs)``."""

    op: str
    args: tuple  # (query, key, value), positional in every documented signature
    kwargs: dict
    out_shape: tuple  # suite layout of o
    lse_shape: Optional[tuple]  # suite layout of lse; None when not requested or not produced


# -- builders -------------------------------------------------------------------------------
def causal_mask(device=None) -> torch.Tensor:
    """The compressed causal mask: 2048 x 2048 bool, True (= masked) strictly above the diagonal.

    Built on the host and moved, so nothing but a copy runs on the device.
    """
    return torch.ones(CAUSAL_MASK_SIZE, CAUSAL_MASK_SIZE, dtype=torch.bool).triu(1).to(device)


def fusion_attention_args(q, k, v, *, causal: bool, scale: Optional[float] = None) -> NpuCall:
    """Dense prefill, q [B, Hq, S, D], k/v [B, Hkv, S, D] (BNSD) -> ``npu_fusion_attention``.

    GQA needs no expansion: the operator takes key/value with fewer heads when Hq / Hkv is an
    integer, and ``head_num`` is the query's head count. Its LSE is not returned: the operator
    gives softmax max and sum for its backward pass only, in an undocumented shape.
    """
    B, Hq, S, D = _dense_shapes(FUSION_ATTENTION, q, k, v)
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise BaselineUnavailable(f"{FUSION_ATTENTION}: dtype {q.dtype} unsupported (float16, bfloat16, float32)")
    if Hq > MAX_HEADS:
        raise BaselineUnavailable(f"{FUSION_ATTENTION}: {Hq} query heads, at most {MAX_HEADS}")
    kwargs = {"head_num": Hq, "input_layout": "BNSD", "scale": _scale(scale, D), "keep_prob": 1.0}
    if causal:
        # pre_tockens / next_tockens are ignored in this mode, so they are left at their defaults.
        kwargs.update(sparse_mode=LEFT_UP_CAUSAL, atten_mask=causal_mask(q.device))
    else:
        kwargs.update(sparse_mode=NO_MASK, atten_mask=None)
    return NpuCall(FUSION_ATTENTION, (q.contiguous(), k.contiguous(), v.contiguous()), kwargs,
                   tuple(q.shape), None)


def fused_infer_args(q, k, v, *, scale: Optional[float] = None, lse: bool = False,
                     scale_keyword: str = "scale") -> NpuCall:
    """Dense decode, q [B, Hq, 1, D], k/v [B, Hkv, S, D] (BNSD) -> ``npu_fused_infer_attention_score``.

    A query length of 1 takes the operator's incremental (decode) branch; longer queries work too
    but unmasked. ``scale_keyword`` is "scale", or "scale_value" for releases that still use that
    name (see ``scale_keyword``).
    """
    B, Hq, Sq, D = _dense_shapes(FUSED_INFER, q, k, v)
    Hkv = k.shape[1]
    _check_fused_infer(q.dtype, Hq, Hkv, D)
    kwargs = {"num_heads": Hq, "num_key_value_heads": Hkv, "input_layout": "BNSD",
              scale_keyword: _scale(scale, D), "softmax_lse_flag": lse}
    return NpuCall(FUSED_INFER, (q.contiguous(), k.contiguous(), v.contiguous()), kwargs,
                   tuple(q.shape), (B, Hq, Sq) if lse else None)


def paged_fused_infer_args(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *,
                           layout: str = "HND", scale: Optional[float] = None, lse: bool = False,
                           scale_keyword: str = "scale") -> NpuCall:
    """Paged decode, q [B, Hq, D] and the suite's paged cache -> ``npu_fused_infer_attention_score``.

    The cache becomes separate key and value tensors [pages, Hkv, page_size, D], the operator's
    "(blocknum, KV_N, blocksize, D)" layout: it is documented as the faster of its two paged
    layouts and accepted with a BNSD query. Either suite layout needs a copy anyway (the operator
    wants key and value each contiguous, the suite interleaves them per page), so NHD is transposed
    in the same copy. Physical page ids keep their meaning: page p of the cache is block p.
    """
    if q.dim() != 3 or kv_cache.dim() != 5:
        raise ValueError(f"{FUSED_INFER}: q must have rank 3 and kv_cache rank 5, got {q.dim()} and {kv_cache.dim()}")
    B, Hq, D = q.shape
    if layout == "HND":
        num_pages, _, Hkv, page_size, _ = kv_cache.shape
        key, value = kv_cache[:, 0], kv_cache[:, 1]
    elif layout == "NHD":
        num_pages, _, page_size, Hkv, _ = kv_cache.shape
        key, value = kv_cache[:, 0].transpose(1, 2), kv_cache[:, 1].transpose(1, 2)
    else:
        raise ValueError(f"{FUSED_INFER}: layout must be 'HND' or 'NHD', got {layout!r}")
    if Hkv == 0 or Hq % Hkv:
        raise ValueError(f"{FUSED_INFER}: Hq={Hq} must be a multiple of Hkv={Hkv}")
    reason = paged_block_size_reason(page_size, q_len=1)
    if reason:
        raise BaselineUnavailable(f"{FUSED_INFER}: {reason}")
    _check_fused_infer(q.dtype, Hq, Hkv, D)
    block_table, lengths = block_table_from_csr(kv_page_indptr, kv_page_indices, kv_last_page_len, page_size)
    if int(kv_page_indptr[-1]) > num_pages:
        raise BaselineUnavailable(f"{FUSED_INFER}: the table lists more pages than the cache holds ({num_pages})")
    kwargs = {"num_heads": Hq, "num_key_value_heads": Hkv, "input_layout": "BNSD",
              scale_keyword: _scale(scale, D), "block_table": block_table, "block_size": page_size,
              # Zero for a sequence with no pages: what the operator writes for it is undocumented.
              "actual_seq_lengths_kv": lengths, "softmax_lse_flag": lse}
    args = (q.unsqueeze(2).contiguous(), key.contiguous(), value.contiguous())
    return NpuCall(FUSED_INFER, args, kwargs, (B, Hq, D), (B, Hq) if lse else None)


def block_table_from_csr(kv_page_indptr, kv_page_indices, kv_last_page_len, page_size: int):
    """FlashInfer's CSR page table -> (block_table int32 [B, max(1, max pages)], lengths list[int]).

    Row b lists sequence b's pages in order; the rest of the row is 0. The operator reads only the
    first ceil(length / block_size) entries of a row and does not validate ids, so the padding is
    never used; 0 is a real page, which keeps even a stray read inside the cache. The lengths are
    a Python list because the operator takes ``actual_seq_lengths_kv`` as int[] (host values).
    """
    ptr = [int(x) for x in kv_page_indptr.tolist()]
    ids = [int(x) for x in kv_page_indices.tolist()]
    last = [int(x) for x in kv_last_page_len.tolist()]
    counts = [ptr[b + 1] - ptr[b] for b in range(len(ptr) - 1)]
    width = max([1, *counts])  # at least one column, even when every sequence is empty
    rows = [ids[ptr[b]:ptr[b + 1]] + [0] * (width - n) for b, n in enumerate(counts)]
    lengths = [page_size * (n - 1) + last[b] if n else 0 for b, n in enumerate(counts)]
    table = torch.tensor(rows, dtype=torch.int32, device=kv_page_indices.device).reshape(len(counts), width)
    return table, lengths


def paged_block_size_reason(page_size: int, *, q_len: int = 1) -> Optional[str]:
    """Why the operator cannot take this page size as its block_size (fp16/bf16 KV), or None.

    Documented: decode (query length 1) needs a multiple of 16, 128 recommended; a longer query
    (paged prefill) needs 128 to 512 in multiples of 128.
    """
    if q_len > 1:
        if page_size % 128 or not 128 <= page_size <= 512:
            return f"page_size {page_size}: paged prefill needs block_size 128..512 in multiples of 128"
    elif page_size % 16:
        return f"page_size {page_size}: paged decode needs block_size a multiple of 16"
    return None


def scale_keyword(argument_names: Iterable[str]) -> str:
    """The operator's name for the softmax scale: "scale" in current releases, "scale_value" in
    older ones (e.g. the Ascend Extension 6.0 docs). Unknown names give "scale"."""
    names = set(argument_names)
    return "scale_value" if "scale_value" in names and "scale" not in names else "scale"


# -- callers ----------------------------------------------------------------------------------
def import_torch_npu():
    try:
        import torch_npu
    except (ImportError, OSError) as exc:  # OSError: CANN's shared libraries are missing
        raise BaselineUnavailable(
            f"torch_npu is not importable ({exc}); Ascend baselines need torch_npu and CANN") from None
    return torch_npu


def run(call: NpuCall, torch_npu=None):
    """Make the call; return (o, lse or None) in the suite's layout."""
    torch_npu = torch_npu if torch_npu is not None else import_torch_npu()
    op = getattr(torch_npu, call.op, None)
    if op is None:
        raise BaselineUnavailable(f"torch_npu {getattr(torch_npu, '__version__', '?')} has no {call.op}")
    out = op(*call.args, **call.kwargs)
    # Both operators return a tuple whose first element is the attention output (BNSD); the fused
    # infer operator's second is the LSE, [B, N, S_q, 1] float32 when softmax_lse_flag is set.
    o = out[0].reshape(call.out_shape)
    lse = None if call.lse_shape is None else out[1].reshape(call.lse_shape)
    return o, lse


def fusion_attention(q, k, v, *, causal: bool, scale: Optional[float] = None):
    """Dense prefill through npu_fusion_attention: (o [B, Hq, S, D], None)."""
    torch_npu = import_torch_npu()
    return run(fusion_attention_args(q, k, v, causal=causal, scale=scale), torch_npu)


def fused_infer_decode(q, k, v, *, scale: Optional[float] = None, lse: bool = True):
    """Dense decode through npu_fused_infer_attention_score: (o [B, Hq, 1, D], lse [B, Hq, 1] or None)."""
    torch_npu = import_torch_npu()
    call = fused_infer_args(q, k, v, scale=scale, lse=lse, scale_keyword=scale_keyword(_fused_infer_argument_names()))
    return run(call, torch_npu)


def fused_infer_paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *,
                             layout: str = "HND", scale: Optional[float] = None, lse: bool = True):
    """Paged decode through npu_fused_infer_attention_score: (o [B, Hq, D], lse [B, Hq] or None)."""
    torch_npu = import_torch_npu()
    call = paged_fused_infer_args(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                                  layout=layout, scale=scale, lse=lse,
                                  scale_keyword=scale_keyword(_fused_infer_argument_names()))
    return run(call, torch_npu)


# -- helpers ----------------------------------------------------------------------------------
def _fused_infer_argument_names() -> list[str]:
    """Argument names of the registered operator (torch_npu registers it as torch.ops.npu.*)."""
    try:
        return [a.name for a in torch.ops.npu.npu_fused_infer_attention_score.default._schema.arguments]
    except Exception:  # noqa: BLE001 - not registered or no schema: fall back to the current name
        return []


def _scale(scale: Optional[float], head_dim: int) -> float:
    # Both operators default to 1.0, not 1/sqrt(D): always pass it.
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def _dense_shapes(op: str, q, k, v) -> tuple[int, int, int, int]:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"{op}: q, k, v must have rank 4 (BNSD), got {q.dim()}, {k.dim()}, {v.dim()}")
    if k.shape != v.shape or k.shape[0] != q.shape[0] or k.shape[3] != q.shape[3]:
        raise ValueError(f"{op}: shapes q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit BNSD")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        raise ValueError(f"{op}: Hq={q.shape[1]} must be a multiple of Hkv={k.shape[1]}")
    return tuple(q.shape)


def _check_fused_infer(dtype, Hq: int, Hkv: int, D: int) -> None:
    if dtype not in (torch.float16, torch.bfloat16):
        raise BaselineUnavailable(f"{FUSED_INFER}: dtype {dtype} unsupported (float16, bfloat16)")
    if Hq // Hkv > MAX_GQA_GROUP or Hq > MAX_HEADS or D > MAX_HEAD_DIM:
        raise BaselineUnavailable(
            f"{FUSED_INFER}: Hq={Hq}, Hkv={Hkv}, D={D} outside its limits "
            f"(Hq/Hkv <= {MAX_GQA_GROUP}, Hq <= {MAX_HEADS}, D <= {MAX_HEAD_DIM})")
