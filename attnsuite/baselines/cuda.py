"""CUDA baselines: torch's scaled_dot_product_attention pinned to one backend (FLASH or CUDNN).

Inputs are the dense problem a case is equivalent to (``Family.vendor_problem``): q [B, Hq, Sq,
D], k/v [B, Hkv, Sk, D], causal or not. GQA goes through ``enable_gqa``; where a backend refuses
it, K/V are expanded to Hq heads once, outside the timed call, and the note says so.
"""
from __future__ import annotations

from typing import Callable

import torch

from . import BaselineUnavailable

BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}


class Pinned:
    """A call that must run inside a context (SDPA pinned to one backend). Calling it enters the
    context each time; a timer enters ``context()`` once around its timing and times ``bare``,
    so SDPA's host time is the call a serving loop makes, not the context manager's cost."""

    def __init__(self, bare: Callable[[], torch.Tensor], context: Callable):
        self.bare, self.context = bare, context

    def __call__(self):
        with self.context():
            return self.bare()


def sdpa_call(name: str, q, k, v, *, causal: bool) -> tuple[Callable[[], torch.Tensor], str | None]:
    """A zero-argument call of SDPA on backend ``name`` and a note, after checking it runs."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, BACKENDS[name])
    # Decode (one query) with causal=True would mask all but the first key: never causal there.
    causal = causal and q.shape[2] > 1
    note = None

    def bare(kk=k, vv=v, gqa=k.shape[1] != q.shape[1]):
        return torch.nn.functional.scaled_dot_product_attention(q, kk, vv, is_causal=causal, enable_gqa=gqa)

    def context():
        return sdpa_kernel(backend)

    def call(kk=k, vv=v, gqa=k.shape[1] != q.shape[1]):
        with context():
            return bare(kk, vv, gqa)

    try:
        call()
    except RuntimeError as exc:
        if k.shape[1] == q.shape[1]:
            raise BaselineUnavailable(f"{name}: {str(exc).splitlines()[0]}") from None
        group = q.shape[1] // k.shape[1]
        kx, vx = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        note = "K/V expanded to the query heads outside the timing (backend refused enable_gqa)"
        try:
            call(kx, vx, False)
        except RuntimeError as exc2:
            raise BaselineUnavailable(f"{name}: {str(exc2).splitlines()[0]}") from None
        return Pinned(lambda: bare(kx, vx, False), context), note
    return Pinned(bare, context), note
