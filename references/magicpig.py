"""MagicPIG sampled decode reference (docs/contract.md section 7), vectorized PyTorch.

Same selection and paged gather as ``sparse_paged_decode_reference``; each selected key's score is
corrected by the log of its LSH collision probability. This suite uses the CLAMP form (the
origin kernel's), not the MagicPIG paper's ``log(u + 1e-4)``:

    c = clamp(q.k / (|q| |k| + 1e-8), -1 + 1e-7, 1 - 1e-7)
    p = clamp(1 - acos(c) / pi, 0, 1)
    P = p ** K
    u = max(1 - (1 - P) ** L - L * P * (1 - P) ** (L - 1), 1e-10)
    score = (q.k) * scale - log(u)

o = softmax(score over the selected multiset) @ V, lse = logsumexp(score) (natural log).

The spec's reference values (K=10, L=150: cos 0.0 -> 9.684e-3, 0.5 -> 0.73555, 0.7 -> 0.99768)
are ``u`` itself, the collision probability before either the clamp or the ``+ 1e-4``: the two
forms give the same ``u`` there and differ only inside the log (u + 1e-4 would read 9.784e-3,
0.73565, 0.99778). ``magicpig_u`` computes the clamp-form ``u``.
"""
from __future__ import annotations

import math
from typing import Optional, Union

import torch

from .paged import _sparse_paged

COS_EPS = 1e-7
NORM_EPS = 1e-8
U_FLOOR = 1e-10

Number = Union[float, torch.Tensor]


def magicpig_u(cos: Number, K: Number, L: Number) -> torch.Tensor:
    """Clamp-form collision probability u for cosine ``cos`` (clamped to [-1+1e-7, 1-1e-7]).

    Arguments broadcast; plain numbers become float64 tensors. Uses torch.acos and torch.pow.
    """
    cos = torch.as_tensor(cos, dtype=torch.float64) if not isinstance(cos, torch.Tensor) else cos
    K = torch.as_tensor(K, dtype=cos.dtype, device=cos.device)
    L = torch.as_tensor(L, dtype=cos.dtype, device=cos.device)
    c = cos.clamp(-1 + COS_EPS, 1 - COS_EPS)
    p = (1 - torch.acos(c) / math.pi).clamp(0, 1)
    P = torch.pow(p, K)
    u = 1 - torch.pow(1 - P, L) - L * P * torch.pow(1 - P, L - 1)
    return u.clamp_min(U_FLOOR)


def magicpig_decode_reference(q: torch.Tensor, kv_cache: torch.Tensor, indptr: torch.Tensor,
                              indices: torch.Tensor, sparse_ind: torch.Tensor,
                              sparse_nnz: torch.Tensor, K: torch.Tensor, L: torch.Tensor, *,
                              layout: str = "HND", scale: Optional[float] = None,
                              compute_dtype: torch.dtype = torch.float64,
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, Hq, D], paged cache as in references/paged.py, sparse_ind [B, Hq, L_max] logical
    positions (first sparse_nnz[b, h] valid, multiset), K/L [B, Hq] -> (o [B, Hq, D], lse [B, Hq]).

    The score dot product, softmax and output run in ``compute_dtype``. The correction (cosine,
    acos, pow, u, log u) runs in ``compute_dtype`` promoted to at least float32, as the contract
    computes it: in float16 the 1e-10 floor of u would underflow to 0 (score +inf, NaN output)
    and the cancellation in u would be pure noise.
    """
    corr_dtype = torch.promote_types(compute_dtype, torch.float32)
    K = K.to(corr_dtype).unsqueeze(-1).unsqueeze(-1)                            # [B, Hq, 1, 1]
    L = L.to(corr_dtype).unsqueeze(-1).unsqueeze(-1)

    def log_u(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        # q [B, Hq, 1, D], k [B, Hq, N, D] (input dtype) -> log u [B, Hq, 1, N] (corr_dtype)
        q, k = q.to(corr_dtype), k.to(corr_dtype)
        dot = q @ k.transpose(-1, -2)
        norms = torch.linalg.vector_norm(q, dim=-1, keepdim=True) * \
            torch.linalg.vector_norm(k, dim=-1).unsqueeze(-2)
        return torch.log(magicpig_u(dot / (norms + NORM_EPS), K, L))

    return _sparse_paged("magicpig_decode_reference", q, kv_cache, indptr, indices, sparse_ind,
                         sparse_nnz, layout=layout, scale=scale, compute_dtype=compute_dtype,
                         score_correction=log_u)
