"""What the plain-torch mutants and controls share: handing results over the way the kernels do,
the online softmax with switchable bugs, and the classes of bug every family gets (a view read
as if it were contiguous, an implementation that ignores the caller's buffers).

Nothing here calls references/ or the project's kernels: the math is written out from
kernels.md."""
from __future__ import annotations

import functools
import math

import torch


def finish(q, o, l, return_lse, out, lse):
    """Write ``o`` (and the LSE ``l`` when asked) into the caller's buffers, allocating them if
    absent, and return ``(out, lse or None)`` as the project's kernels do."""
    if out is None:
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
    out.copy_(o.to(out.dtype))
    if not return_lse:
        return out, None
    if lse is None:
        lse = torch.empty(l.shape, dtype=torch.float32, device=q.device)
    lse.copy_(l)
    return out, lse


def default_scale(q, scale):
    return 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)


def heads_for_queries(kv: torch.Tensor, Hq: int, axis: int = 1) -> torch.Tensor:
    """KV heads repeated so query head h reads KV head h // (Hq / Hkv)."""
    return kv.repeat_interleave(Hq // kv.shape[axis], dim=axis)


# --- the online softmax, as a tiled kernel computes it ---------------------------------------------

def online_attention(q, k, v, scale: float, visible=None, *, bias=None, block: int = 64, acc_dtype=torch.float32,
                     p_dtype=None, stale_max: bool = False, exp_without_max: bool = False):
    """Attention over key blocks of ``block`` with a running max, as a tiled kernel does it.

    q [..., M, D]; k, v [..., N, D] (heads already matched); ``visible`` bool broadcastable to
    [..., M, N] (None: all); ``bias`` [..., M, N] added to the scaled scores. Returns (o [..., M, D], lse [..., M]) in fp32; a row that sees
    nothing gives o = 0, lse = -inf. The switches are the bugs:
    ``acc_dtype`` the output accumulator's dtype (rounded after every block); ``p_dtype`` the
    dtype probabilities are cast to before the P @ V product (a kernel feeding tl.dot in the
    input dtype); ``stale_max`` keeps the first block's max; ``exp_without_max`` takes exp of
    the raw scores (in fp32)."""
    M, N, D = q.shape[-2], k.shape[-2], q.shape[-1]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    qf = q.float()
    m = torch.full((*lead, M), float("-inf"), device=q.device)
    l = torch.zeros((*lead, M), device=q.device)
    acc = torch.zeros((*lead, M, D), device=q.device, dtype=acc_dtype)
    for start in range(0, N, block):  # one iteration per key tile, each fully vectorized
        kb, vb = k[..., start:start + block, :].float(), v[..., start:start + block, :]
        s = (qf @ kb.transpose(-1, -2)) * scale
        if bias is not None:
            s = s + bias[..., start:start + block].float()
        if visible is not None:
            s = s.masked_fill(~visible[..., start:start + block], float("-inf"))
        if exp_without_max:
            m_new = torch.zeros_like(m)
        elif stale_max and start > 0:
            m_new = torch.where(torch.isfinite(m), m, s.amax(-1))
        else:
            m_new = torch.maximum(m, s.amax(-1))
        base = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        p = torch.exp(s - base[..., None])
        alpha = torch.exp(torch.where(torch.isfinite(m), m, base) - base) * torch.isfinite(m)
        if exp_without_max:
            alpha = torch.ones_like(alpha)
        l = l * alpha + p.sum(-1)
        pv = p.to(p_dtype or torch.float32).float() @ vb.to(p_dtype or torch.float32).float()
        acc = (acc.float() * alpha[..., None] + pv).to(acc_dtype)
        m = m_new
    o = acc.float() / torch.where(l > 0, l, torch.ones_like(l))[..., None]
    lse = torch.where(l > 0, torch.log(l) + torch.where(torch.isfinite(m), m, torch.zeros_like(m)),
                      torch.full_like(l, float("-inf")))
    return o, lse


#: The online-softmax bugs each family's mutants carry (kernels.md: softmax subtracts the row
#: max, accumulates in fp32): name -> (docstring, online_attention keywords).
SOFTMAX_BUGS = {
    "fp16_accumulator": ("Output accumulator kept in fp16 across key tiles (rounded after every tile): "
                         "loses the digits a V offset puts in every output.",
                         dict(acc_dtype=torch.float16)),
    "stale_running_max": ("Running max never updated after the first key tile: exp(s - m) of a later, larger "
                          "score overflows the fp16 probabilities fed to P @ V.",
                          dict(stale_max=True, p_dtype=torch.float16)),
    "exp_without_max_fp32": ("Softmax without subtracting the row max, in fp32: exp overflows once a score "
                             "passes ~88.7.", dict(exp_without_max=True)),
}


# --- memory layout ----------------------------------------------------------------------------

def read_as_contiguous(t):
    """What a kernel that ignores a tensor's strides reads: the storage from the tensor's first
    element on, laid out as if the tensor were contiguous (a view's neighbours come in)."""
    if not isinstance(t, torch.Tensor) or t.is_contiguous():
        return t
    strides, step = [], 1
    for size in reversed(t.shape):
        strides.append(step)
        step *= size
    return torch.as_strided(t, t.shape, tuple(reversed(strides)))


def reading_views_as_contiguous(fn, *names: str):
    """``fn`` with the named tensor arguments (positional names of its signature, or keywords)
    read as if they were contiguous."""
    import inspect

    params = list(inspect.signature(fn).parameters)

    @functools.wraps(fn)
    def run(*args, **kw):
        args = [read_as_contiguous(a) if i < len(params) and params[i] in names else a for i, a in enumerate(args)]
        kw = {k: read_as_contiguous(a) if k in names else a for k, a in kw.items()}
        return fn(*args, **kw)

    return run


def ignoring_out(fn):
    """``fn`` that computes into tensors of its own instead of the caller's out / lse."""
    @functools.wraps(fn)
    def run(*args, **kw):
        kw.pop("out", None)
        kw.pop("lse", None)
        return fn(*args, **kw)

    return run


def documented(fn, name: str, doc: str):
    """A wrapper of ``fn`` named ``name`` whose docstring states its bug (mutants report its
    first line)."""
    @functools.wraps(fn)
    def run(*args, **kw):
        return fn(*args, **kw)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = doc
    return run
