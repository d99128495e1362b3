"""torch's ``scaled_dot_product_attention``, pinned to one backend (flash, efficient, cuDNN,
math) with ``torch.nn.attention.sdpa_kernel``, or left to torch's own choice (``sdpa``).

SDPA returns no LSE. Where a case asks for one, the flash, efficient and cuDNN adapters call the
backend's own op (``aten._scaled_dot_product_flash_attention`` and ``..._for_cpu``,
``..._efficient_attention``, ``..._cudnn_attention``): each returns the natural-log logsumexp
of the scaled scores its backward pass uses, the suite's base, in fp32 (padded on the sequence
axis by some backends: sliced). Those ops take no GQA, so K/V are repeated to the query heads
first (a copy, noted). The math backend and ``sdpa`` have no LSE: ``Unsupported``.

Varlen and paged cases are served the way an SDPA user would: one call per sequence on views
(varlen), or a gather of the pages into a dense cache first (paged; a copy, noted, done in
``prepare`` so it is outside a timed ``launch``).
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from ._adapter import note, staged
from .library import Library
from ._layout import check_dtype, expand_heads, gather_dense, write
from ..interfaces import Unsupported

#: gpu_tested: the full profile on a lent H100 (torch 2.11), docs/hardware-log.md.
LIBRARY = Library("torch SDPA", "torch", "torch", written_against="2.11 (CUDA), 2.13 (CPU)", gpu_tested=True)

#: name -> SDPBackend member (None: torch picks).
BACKENDS = {"sdpa": None, "sdpa_flash": "FLASH_ATTENTION", "sdpa_efficient": "EFFICIENT_ATTENTION",
            "sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_math": "MATH"}
_NO_KERNEL = ("No available kernel", "No viable backend")


def _lse_op(backend: str | None, device_type: str):
    """(op, output index of the LSE) for a backend that exposes one, or ``Unsupported``."""
    aten = torch.ops.aten
    if backend == "FLASH_ATTENTION":
        if device_type == "cpu":
            return lambda q, k, v, causal, scale: aten._scaled_dot_product_flash_attention_for_cpu(
                q, k, v, 0.0, causal, scale=scale)
        return lambda q, k, v, causal, scale: aten._scaled_dot_product_flash_attention(
            q, k, v, 0.0, causal, False, scale=scale)
    if backend == "EFFICIENT_ATTENTION":
        return lambda q, k, v, causal, scale: aten._scaled_dot_product_efficient_attention(
            q, k, v, None, True, 0.0, causal, scale=scale)
    if backend == "CUDNN_ATTENTION":
        return lambda q, k, v, causal, scale: aten._scaled_dot_product_cudnn_attention(
            q, k, v, None, True, 0.0, causal, False, scale=scale)
    raise Unsupported("torch SDPA returns no LSE" + (" (nor does its math backend)" if backend else
                      " (pin a backend: sdpa_flash, sdpa_efficient and sdpa_cudnn return one)"))


def _context(backend: str | None):
    from contextlib import nullcontext

    from torch.nn.attention import SDPBackend, sdpa_kernel

    return nullcontext() if backend is None else sdpa_kernel(getattr(SDPBackend, backend))


def _public(backend, q, k, v, causal, scale):
    """F.scaled_dot_product_attention pinned to ``backend``; a backend that refuses the case is
    ``Unsupported`` with torch's reasons (its warnings), never a failure."""
    gqa = k.shape[1] != q.shape[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _context(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=gqa)
        except RuntimeError as exc:
            if not any(m in str(exc) for m in _NO_KERNEL):
                raise
            why = "; ".join(str(w.message).splitlines()[0] for w in caught if "not used because" in str(w.message))
            raise Unsupported(f"torch SDPA {backend or 'auto'}: no kernel takes this case on "
                              f"{q.device.type} ({why or str(exc).splitlines()[0]})") from None


def _attend(backend, q, k, v, *, causal: bool, scale, want_lse: bool):
    """A zero-argument call returning (o [B, Hq, Sq, D], lse [B, Hq, Sq] fp32 or None)."""
    if not want_lse:
        if backend is not None and k.shape[1] != q.shape[1]:
            # Some backends refuse enable_gqa (torch's version and the GPU decide): ask once, here
            # in prepare, and repeat the K/V heads (a copy, noted) only for a backend that does.
            try:
                _public(backend, q, k, v, causal, scale)
            except Unsupported:
                k, v = expand_heads(k, v, q.shape[1])
        return lambda: (_public(backend, q, k, v, causal, scale), None)
    op = _lse_op(backend, q.device.type)
    if backend != "FLASH_ATTENTION" and q.device.type != "cuda":
        raise Unsupported(f"torch SDPA {backend}: a CUDA backend ({q.device.type} tensors)")
    kx, vx = expand_heads(k, v, q.shape[1])
    _public(backend, q, kx, vx, causal, scale)  # does the backend take the case at all?
    note(f"lse: from torch.ops.aten (the {backend} backend's own op; natural log like the suite's)")
    S = q.shape[2]

    def launch():
        res = op(q, kx, vx, causal, scale)
        return res[0], res[1].reshape(q.shape[0], q.shape[1], -1)[..., :S]
    return launch


def _dense(backend):
    def prepare(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
        call = _attend(backend, q, k, v, causal=causal and q.shape[2] > 1, scale=scale, want_lse=return_lse)

        def launch():
            o, l = call()
            return write(out, o), (write(lse, l.float(), "lse") if return_lse else None)
        return launch
    return prepare


def _decode(backend):
    dense = _dense(backend)

    def prepare(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
        return dense(q, k, v, causal=False, scale=scale, return_lse=return_lse, out=out, lse=lse)
    return prepare


def _fill_empty(out_rows, lse_rows):
    out_rows.zero_()
    if lse_rows is not None:
        lse_rows.fill_(float("-inf"))


def _varlen(backend):
    def prepare(q, k, v, seq, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
        check_dtype(LIBRARY.name, q, (torch.float16, torch.bfloat16, torch.float32))
        note("varlen: one SDPA call per sequence, on views of the inputs")
        if q.dim() == 4:  # padded: lengths [B]
            bounds = [(b, 0, int(n)) for b, n in enumerate(seq.tolist())]
            view = lambda x, b, s, e: x[b:b + 1, :, s:e]
            note("padded rows past a sequence's length: written as zeros (LSE -inf) by the adapter")
        else:  # packed: cu_seqlens [B + 1]
            cu = seq.tolist()
            bounds = [(None, cu[b], cu[b + 1]) for b in range(len(cu) - 1)]
            view = lambda x, b, s, e: x[s:e].transpose(0, 1).unsqueeze(0)
        calls = [(b, s, e, _attend(backend, view(q, b, s, e), view(k, b, s, e), view(v, b, s, e),
                                   causal=causal and e - s > 1, scale=scale, want_lse=return_lse))
                 for b, s, e in bounds if e > s]

        def launch():
            o_all = out if out is not None else torch.empty_like(q)
            l_all = lse if lse is not None or not return_lse else \
                torch.empty(q.shape[:-1] if q.dim() == 4 else q.shape[:2], dtype=torch.float32, device=q.device)
            if q.dim() == 4:
                for b, n in enumerate(seq.tolist()):
                    _fill_empty(o_all[b, :, n:], l_all[b, :, n:] if return_lse else None)
            for b, s, e, call in calls:
                o, l = call()
                if b is not None:
                    o_all[b, :, s:e] = o[0]
                    if return_lse:
                        l_all[b, :, s:e] = l[0]
                else:
                    o_all[s:e] = o[0].transpose(0, 1)
                    if return_lse:
                        l_all[s:e] = l[0].transpose(0, 1)
            return o_all, (l_all if return_lse else None)
        return launch
    return prepare


def _paged(backend):
    def prepare(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND", scale=None,
                return_lse=False, out=None, lse=None):
        k, v, lengths = gather_dense(kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, layout)
        note("paged: one SDPA call per sequence over its gathered K/V")
        calls = [(b, _attend(backend, q[b:b + 1, :, None], k[b:b + 1, :, :n], v[b:b + 1, :, :n],
                             causal=False, scale=scale, want_lse=return_lse))
                 for b, n in enumerate(lengths) if n]
        if any(n == 0 for n in lengths):
            note("sequences without pages: written as zeros (LSE -inf) by the adapter")

        def launch():
            o_all = out if out is not None else torch.empty_like(q)
            l_all = lse if lse is not None or not return_lse else \
                torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)
            for b, n in enumerate(lengths):
                if n == 0:
                    _fill_empty(o_all[b], l_all[b] if return_lse else None)
            for b, call in calls:
                o, l = call()
                o_all[b] = o[0, :, 0]
                if return_lse:
                    l_all[b] = l[0, :, 0]
            return o_all, (l_all if return_lse else None)
        return launch
    return prepare


IMPLS = {
    "prefill": {name: staged(LIBRARY, _dense(b)) for name, b in BACKENDS.items()},
    "decode": {name: staged(LIBRARY, _decode(b)) for name, b in BACKENDS.items()},
    "prefill_varlen": {name: staged(LIBRARY, _varlen(b)) for name, b in BACKENDS.items()},
    "paged_decode": {name: staged(LIBRARY, _paged(b)) for name, b in BACKENDS.items()},
}
