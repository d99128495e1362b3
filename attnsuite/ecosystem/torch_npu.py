"""Ascend's fused attention operators (torch_npu) as implementations: ``npu_fusion_attention``
(prefill, no LSE) and ``npu_fused_infer_attention_score`` (decode and paged decode, with its
natural-log ``softmax_lse``). The argument building lives in ``attnsuite/baselines/npu.py``
(shared with the benchmarks' vendor baselines); this module maps its ``BaselineUnavailable``
(a case outside the operator's documented limits) to ``Unsupported``.

Never run on an NPU by this project (see the README).
"""
from __future__ import annotations

from ._adapter import note, staged
from .library import Library
from ._layout import write
from ..baselines import BaselineUnavailable
from ..interfaces import Unsupported

LIBRARY = Library("torch_npu", "torch_npu", "torch-npu",
                  written_against="Ascend Extension for PyTorch docs (op-plugin); not yet run on an NPU")


def _run(build):
    """Build the call (documented limits checked) in prepare, run it in launch."""
    from ..baselines import npu

    torch_npu = LIBRARY.load()
    try:
        call = build(npu)
    except BaselineUnavailable as exc:
        raise Unsupported(str(exc)) from None
    return lambda: npu.run(call, torch_npu)


def _fusion_prefill(q, k, v, *, causal=False, scale=None, return_lse=False, out=None, lse=None):
    from ..baselines.npu import FUSION_ATTENTION

    if return_lse:
        raise Unsupported(f"{FUSION_ATTENTION} returns no LSE (its softmax max/sum are for the backward pass)")
    run = _run(lambda npu: npu.fusion_attention_args(q, k, v, causal=causal, scale=scale))
    return lambda: (write(out, run()[0]), None)


def _infer_decode(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    def build(npu):
        return npu.fused_infer_args(q, k, v, scale=scale, lse=return_lse,
                                    scale_keyword=npu.scale_keyword(npu._fused_infer_argument_names()))
    run = _run(build)

    def launch():
        o, l = run()
        return write(out, o), (write(lse, l.float(), "lse") if return_lse else None)
    return launch


def _infer_paged(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND", scale=None,
                 return_lse=False, out=None, lse=None):
    def build(npu):
        return npu.paged_fused_infer_args(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len,
                                          layout=layout, scale=scale, lse=return_lse,
                                          scale_keyword=npu.scale_keyword(npu._fused_infer_argument_names()))
    run = _run(build)
    note("kv_cache: K and V copied into separate [pages, Hkv, P, D] pools (the operator's paged layout)")

    def launch():
        o, l = run()
        return write(out, o), (write(lse, l.float(), "lse") if return_lse else None)
    return launch


IMPLS = {
    "prefill": {"npu_fusion_attention": staged(LIBRARY, _fusion_prefill)},
    "decode": {"npu_fused_infer": staged(LIBRARY, _infer_decode)},
    "paged_decode": {"npu_fused_infer": staged(LIBRARY, _infer_paged)},
}
