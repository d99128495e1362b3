"""Sparse-token decode reference over contiguous KV (docs/contract.md section 5), vectorized PyTorch.

Each (batch b, query head h) attends the multiset of token positions
``sparse_ind[b, h, :sparse_nnz[b, h]]`` of KV head ``h // G`` (G = Hq / Hkv): the rows are gathered
with index tensors, slots past ``nnz`` are masked with -inf (their contents, -1 padding or garbage,
are never used as an index), duplicates are kept (a token listed twice counts twice), and the
softmax is taken through the log-sum-exp. A row with ``nnz == 0`` gives o = 0 and lse = -inf.

``attend_selected`` (the masked softmax over gathered rows) is shared with references/paged.py and
references/magicpig.py.
"""
from __future__ import annotations

import math
from typing import Optional

import torch


def attend_selected(scores: torch.Tensor, valid: torch.Tensor, v: torch.Tensor,
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over the valid slots of each score row, times V.

    scores [..., M, N] (M query rows sharing the same N gathered slots), valid bool broadcastable
    to scores, v [..., N, D] in the dtype of scores -> (o [..., M, D], lse [..., M]).
    Invalid slots get weight exactly 0 whatever ``scores`` holds there (``v`` rows there must be
    finite: the gathers below zero them); a row with no valid slot gives o = 0 and lse = -inf,
    never NaN.
    """
    scores = scores.masked_fill(~valid, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    # torch.softmax (max-subtracted, as in references/attention.py) turns a row of all -inf into
    # NaN: select 0 for those rows instead (torch.where does not propagate the unselected NaN).
    empty = torch.isneginf(lse).unsqueeze(-1)
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    p = torch.where(empty, zero, torch.softmax(scores, dim=-1))
    # p @ v accumulates in float32 at least and rounds to compute_dtype once: what torch's CPU
    # fp16/bf16 matmul does internally, without its very slow fp16 path for long reductions.
    acc = torch.promote_types(scores.dtype, torch.float32)
    return (p.to(acc) @ v.to(acc)).to(scores.dtype), lse


def selected_slots(sparse_ind: torch.Tensor, sparse_nnz: torch.Tensor,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions, valid) for index lists padded past their count.

    sparse_ind [..., L_max] int, sparse_nnz [...] int -> valid [..., L_max] (slot i < nnz) and
    positions [..., L_max] int64 with every invalid slot replaced by 0, so that it is safe to
    use as an index wherever position 0 exists.
    """
    L_max = sparse_ind.shape[-1]
    slot = torch.arange(L_max, device=sparse_ind.device)
    valid = slot < sparse_nnz.to(torch.int64).unsqueeze(-1)
    positions = torch.where(valid, sparse_ind.to(torch.int64), 0)
    return positions, valid


def sparse_decode_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            sparse_ind: torch.Tensor, sparse_nnz: torch.Tensor, *,
                            scale: Optional[float] = None,
                            compute_dtype: torch.dtype = torch.float64,
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Hq, 1, D], k/v [B, Hkv, S, D], sparse_ind [B, Hq, L_max], sparse_nnz [B, Hq]
    -> (o [B, Hq, 1, D], lse [B, Hq, 1]) in compute_dtype.

    Only the selected rows are gathered (B * Hq * L_max * D values), never a dense copy per head.
    """
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"sparse_decode_reference: q, k, v must have rank 4, "
                         f"got {q.dim()}, {k.dim()}, {v.dim()}")
    B, Hq, _, D = q.shape
    Hkv = k.shape[1]
    if Hkv == 0 or Hq % Hkv != 0:
        raise ValueError(f"sparse_decode_reference: Hq={Hq} must be a multiple of Hkv={Hkv}")
    scale = 1.0 / math.sqrt(D) if scale is None else float(scale)
    G = Hq // Hkv

    positions, valid = selected_slots(sparse_ind, sparse_nnz)             # [B, Hq, L]
    batch = torch.arange(B, device=q.device).view(B, 1, 1)
    kv_head = (torch.arange(Hq, device=q.device) // G).view(1, Hq, 1)
    # Gather in the input dtype (fresh tensors), zero the unused slots, convert only these rows.
    keep = valid.unsqueeze(-1)
    k_sel = k[batch, kv_head, positions].masked_fill_(~keep, 0)           # [B, Hq, L, D]
    v_sel = v[batch, kv_head, positions].masked_fill_(~keep, 0)

    qc = q.to(compute_dtype)                                               # [B, Hq, 1, D]
    scores = (qc @ k_sel.to(compute_dtype).transpose(-1, -2)) * scale      # [B, Hq, 1, L]
    return attend_selected(scores, valid.unsqueeze(2), v_sel.to(compute_dtype))
