"""Vendor attention operators wrapped as implementations of the families they fit, so they get
conformance rows like any kernel (``--impl prefill=sdpa``): does the vendor's own op meet the
suite's tolerances? They produce no LSE: cases that ask for one are skipped (``Unsupported``)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import BaselineUnavailable
from ..interfaces import Unsupported


def _no_lse(name: str, return_lse: bool) -> None:
    if return_lse:
        raise Unsupported(f"{name} returns no LSE")


def _write(o: torch.Tensor, out):
    if out is None:
        return o
    out.copy_(o.view(out.shape))
    return out


def _sdpa(q, k, v, causal: bool, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                          enable_gqa=k.shape[1] != q.shape[1])


def sdpa_prefill(q, k, v, *, causal, scale=None, return_lse=False, out=None, lse=None):
    """torch SDPA (whatever backend torch picks on this device) as a prefill implementation."""
    _no_lse("torch SDPA", return_lse)
    return _write(_sdpa(q, k, v, causal, scale), out), None


def sdpa_decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """torch SDPA as a decode implementation (one query row, nothing masked)."""
    _no_lse("torch SDPA", return_lse)
    return _write(_sdpa(q, k, v, False, scale), out), None


def npu_fusion_attention_prefill(q, k, v, *, causal, scale=None, return_lse=False, out=None, lse=None):
    """torch_npu.npu_fusion_attention as a prefill implementation (never run on an NPU here)."""
    from . import npu

    _no_lse(npu.FUSION_ATTENTION, return_lse)
    try:
        o, _ = npu.fusion_attention(q, k, v, causal=causal, scale=scale)
    except BaselineUnavailable as exc:
        raise Unsupported(str(exc)) from None
    return _write(o, out), None
