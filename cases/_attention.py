"""Input generation shared by the dense attention families (prefill, decode)."""
from __future__ import annotations

import torch


def randn(gen: torch.Generator, shape, dtype: torch.dtype) -> torch.Tensor:
    # Drawn in fp32 then rounded, so a case's values do not depend on the dtype's RNG path.
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)


def qkv(gen: torch.Generator, B: int, Hq: int, Hkv: int, Sq: int, Skv: int, D: int, dtype) -> dict:
    return {
        "q": randn(gen, (B, Hq, Sq, D), dtype),
        "k": randn(gen, (B, Hkv, Skv, D), dtype),
        "v": randn(gen, (B, Hkv, Skv, D), dtype),
    }


def heads(B: int, Hq: int, Hkv: int) -> str:
    return f"B{B}-Hq{Hq}-Hkv{Hkv}"
