"""Paged decode over FlashInfer's CSR page table, first-port style.

Each program handles one query head of one sequence and walks the sequence in blocks of
``BLOCK_N`` tokens. For every token it looks its page up in the page table,
``page = tl.load(indices + first_page + tok // PAGE)``: simple and correct, but that lookup is the
construct triton-ascend 3.2.0rc2 rejects ("cannot div 0!", porting_notes.md#page_div_zero), and
later Ascend releases turn it into one scalar load per token. The grid is B x Hq programs.
"""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_decode_port(Q, CACHE, INDPTR, INDICES, LAST, O, LSE, scale,
                       stride_qb, stride_qh, stride_ob, stride_oh, stride_lb, stride_lh,
                       stride_page, stride_kv, stride_head, stride_slot,
                       G: tl.constexpr, PAGE: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr,
                       HAS_LSE: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    hk = h // G
    offs_d = tl.arange(0, D)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d).to(tl.float32)

    first_page = tl.load(INDPTR + b)
    n_pages = tl.load(INDPTR + b + 1) - first_page
    seq_len = tl.where(n_pages > 0, (n_pages - 1) * PAGE + tl.load(LAST + b), 0)

    m = tl.max(tl.full([BLOCK_N], float("-inf"), tl.float32), 0)
    l = tl.sum(tl.zeros([BLOCK_N], tl.float32), 0)
    acc = tl.zeros([D], tl.float32)
    for start in range(0, seq_len, BLOCK_N):
        tok = start + offs_n
        ok = tok < seq_len
        page = tl.load(INDICES + first_page + tok // PAGE, mask=ok, other=0)
        row = page.to(tl.int64) * stride_page + hk * stride_head + (tok % PAGE) * stride_slot
        k = tl.load(CACHE + row[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.where(ok, tl.sum(k * q[None, :], 1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(CACHE + stride_kv + row[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), 0)
        l = l * alpha + tl.sum(p, 0)
        m = m_new

    o = tl.where(l > 0, acc / l, 0.0)
    tl.store(O + b * stride_ob + h * stride_oh + offs_d, o.to(O.dtype.element_ty))
    if HAS_LSE:
        tl.store(LSE + b * stride_lb + h * stride_lh, m + tl.log(l))


def paged_decode(q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, *, layout="HND",
                 scale=None, return_lse=False, out=None, lse=None):
    """q [B, Hq, D]; kv_cache [pages, 2, Hkv, P, D] (HND) or [pages, 2, P, Hkv, D] (NHD)."""
    B, Hq, D = q.shape
    if layout == "HND":
        _, _, Hkv, P, _ = kv_cache.shape
        stride_head, stride_slot = kv_cache.stride(2), kv_cache.stride(3)
    elif layout == "NHD":
        _, _, P, Hkv, _ = kv_cache.shape
        stride_head, stride_slot = kv_cache.stride(3), kv_cache.stride(2)
    else:
        raise ValueError(f"paged_port: layout must be HND or NHD, got {layout!r}")
    if D & (D - 1) or Hq % Hkv:
        raise ValueError("paged_port: D must be a power of two and Hq a multiple of Hkv")
    q = q.contiguous()
    out = torch.empty_like(q) if out is None else out
    if return_lse and lse is None:
        lse = torch.empty((B, Hq), dtype=torch.float32, device=q.device)
    lse_strides = (lse.stride(0), lse.stride(1)) if return_lse else (0, 0)
    _paged_decode_port[(B, Hq)](
        q, kv_cache, kv_page_indptr, kv_page_indices, kv_last_page_len, out,
        lse if return_lse else out, 1.0 / math.sqrt(D) if scale is None else float(scale),
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), *lse_strides,
        kv_cache.stride(0), kv_cache.stride(1), stride_head, stride_slot,
        G=Hq // Hkv, PAGE=P, D=D, BLOCK_N=16, HAS_LSE=return_lse)
    return out, (lse if return_lse else None)
