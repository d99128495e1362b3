"""Portable elementwise math for Triton kernels (fp32): acos, pow, log1p, expm1, and the two
MagicPIG probabilities built on them.

Upstream Triton 3.6+ has no ``tl.math.acos`` / ``tl.math.pow`` (CUDA keeps them in libdevice,
triton-ascend in its own extension), so these are built from ``sqrt``, ``exp2``, ``log2``,
``abs`` and ``where``, which every backend has. Where accuracy near 0 matters (log1p, expm1) the
near branch uses only +, *, / (series), so it does not depend on how a backend approximates
log2/exp2 near 1 (CUDA's fast ``lg2.approx`` has an absolute, not relative, error bound).
Constants are literals inside the functions: a Python global would be rejected by the frontend
unless it were a ``tl.constexpr``.
"""
import triton
import triton.language as tl


@triton.jit
def _acos_poly(a):
    # Abramowitz & Stegun 4.4.46: acos(a) = sqrt(1 - a) * poly(a) for a in [0, 1], |error| <= 2e-8.
    poly = a * -0.0012624911 + 0.0066700901
    poly = poly * a - 0.0170881256
    poly = poly * a + 0.0308918810
    poly = poly * a - 0.0501743046
    poly = poly * a + 0.0889789874
    poly = poly * a - 0.2145988016
    return poly * a + 1.5707963050


@triton.jit
def acos_approx(x):
    """acos(x) for fp32 x in [-1, 1], absolute error <= 4e-7 (about 2 fp32 ulps of the result).

    Abramowitz & Stegun 4.4.46: acos(a) = sqrt(1 - a) * (c0 + c1 a + ... + c7 a^7) for 0 <= a <= 1
    (|error| <= 2e-8 in exact arithmetic), and acos(-a) = pi - acos(a).
    """
    a = tl.abs(x)
    r = tl.sqrt(tl.maximum(1.0 - a, 0.0)) * _acos_poly(a)
    return tl.where(x < 0, 3.141592653589793 - r, r)


@triton.jit
def pow_nonneg(base, expo):
    """base ** expo for fp32 base >= 0 and any finite expo, as exp2(expo * log2(base)).

    base == 0 is taken apart (log2(0) = -inf would give NaN for expo == 0, and backends differ on
    log2(0)): 0 ** e = 0 for e > 0, 1 for e == 0, +inf for e < 0, as in torch.pow.
    """
    pos = base > 0
    r = tl.exp2(expo * tl.log2(tl.where(pos, base, 1.0)))
    at_zero = tl.where(expo > 0, 0.0, tl.where(expo == 0, 1.0, float("inf")))
    return tl.where(pos, r, at_zero)


@triton.jit
def simhash_collision_prob(c, one_minus_abs_c):
    """1 - acos(c) / pi for fp32 c in [-1, 1], clamped to [0, 1], given also 1 - |c| (which the
    caller can compute more accurately than from a rounded c when |c| is near 1).

    acos(|c|) = sqrt(1 - |c|) * poly(|c|); for c < 0 the result is acos(|c|) / pi
    (= 1 - (pi - acos(|c|)) / pi), which avoids the cancellation of the literal form near c = -1.
    """
    r = tl.sqrt(tl.maximum(one_minus_abs_c, 0.0)) * _acos_poly(tl.abs(c)) * 0.3183098861837907
    p = tl.where(c < 0, r, 1.0 - r)
    return tl.minimum(tl.maximum(p, 0.0), 1.0)


@triton.jit
def log1p_acc(x):
    """log(1 + x) for fp32 x > -1 with relative accuracy near 0.

    x in [-1/2, 1]: 2 atanh(z) with z = x / (2 + x), |z| <= 1/3, by its odd series (terms to
    z^17: truncation < 1e-9 relative) -- only +, *, / so it does not depend on the accuracy of a
    backend's log near 1. Elsewhere log2(1 + x) * ln 2, where |log(1 + x)| >= 0.4 and 1 + x is
    exact (x <= -1/2) or rounded by one ulp (x > 1). 1 + x is kept >= the smallest normal so that
    log2 never sees 0.
    """
    near = (x >= -0.5) & (x <= 1.0)
    xs = tl.where(near, x, 0.0)
    z = xs / (2.0 + xs)
    z2 = z * z
    s = z2 * 0.058823529411764705 + 0.06666666666666667   # 1/17, 1/15
    s = s * z2 + 0.07692307692307693                       # 1/13
    s = s * z2 + 0.09090909090909091                       # 1/11
    s = s * z2 + 0.1111111111111111                        # 1/9
    s = s * z2 + 0.14285714285714285                       # 1/7
    s = s * z2 + 0.2                                       # 1/5
    s = s * z2 + 0.3333333333333333                        # 1/3
    s = s * z2 + 1.0
    far = tl.log2(tl.maximum(tl.where(near, 1.0, 1.0 + x), 1.1754943508222875e-38)) * 0.6931471805599453
    return tl.where(near, 2.0 * z * s, far)


@triton.jit
def expm1_acc(y):
    """exp(y) - 1 for fp32 y with relative accuracy near 0: Taylor (Horner, to y^10/10!) for
    |y| <= 1/2 (truncation < 3e-10 relative), exp2(y log2 e) - 1 elsewhere (|result| >= 0.39)."""
    near = tl.abs(y) <= 0.5
    ys = tl.where(near, y, 0.0)
    t = ys * 0.1 + 1.0
    t = ys * 0.1111111111111111 * t + 1.0
    t = ys * 0.125 * t + 1.0
    t = ys * 0.14285714285714285 * t + 1.0
    t = ys * 0.16666666666666666 * t + 1.0
    t = ys * 0.2 * t + 1.0
    t = ys * 0.25 * t + 1.0
    t = ys * 0.3333333333333333 * t + 1.0
    t = ys * 0.5 * t + 1.0
    return tl.where(near, ys * t, tl.exp2(y * 1.4426950408889634) - 1.0)


@triton.jit
def two_hit_prob(P, L):
    """u = 1 - (1 - P)^L - L P (1 - P)^(L - 1) for fp32 P in [0, 1] and L > 0, without the
    catastrophic cancellation of that literal form (which in fp32 loses everything once u is below
    ~1e-6 and ~1e-4 relative around u ~ 1e-2).

    With a = L - 1: (1 - P)^L + L P (1 - P)^(L-1) = (1 - P)^a (1 + a P) = exp(y),
    y = a log(1 - P) + log(1 + a P), and u = -expm1(y).
    - max(|a|, 1) * P <= 1/8: y by its power series in P (the k = 1 terms cancel exactly):
      y = sum_{k>=2} ((-1)^(k+1) (aP)^k - a P^k) / k, to k = 10 (truncation < 1e-8 relative).
    - otherwise y from the two accurate logs above (their cancellation costs at most ~16x ulp).
    P == 1 (only when p ** K rounds to 1, i.e. K < ~1e-3) is taken apart as in the literal form:
    u = 1 - L * 0^a = 1, 0, -inf for a > 0, a == 0, a < 0.
    """
    a = L - 1.0
    # Series branch (inputs zeroed on the other branch, so nothing there can overflow).
    use_series = tl.maximum(tl.abs(a), 1.0) * P <= 0.125
    ps = tl.where(use_series, P, 0.0)
    neg_ap = -a * ps
    ta = -neg_ap          # -(-aP)^k, k = 1
    tp = ps               # P^k, k = 1
    ys = tl.zeros_like(ps)
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.5
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.3333333333333333
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.25
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.2
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.16666666666666666
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.14285714285714285
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.125
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.1111111111111111
    ta = ta * neg_ap
    tp = tp * ps
    ys += (ta - a * tp) * 0.1
    # Log branch.
    pg = tl.where(use_series | (P >= 1.0), 0.0, P)
    l1 = log1p_acc(-pg)
    yg = tl.where(a == 0.0, 0.0, a * l1) + log1p_acc(a * pg)
    u = -expm1_acc(tl.where(use_series, ys, yg))
    at_one = tl.where(a > 0, 1.0, tl.where(a == 0, 0.0, float("-inf")))
    return tl.where(P >= 1.0, at_one, u)
