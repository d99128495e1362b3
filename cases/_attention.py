"""Input generation shared by the dense attention families (prefill, decode)."""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import torch

#: Bulk tensors: at least this many elements. On the host they are drawn in chunks of CHUNK
#: elements, each chunk from its own generator seeded by one draw of the case's, on several
#: threads. torch.randn with a generator runs on one core: a bench-sized paged cache (2 x 491M
#: values) took 10-13 s of a case's time that way. The chunks are fixed, so the values do not
#: depend on the thread count.
CHUNKED_FROM = 1 << 21
CHUNK = 1 << 20


def on_accelerator(device) -> bool:
    return device is not None and torch.device(device).type != "cpu"


def randn(gen: torch.Generator, shape, dtype: torch.dtype, device=None) -> torch.Tensor:
    """Standard normal values of ``dtype``. Small tensors are drawn on the host from ``gen`` and
    are the same on every device. Bulk tensors, given an accelerator ``device``, are drawn there
    by its own generator (``device_randn``): milliseconds instead of seconds of host time."""
    # Drawn in fp32 then rounded, so a case's values do not depend on the dtype's RNG path.
    n = math.prod(shape)
    if n < CHUNKED_FROM:
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
    # The same draws from gen either way: the case's later (small) tensors stay device-independent.
    seeds = torch.randint(0, 2**62, (math.ceil(n / CHUNK),), generator=gen).tolist()
    if on_accelerator(device):
        drawn = device_randn(seeds[0], shape, dtype, device)
        if drawn is not None:
            return drawn
    out = torch.empty(n, dtype=dtype)

    def fill(i: int) -> None:
        part = out[i * CHUNK:(i + 1) * CHUNK]
        chunk_gen = torch.Generator().manual_seed(seeds[i])
        part.copy_(torch.randn(part.numel(), generator=chunk_gen, dtype=torch.float32))

    with ThreadPoolExecutor(max_workers=max(1, torch.get_num_threads())) as pool:
        list(pool.map(fill, range(len(seeds))))
    return out.view(shape) if device is None else out.view(shape).to(device)


def device_randn(seed: int, shape, dtype: torch.dtype, device) -> torch.Tensor | None:
    """Bulk standard normal values drawn on ``device`` by its own generator seeded with ``seed``,
    straight into ``dtype``; None where torch has no generator for that device (the caller
    draws on the host and copies). The same on every run on the same kind of device, not the
    host's values: a CUDA draw also depends on the GPU's SM count (the launch grid of torch's
    RNG kernel)."""
    try:
        gen = torch.Generator(device=device)
    except RuntimeError:
        return None
    return torch.empty(shape, dtype=dtype, device=device).normal_(generator=gen.manual_seed(seed))


def qkv(gen: torch.Generator, B: int, Hq: int, Hkv: int, Sq: int, Skv: int, D: int, dtype,
        device=None) -> dict:
    return {
        "q": randn(gen, (B, Hq, Sq, D), dtype, device),
        "k": randn(gen, (B, Hkv, Skv, D), dtype, device),
        "v": randn(gen, (B, Hkv, Skv, D), dtype, device),
    }


def heads(B: int, Hq: int, Hkv: int) -> str:
    return f"B{B}-Hq{Hq}-Hkv{Hkv}"


def lse_if(case, o: torch.Tensor, lse) -> dict:
    """The outputs a case checks: ``o``, plus ``lse`` when the case asks for it."""
    return {"o": o, "lse": lse} if case["lse"] else {"o": o}


def attention_outputs(case, o_shape: tuple, lse_shape: tuple) -> dict:
    """Output specs: ``o`` in the case dtype, plus an fp32 ``lse`` when the case asks for it."""
    specs = {"o": (tuple(o_shape), case.dtype)}
    if case["lse"]:
        specs["lse"] = (tuple(lse_shape), torch.float32)
    return specs


def dense_stand_in(q, heads: int, n_keys: int, note: str) -> dict:
    """A dense problem of the same size as a paged or sparse decode, for the vendor baselines:
    q as [B, Hq, 1, D] and K/V [B, heads, n_keys, D] of random values. Only its shape matters for
    timing; it is built here, so gathering the selected rows is not part of any timed call."""
    q4 = q if q.dim() == 4 else q[:, :, None, :]
    B, _, _, D = q4.shape
    k = torch.randn((B, heads, max(int(n_keys), 1), D), dtype=q.dtype, device=q.device)
    return {"q": q4.contiguous(), "k": k, "v": torch.randn_like(k), "causal": False, "note": note}


def score_bound(q: torch.Tensor, keys: torch.Tensor, scale: float, correction: float = 0.0) -> float:
    """An upper bound on |score| = |scale * q . k| + correction over every query row of ``q`` and
    key row of ``keys`` ([..., D]; rows holding NaN, cache slots no token owns, left out):
    Cauchy-Schwarz, scale * max |q| * max |k| (attnsuite/tolerance.py, ``score_bound``)."""
    def largest_norm(t: torch.Tensor) -> float:
        rows = t.reshape(-1, t.shape[-1]).double()
        rows = rows[torch.isfinite(rows).all(-1)]
        return float(torch.linalg.vector_norm(rows, dim=-1).max()) if rows.numel() else 0.0

    return abs(scale) * largest_norm(q) * largest_norm(keys) + correction
