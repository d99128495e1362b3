"""MagicPIG sampled decode (docs/contract.md section 7) over a paged KV cache.

Same kernel source as ``sparse_paged_decode`` (``_sparse_paged_fwd`` with ``MAGICPIG=True``): for
every selected key k of the query head's KV head, with the query q of that head,

    c = clamp(q.k / (|q| |k| + 1e-8), -1 + 1e-7, 1 - 1e-7)
    p = clamp(1 - acos(c) / pi, 0, 1);  P = p ** K
    u = max(1 - (1 - P) ** L - L * P * (1 - P) ** (L - 1), 1e-10)
    score = q.k * scale - log(u)

and o = softmax(score over the selected multiset) @ V, lse = logsumexp(score) (natural log). All
in fp32 from the upcast values; |k| is computed per tile inside the kernel. The kernel never takes
log(u): it multiplies each softmax term by the weight 1e-10 / max(u, 1e-10) and adds log(1e10) to
the LSE (the same scores), and evaluates u in a form without the literal one's cancellation
(``_math.magicpig_weight``, which states its error bound: |d log u| <= 2e-6 from its series and
branches). ``acos`` and ``pow`` are built from portable ops there (upstream Triton 3.6+ has
neither ``tl.math.acos`` nor ``tl.math.pow``). This is the origin kernel's clamp form, not the
paper code's ``log(u + 1e-4)``. Where u is small the fp32 cancellation in the literal
``1 - (1-P)^L - ...`` is real: a reference computing that form in fp32 errs there (compare with a
tolerance that allows it).
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from ._callcache import CallCache
from ._checks import LaunchPlan, check_tensor, launch
from .sparse_paged_decode import run_sparse_paged, sparse_kernel_plan


def magicpig_decode_plan(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                         kv_page_indices: torch.Tensor, sparse_ind: torch.Tensor,
                         sparse_nnz: torch.Tensor, K: torch.Tensor, L: torch.Tensor,
                         out: torch.Tensor, lse: Optional[torch.Tensor], *, layout: str,
                         scale: float, num_splits: Optional[int] = None,
                         interpret: Optional[bool] = None) -> LaunchPlan:
    """The launch chain for validated inputs and allocated outputs (``lse`` None: no LSE)."""
    return sparse_kernel_plan(q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind, sparse_nnz,
                              out, lse, layout=layout, scale=scale, K=K, L=L,
                              num_splits=num_splits, interpret=interpret)


def magicpig_decode(q: torch.Tensor, kv_cache: torch.Tensor, kv_page_indptr: torch.Tensor,
                    kv_page_indices: torch.Tensor, sparse_ind: torch.Tensor,
                    sparse_nnz: torch.Tensor, K: torch.Tensor, L: torch.Tensor, *,
                    layout: str = "HND", kv_last_page_len: Optional[torch.Tensor] = None,
                    scale: Optional[float] = None, return_lse: bool = False,
                    out: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                    num_splits: Optional[int] = None, check_indices: bool = True,
                    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """MagicPIG decode: as ``sparse_paged_decode`` plus the LSH parameters K, L [B, Hq] (fp32, > 0;
    integers in practice, floats allowed) whose collision probability corrects each score.

    ``check_indices=False`` skips the data-dependent checks (page table, token positions, and
    K, L finite and > 0).
    """
    fn = "magicpig_decode"

    def check_lsh(B: int, Hq: int) -> None:
        for name, t in (("K", K), ("L", L)):
            check_tensor(fn, name, t, rank=2, dims="[B, Hq]", dtypes=(torch.float32,),
                         device=q.device, like="q", shape=(B, Hq))

    def lsh_values():
        # min/max of K and L read in the validation's one sync; NaN propagates into both.
        def ok(vals) -> bool:
            return all(mn > 0 and mx < math.inf for mn, mx in (vals[0:2], vals[2:4]))

        def raise_first() -> None:
            for name, t in (("K", K), ("L", L)):
                bad = ~(torch.isfinite(t) & (t > 0))
                if bool(bad.any()):
                    pos = [int(i) for i in bad.nonzero()[0]]
                    raise ValueError(f"{fn}: {name} values must be finite and > 0, got "
                                     f"{t[tuple(pos)].item()} at index {pos}")
        return [*torch.aminmax(K), *torch.aminmax(L)], ok, raise_first

    return run_sparse_paged(fn, _CALLS, q, kv_cache, kv_page_indptr, kv_page_indices, sparse_ind,
                            sparse_nnz, K, L, layout=layout, kv_last_page_len=kv_last_page_len,
                            scale=scale, return_lse=return_lse, out=out, lse=lse,
                            num_splits=num_splits, check_indices=check_indices,
                            extra_checks=check_lsh, extra_values=lsh_values, launcher=launch)


_CALLS = CallCache("magicpig_decode")
