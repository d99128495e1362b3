"""MagicPIG's per-key sampling weight (kernels/_math.py, ``magicpig_weight``) against a float64
evaluation of the contract's u that has no cancellation, over every cosine range (near +-1 on a
log scale) and LSH parameters from the cases' draws and beyond: its docstring's error bound, plus
what the fp32 inputs themselves cost."""
import math

import pytest
import torch
import triton
import triton.language as tl

from kernels._math import magicpig_weight

U_FLOOR = 1e-10


@triton.jit
def _weights(C, ONE_MINUS_ABS, K, L, W, N, BLOCK: tl.constexpr, FAR_P: tl.constexpr = True):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < N
    c = tl.load(C + offs, mask=ok, other=0.0)
    oma = tl.load(ONE_MINUS_ABS + offs, mask=ok, other=1.0)
    w = magicpig_weight(c < 0, tl.maximum(oma, 1e-7), tl.abs(c), tl.load(K + offs, mask=ok, other=1.0),
                        tl.load(L + offs, mask=ok, other=1.0) - 1.0, FAR_P)
    tl.store(W + offs, w, mask=ok)


def _log_u(cos: torch.Tensor, K: float, L: float) -> torch.Tensor:
    """log(max(u, 1e-10)) in float64, u = 1 - (1-P)^L - L P (1-P)^(L-1) as -expm1(-z) with
    z = -(L-1) log1p(-P) - log1p((L-1) P) (the same function; float64's log1p/expm1 keep it exact
    to ~1e-12 where the literal form would cancel)."""
    c = cos.clamp(-1 + 1e-7, 1 - 1e-7)
    P = (1 - torch.acos(c) / math.pi).clamp(0, 1) ** K
    a = L - 1
    u = -torch.expm1(a * torch.log1p(-P) + torch.log1p(a * P))
    return torch.log(u.clamp_min(U_FLOOR))


COS = torch.cat([torch.linspace(-1, 1, 4001, dtype=torch.float64),
                 1 - torch.logspace(-7, 0, 300, dtype=torch.float64),
                 -1 + torch.logspace(-7, 0, 300, dtype=torch.float64)])


@pytest.mark.parametrize("K, L, bound", [
    (10, 150, 2e-5), (1, 1e4, 2e-5), (1, 2, 2e-5), (2, 3, 2e-5), (6, 6, 2e-5), (3.3, 4.7, 2e-5), (5.5, 2.5, 2e-5),
    (20, 500, 2e-5), (0.5, 150, 2e-5), (0.01, 3, 2e-5),
    # L near 1 with keys near-parallel (c -> 1): u depends on 1 - P, which fp32 loses when p = 1 -
    # acos(c)/pi rounds next to 1 (the cancellation is in the contract's p itself; the form before
    # this one measured the same 1.9e-5 and 2.6e-5 here).
    (6, 1.2, 5e-5), (1, 1.01, 5e-5),
    # L <= 1: u <= 0 for every key, so the weight is the floor's.
    (1, 1, 0.0), (4, 0.5, 0.0)])
def test_weight_matches_a_float64_u_within_its_bound(K, L, bound):
    n = COS.numel()
    cos32 = COS.float()
    # 1 - |c| as the kernel has it: accurate near |c| = 1 (its cancellation-free pass), in fp32.
    one_minus_abs = (1 - COS.abs()).float()
    w = torch.empty(n)
    _weights[(triton.cdiv(n, 1024),)](cos32, one_minus_abs, torch.full((n,), float(K)), torch.full((n,), float(L)), w,
                                      n, BLOCK=1024)
    assert bool(((w >= U_FLOOR * (1 - 1e-6)) & (w <= 1 + 1e-6)).all())
    # weight = 1e-10 / max(u, 1e-10), so log u = log(1e-10) - log(weight).
    err = (math.log(U_FLOOR) - torch.log(w.double()) - _log_u(COS, K, L)).abs()
    worst = int(err.argmax())
    assert err[worst] <= bound, f"|d log u| {float(err[worst]):.3g} at c = {float(COS[worst]):.9f}"


@pytest.mark.parametrize("K, L", [(3.5, 150), (10, 150), (3.5, 1.01), (20, 2), (6, 1e4)])
def test_skipping_the_far_p_branch_changes_no_weight_where_the_kernel_skips_it(K, L):
    """The kernel passes far_p False for a tile whose keys all have |c| <= 1/2 when K >= 3.5:
    there P <= (2/3)**3.5 < 1/4, so that branch would have changed nothing."""
    c = torch.linspace(-0.5, 0.5, 20001, dtype=torch.float64)
    n = c.numel()
    out = {}
    for far in (True, False):
        w = torch.empty(n)
        _weights[(triton.cdiv(n, 1024),)](c.float(), (1 - c.abs()).float(), torch.full((n,), float(K)),
                                          torch.full((n,), float(L)), w, n, BLOCK=1024, FAR_P=far)
        out[far] = w
    assert torch.equal(out[True], out[False])
