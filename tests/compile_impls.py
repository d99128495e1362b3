"""Small decode implementations that compile-only must tell apart from a kernel that fails to
compile: one that wants device tensors, one that never launches Triton, and one foreign Triton
kernel launched through an autotuner (tests/test_compile_capture.py passes them with --impl)."""
import torch
import triton
import triton.language as tl


def wants_cuda(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Moves its inputs to the GPU before launching, as many wrappers do."""
    q = q.cuda()
    raise AssertionError("unreachable on a host without CUDA")


def checks_device(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    if not q.is_cuda:
        raise ValueError("checks_device: q must be a CUDA tensor")
    raise AssertionError("unreachable")


def plain_torch(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """A vendor-style op: plain PyTorch, no Triton launch at all."""
    g = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(g, 1).float(), v.repeat_interleave(g, 1).float()
    p = torch.softmax(q.float() @ kk.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale), dim=-1)
    o = (p @ vv).to(q.dtype)
    if out is not None:
        out.copy_(o)
        o = out
    return o, None


@triton.autotune(configs=[triton.Config({"BLOCK_N": 32}, num_warps=2),
                          triton.Config({"BLOCK_N": 64}, num_warps=4)], key=["S"])
@triton.jit
def _decode_tuned(Q, K, V, O, S, G, scale, D: tl.constexpr, BLOCK_N: tl.constexpr):
    bh = tl.program_id(0)
    hk = bh // G
    offs_d = tl.arange(0, D)
    q = tl.load(Q + bh * D + offs_d).to(tl.float32)
    m = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)
    l = tl.sum(tl.zeros([BLOCK_N], tl.float32), 0)
    acc = tl.zeros([D], tl.float32)
    for n0 in range(0, S, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        ok = offs_n < S
        k = tl.load(K + (hk * S + offs_n[:, None]) * D + offs_d[None, :], mask=ok[:, None], other=0.0)
        s = tl.where(ok, tl.sum(k.to(tl.float32) * q[None, :], 1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(V + (hk * S + offs_n[:, None]) * D + offs_d[None, :], mask=ok[:, None], other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        l = l * alpha + tl.sum(p, 0)
        m = m_new
    tl.store(O + bh * D + offs_d, (acc / l).to(O.dtype.element_ty))


def autotuned(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Decode (B=1 per launch row) through an autotuned kernel and a callable grid."""
    B, Hq, _, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = torch.empty_like(q) if out is None else out
    q_, k_, v_ = q.contiguous(), k.contiguous(), v.contiguous()
    grid = lambda meta: (B * Hq,)  # noqa: E731 - Triton's callable-grid form
    _decode_tuned[grid](q_, k_, v_, out, S, Hq // Hkv, D ** -0.5 if scale is None else scale, D=D)
    return out, None
