"""The one pass/fail policy for every family.

For each output tensor the harness has three versions of the same math on the same
low-precision inputs:
  * ``ref``  - the reference in float64 (the truth),
  * ``base`` - the same reference run by plain PyTorch in the input dtype (what a careful
               non-fused implementation achieves on this device),
  * ``out``  - the implementation under test.
The allowed error is ``FACTOR * max|base - ref| + floor`` with ``floor = u * max(1, max|ref|)``
(``u`` the unit roundoff of the input dtype: fp16 2^-11, bf16 2^-8, fp32 2^-24). This is the
FlashAttention test rule (at most twice the error of the plain implementation, plus a small
floor) with the floor tied to the dtype instead of a fixed constant.

Scores beyond the input dtype (``score_bound``): for a softmax output, any implementation holds
the scores (and the running max, and a split's LSE) in fp32 at best, so each carries an absolute
error of about ``u32 * |score|``, which becomes a relative error of the softmax weights of the same
size (exp(s + e) = exp(s) (1 + e)) and an output error of about ``u32 * max|score| * |v|``. The
plain input-dtype baseline normally errs far more than that and covers it, but when its scores
overflow (fp16 past 65504: the baseline is NaN where the reference is finite, and those elements
are left out of ``b``) or its softmax happens to be exact (one-hot rows), ``b`` is 0 and says
nothing about what fp32 arithmetic can reach. So the baseline error used is
``max(b, u32 * score_bound * max(1, max|ref|))``, ``score_bound`` an upper bound on |score| the
family computes from the inputs (scale * max |q| * max |k|, plus MagicPIG's largest correction;
``Family.score_bound``). Found by the fuzz profile: MagicPIG cases with q scaled by 64 and keys
parallel to it (scores ~65536, the fp16 baseline all NaN) where the split-KV merge of the spec
(partial LSEs of magnitude ~9e4 in fp32, each rounded by ~0.004) moved the weights by ~0.4%.
For scores of ordinary size the term is below 1e-5 of the output and changes nothing.

Non-finite values: where the reference is finite the output must be finite (the harness
pre-fills outputs with NaN, so an element the kernel never writes fails here); where the
reference is +-inf (e.g. the LSE of an empty row) the output must be the same infinity.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

FACTOR = 2.0
POLICY = "2x-baseline+floor"

UNIT_ROUNDOFF = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}


@dataclass
class Comparison:
    name: str
    ok: bool
    max_abs_err: float
    baseline_err: float
    allowed: float
    headroom: float
    floor: float
    unit_roundoff: float
    reason: str = ""
    #: u32 * score_bound * max(1, max|ref|): what fp32 scores of that size cost (0: no bound).
    score_err: float = 0.0
    #: max |out - ref| / (|ref| + 1e-8) over the finite reference: never judged, reported for
    #: FlashInfer-Trace, whose ``max_relative_error`` is this figure (flashinfer_bench/bench/utils.py).
    max_rel_err: float = math.nan

    def metrics(self) -> dict:
        d = asdict(self)
        del d["name"], d["ok"], d["reason"]
        return d


def unit_roundoff(dtype: torch.dtype) -> float:
    try:
        return UNIT_ROUNDOFF[dtype]
    except KeyError:
        raise ValueError(f"no unit roundoff for {dtype}") from None


def headroom(allowed: float, measured: float) -> float:
    if measured == 0.0:
        return math.inf
    return allowed / measured


def _first_index(mask: torch.Tensor) -> tuple:
    return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, base: torch.Tensor,
            input_dtype: torch.dtype, score_bound: float | None = None) -> Comparison:
    """Judge one output tensor; never raises for a numeric problem, returns the verdict.
    ``score_bound``: an upper bound on |score| of a softmax output (module doc), else None."""
    u = unit_roundoff(input_dtype)
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(name, False, math.nan, math.nan, math.nan, 0.0, math.nan, u,
                          f"{name}: shape {list(out.shape)} != reference shape {list(ref.shape)}")
    # On the reference's device: a full output copied to the host and reduced there costs more
    # than the kernel and the reference together on a GPU shared by several workers.
    out64, ref64, base64 = (t.detach().to(ref.device, torch.float64) for t in (out, ref, base))

    # Every figure in one read from the device: with 16 workers time-slicing one GPU, each read
    # waits for a turn. With a read per figure (about ten a tensor) the comparisons of the full
    # profile under -n 16 took 99.5 worker-seconds on an H100, 38 ms a case (5.5 ms a case in one
    # process, over three families' full profile); with one read, 38.3 worker-seconds (the same
    # machine).
    ref_finite = torch.isfinite(ref64)
    out_ok = ref_finite & torch.isfinite(out64)
    diff = (out64 - ref64).abs()
    bad_finite = ref_finite & ~torch.isfinite(out64)
    bad_inf = ~ref_finite & ~(out64 == ref64) & ~(torch.isnan(out64) & torch.isnan(ref64))
    scale, base_err, err, rel, n_bad_finite, n_bad_inf = torch.stack([
        _masked_max(ref64.abs(), ref_finite),
        _masked_max((base64 - ref64).abs(), ref_finite & torch.isfinite(base64)),
        _masked_max(diff, out_ok),
        _masked_max(diff / (ref64.abs() + 1e-8), out_ok),
        bad_finite.sum().to(torch.float64),
        bad_inf.sum().to(torch.float64)]).tolist()
    floor = u * max(1.0, scale)
    score_err = score_error(score_bound, scale)
    allowed = FACTOR * max(base_err, score_err) + floor

    reason = ""
    if n_bad_finite:
        kind = "NaN" if bool(torch.isnan(out64[bad_finite]).any()) else "Inf"
        reason = (f"{name}: {int(n_bad_finite)} non-finite value(s) ({kind}) where the reference is finite, "
                  f"first at {_first_index(bad_finite)} (NaN here can mean an element the kernel never wrote)")
        err = math.inf
    elif n_bad_inf:
        idx = _first_index(bad_inf)
        reason = (f"{name}: reference is {float(ref64[idx])} at {idx} but output is {float(out64[idx])}")
        err = math.inf
    elif err > allowed:
        idx = _first_index(out_ok & (diff == err)) if err > 0 else ()
        used = (f"baseline {base_err:.3e}" if base_err >= score_err
                else f"fp32 score error {score_err:.3e} (baseline {base_err:.3e})")
        reason = (f"{name}: max abs err {err:.3e} > allowed {allowed:.3e} "
                  f"(= {FACTOR:g} x {used} + floor {floor:.3e}) at {idx}: "
                  f"got {float(out64[idx]):.6g}, reference {float(ref64[idx]):.6g}")
    if err == math.inf:
        rel = math.inf
    return Comparison(name, reason == "", err, base_err, allowed, headroom(allowed, err), floor, u, reason,
                      score_err, rel)


def score_error(score_bound: float | None, ref_scale: float) -> float:
    """The error fp32 scores of magnitude ``score_bound`` put into a softmax output of magnitude
    ``ref_scale`` (module doc); 0 without a bound."""
    if not score_bound or not math.isfinite(score_bound):
        return 0.0
    return UNIT_ROUNDOFF[torch.float32] * score_bound * max(1.0, ref_scale)


def _masked_max(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """max(values[where]) for values >= 0, as a 0-d tensor on their device; 0 where nothing is selected."""
    if values.numel() == 0:
        return values.new_zeros(())
    return torch.where(where, values, values.new_zeros(())).amax()
