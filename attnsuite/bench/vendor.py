"""The vendor baselines a bench case is timed against, per device kind: SDPA FLASH and CUDNN on
CUDA; npu_fusion_attention (prefill) or npu_fused_infer_attention_score (decode) on NPU. Each is
a zero-argument callable over the case's dense equivalent, built (and tried once) outside the
timing; one that cannot run here is reported with its reason instead."""
from __future__ import annotations

from typing import Callable, Optional

import torch

from attnsuite.baselines import BaselineUnavailable


def vendor_baselines(device, problem: Optional[dict]) -> dict[str, tuple]:
    """name -> (callable, note) or (None, reason): the device's own vendor baselines."""
    return device.vendor_baselines(problem) if problem else {}


def sdpa_baselines(problem: dict) -> dict[str, tuple]:
    """CUDA: torch SDPA pinned to each backend of attnsuite.baselines.cuda."""
    from attnsuite.baselines.cuda import BACKENDS, sdpa_call

    q, k, v, causal = problem["q"], problem["k"], problem["v"], problem.get("causal", False)
    return _built({name: (lambda n=name: sdpa_call(n, q, k, v, causal=causal)) for name in BACKENDS},
                  problem.get("note"))


def npu_baselines(problem: dict) -> dict[str, tuple]:
    """NPU: npu_fusion_attention (prefill) or npu_fused_infer_attention_score (decode)."""
    q, k, v, causal = problem["q"], problem["k"], problem["v"], problem.get("causal", False)
    return _built({_npu_name(q): lambda: _npu_call(q, k, v, causal)}, problem.get("note"))


def _built(builders: dict[str, Callable], base_note: Optional[str]) -> dict[str, tuple]:
    out = {}
    for name, build in builders.items():
        try:
            fn, note = build()
            out[name] = (fn, "; ".join(n for n in (base_note, note) if n) or None)
        except BaselineUnavailable as exc:
            out[name] = (None, str(exc))
    return out


def _npu_name(q) -> str:
    from attnsuite.baselines import npu

    return npu.FUSED_INFER if q.shape[2] == 1 else npu.FUSION_ATTENTION


def _npu_call(q, k, v, causal):
    from attnsuite.baselines import npu

    torch_npu = npu.import_torch_npu()
    if q.shape[2] == 1:
        call = npu.fused_infer_args(q, k, v, scale_keyword=npu.scale_keyword(npu._fused_infer_argument_names()))
    else:
        call = npu.fusion_attention_args(q, k, v, causal=causal)
    npu.run(call, torch_npu)  # once, so a failure is reported here rather than mid-timing
    return (lambda: npu.run(call, torch_npu)), None


def elsize(t) -> int:
    return t.element_size()
