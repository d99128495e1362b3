"""Portable elementwise math for Triton kernels (fp32): MagicPIG's sampling weight.

Upstream Triton 3.6+ has no ``tl.math.acos`` / ``tl.math.pow`` (CUDA keeps them in libdevice,
triton-ascend in its own extension), so this is built from ``sqrt``, ``rsqrt``, ``exp2``,
``log2``, ``abs`` and ``where``, which every backend has. Constants are literals inside the
functions: a Python global would be rejected by the frontend unless it were a ``tl.constexpr``.

Cost, not only accuracy, shapes these functions: they run once per selected key, and on CUDA a
per-key value of a [keys, D] tile is computed redundantly by every lane that holds part of the
key's row. On sm_90 ``tl.log2`` / ``tl.log`` compile to a ~30-instruction software routine (no
``MUFU.LG2``) and ``/`` to ~9 instructions, while ``exp2``, ``sqrt`` and ``rsqrt`` are one MUFU
op each. So the weight uses one ``log2`` always and one more only for its value on one branch,
reciprocals as ``rsqrt(x)**2``, and short polynomials whose truncation error is stated below.
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
def recip(x):
    """1 / x for fp32 x > 0 as rsqrt(x)**2: two instructions on CUDA (MUFU.RSQ, FMUL) where ``/``
    takes ~9; relative error <= 2**-21.9 (twice rsqrt.approx's 2**-22.9)."""
    r = tl.rsqrt(x)
    return r * r


@triton.jit
def magicpig_weight(negative, one_minus_abs_c, abs_c, k_exp, l_minus_1, far_p):
    """The MagicPIG sampling weight ``1e-10 / max(u, 1e-10)`` in [1e-10, 1] of one key, where

        p = 1 - acos(c)/pi,  P = p**K,  u = 1 - (1-P)**L - L P (1-P)**(L-1)

    for the key's cosine c (given as its sign ``negative``, ``abs_c`` = |c| and ``one_minus_abs_c``
    = 1 - |c| >= 1e-7, which the caller computes without cancellation near |c| = 1) and the row's
    K > 0 and L - 1; ``far_p`` (a scalar) False promises that no key has P > 1/4 (see g1 below)
    and skips that branch's log. A score ``q.k * scale - log(max(u, 1e-10))`` is
    ``q.k * scale + log(weight) + log(1e10)``: the kernel multiplies its softmax terms by the
    weight and adds the constant to the LSE, so no log of u is taken.

    Form: with a = L - 1, x = a P and E = (1-P)**a (1 + x) = exp(-z), u = 1 - E and

        z = a g1(P) + g2(x),  g1(P) = -log(1-P) - P >= 0,  g2(x) = x - log(1+x) >= 0,

    a sum of non-negative terms (the literal form cancels to first order in P), so z keeps its
    relative accuracy, and u = -expm1(-z) passes it on (|du/u| <= |dz/z|).
    - g1: P <= 1/4 by its series P^2 (1/2 + P/3 + ... + P^10/12) (truncation <= 5e-8 relative);
      above, -ln 2 log2(1 - P) - P (1 - P rounded by <= 2^-25: <= 1.2e-6 relative at P = 1/4,
      less above; exact for P >= 1/2). That second log2 is ~30 instructions on sm_90, and the
      kernel knows a whole tile needs none of it when every key has |c| <= 1/2 and K >= 3.5:
      then p <= 2/3 (p = 1 - acos(|c|)/pi for c >= 0, acos(|c|)/pi <= 1/2 for c < 0) and
      P <= (2/3)**3.5 < 0.243, so ``far_p`` False gives the same weights.
    - g2, x <= 1: x^2/(2+x) - 2 y^3 (1/3 + y^2/5 + ... + y^10/13), y = x/(2+x) <= 1/3 (the atanh
      series of log(1+x), truncation <= 1e-7 relative).
    - u, x <= 1: z (1 - z/2 + ... + z^6/7!) for z <= 1/2 (truncation <= 2e-7 relative), else
      1 - exp2(-z log2 e).
    - u, x > 1: 1 - exp2(-(x + a g1) log2 e) (1 + x), without log(1+x): here z >= g2(1) = 0.307,
      so u >= 0.26 and the absolute error of E (<= ~4e-7: E * (x + a g1) <= 0.84) is <= 1.6e-6
      of u.
    Truncation and branch errors together: |d log u| <= 2e-6 wherever u > 1e-10 (on top of fp32
    rounding of the inputs and MUFU.EX2 / rsqrt approximations, ~2e-7 each). A weight error of
    e moves the output by at most e * max|v - o| and the LSE by at most e: 2e-6 is below 1/200 of
    the suite's smallest floor for these families (fp16 unit roundoff 2^-11 = 4.9e-4, times
    max(1, max|ref|); tolerance.py) and of the same size as the correction's own fp32 error
    (an fp32 cosine off by 1e-7 moves log u by up to ~4e-6 at K=10, L=150).
    a <= 0 (L <= 1): (1-P)**a (1 + aP) >= 1, so u <= 0 and the weight is 1 (the floor).
    """
    t = tl.sqrt(one_minus_abs_c) * _acos_poly(abs_c) * 0.3183098861837907  # acos(|c|) / pi
    p = tl.where(negative, t, 1.0 - t)                 # > 0: 1 - |c| >= 1e-7 gives t >= 1e-4
    P = tl.exp2(k_exp * tl.log2(p))
    a = l_minus_1
    x = a * P
    # g1(P) = -log(1 - P) - P.
    g = P * 0.08333333333333333 + 0.09090909090909091   # 1/12, 1/11
    g = g * P + 0.1
    g = g * P + 0.1111111111111111
    g = g * P + 0.125
    g = g * P + 0.14285714285714285
    g = g * P + 0.16666666666666666
    g = g * P + 0.2
    g = g * P + 0.25
    g = g * P + 0.3333333333333333
    g = g * P + 0.5
    g1 = P * P * g
    if far_p:
        big_p = P > 0.25
        g1_far = tl.log2(tl.where(big_p, 1.0 - P, 0.5)) * -0.6931471805599453 - P
        g1 = tl.where(big_p, g1_far, g1)
    # g2(x) = x - log(1 + x) for x <= 1 (atanh series).
    xn = tl.minimum(tl.maximum(x, 0.0), 1.0)
    r = recip(2.0 + xn)
    y = xn * r
    y2 = y * y
    sr = y2 * 0.07692307692307693 + 0.09090909090909091  # 1/13, 1/11
    sr = sr * y2 + 0.1111111111111111
    sr = sr * y2 + 0.14285714285714285
    sr = sr * y2 + 0.2
    sr = sr * y2 + 0.3333333333333333
    z = a * g1 + (xn * xn * r - 2.0 * y * y2 * sr)
    # u = -expm1(-z) near 0.
    e = z * 0.0001984126984126984 - 0.001388888888888889  # 1/5040, 1/720
    e = e * z + 0.008333333333333333
    e = e * z - 0.041666666666666664
    e = e * z + 0.16666666666666666
    e = e * z - 0.5
    u_near = (e * z + 1.0) * z
    far_x = x > 1.0
    arg = tl.where(far_x, x + a * g1, z) * -1.4426950408889634
    u_far = 1.0 - tl.exp2(arg) * tl.where(far_x, 1.0 + x, 1.0)
    u = tl.where(far_x | (z > 0.5), u_far, u_near)
    u = tl.maximum(tl.where(a > 0.0, u, 0.0), 1e-10)
    return 1e-10 * recip(u)
