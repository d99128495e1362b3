"""What the plain-torch mutants and controls share: handing results over the way the kernels do,
the online softmax with switchable bugs, and the classes of bug every family gets (a view read
as if it were contiguous, an implementation that ignores the caller's buffers).

Nothing here calls references/ or the project's kernels: the math is written out from
docs/contract.md."""
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
                     p_dtype=None, stale_max: bool = False, exp_without_max: bool = False,
                     max_floor: float | None = None, shared_max: bool = False, default_scale_only: bool = False,
                     max_before_scale: bool = False, zero_scale_as_default: bool = False):
    """Attention over key blocks of ``block`` with a running max, as a tiled kernel does it.

    q [..., M, D]; k, v [..., N, D] (heads already matched); ``visible`` bool broadcastable to
    [..., M, N] (None: all); ``bias`` [..., M, N] added to the scaled scores. Returns (o [..., M, D], lse [..., M]) in fp32; a row that sees
    nothing gives o = 0, lse = -inf. The switches are the bugs:
    ``acc_dtype`` the output accumulator's dtype (rounded after every block); ``p_dtype`` the
    dtype probabilities are cast to before the P @ V product (a kernel feeding tl.dot in the
    input dtype); ``stale_max`` keeps the first block's max; ``exp_without_max`` takes exp of
    the raw scores (in fp32); ``max_floor`` starts the running max there instead of -inf (a max
    clamped at 0); ``shared_max`` keeps one running max for every row of the call; ``acc_dtype``
    "input" is q's dtype; ``default_scale_only`` uses 1/sqrt(D) whatever ``scale`` says;
    ``max_before_scale`` takes the row max of the raw q.k and scales it (the max of the scaled
    scores only while the scale is positive); ``zero_scale_as_default`` takes a scale of 0 for
    "not given" (``scale or 1/sqrt(D)``)."""
    M, N, D = q.shape[-2], k.shape[-2], q.shape[-1]
    if acc_dtype == "input":
        acc_dtype = q.dtype
    if default_scale_only or (zero_scale_as_default and not scale):
        scale = 1.0 / math.sqrt(D)
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
        if max_before_scale:
            raw = qf @ kb.transpose(-1, -2)
            if visible is not None:
                raw = raw.masked_fill(~visible[..., start:start + block], float("-inf"))
            m_new = torch.maximum(m, raw.amax(-1) * scale)
        elif exp_without_max:
            m_new = torch.zeros_like(m)
        elif stale_max and start > 0:
            m_new = torch.where(torch.isfinite(m), m, s.amax(-1))
        else:
            m_new = torch.maximum(m, s.amax(-1))
        if max_floor is not None:
            m_new = m_new.clamp_min(max_floor)
        if shared_max:
            m_new = m_new.amax().expand_as(m_new)
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


#: The online-softmax bugs each family's mutants carry (docs/contract.md: softmax subtracts the row
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
    "max_clamped_at_zero": ("Running max started at 0 instead of -inf (a max clamped at 0): rows whose scores "
                            "are all far below 0 underflow exp to 0.", dict(max_floor=0.0)),
    "max_shared_across_rows": ("One running max for every row of the launch instead of one per row: a row "
                               "~160 below another underflows exp to 0.", dict(shared_max=True)),
    "ignores_scale": ("Ignores the scale argument: always softmax(q.k / sqrt(D)).", dict(default_scale_only=True)),
    "input_dtype_accumulator": ("Output accumulator kept in the input dtype across key tiles (bf16 for bf16 "
                                "inputs), rounded after every tile.", dict(acc_dtype="input")),
    "max_before_scale": ("Row max taken over the raw q.k and then scaled: with a negative scale it is the "
                         "scaled scores' minimum, and exp of the others overflows.", dict(max_before_scale=True)),
    "zero_scale_as_default": ("A scale of 0 taken for \"not given\" (scale or 1/sqrt(D)): scores scaled by "
                              "1/sqrt(D) instead of all 0.", dict(zero_scale_as_default=True)),
}
#: The bugs the catalogs' input classes target (scales, extreme score ranges, long low-precision sums).
CLASS_BUGS = ("max_clamped_at_zero", "max_shared_across_rows", "ignores_scale", "input_dtype_accumulator",
              "max_before_scale", "zero_scale_as_default")


# --- power-of-two arithmetic: right for every power-of-two page size and GQA group -------------

def log2_floor(n: int) -> int:
    return max(int(n).bit_length() - 1, 0)


def kv_heads_pow2(Hq: int, Hkv: int, device=None) -> torch.Tensor:
    """The KV head of each query head as ``h >> log2(G)`` (a group packing that assumes G is a
    power of two), clamped into [0, Hkv): h // G for G = 1, 2, 4, 8; wrong for G = 3, 5, 6, 7."""
    h = torch.arange(Hq, device=device)
    return (h >> log2_floor(Hq // Hkv)).clamp(max=Hkv - 1)


def heads_for_queries_pow2(kv: torch.Tensor, Hq: int, axis: int = 1) -> torch.Tensor:
    """``heads_for_queries`` with the power-of-two group packing of ``kv_heads_pow2``."""
    return kv.index_select(axis, kv_heads_pow2(Hq, kv.shape[axis], kv.device))


def page_and_slot_pow2(t: torch.Tensor, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(page, slot) of logical positions ``t`` by shift and mask (``t >> log2 P``, ``t & (P - 1)``
    with P rounded down to a power of two): right for P = 1, 16, 64, 256; wrong for 12 or 48."""
    shift = log2_floor(page_size)
    return t >> shift, t & ((1 << shift) - 1)


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


def packing_groups_as_pow2(fn, name: str):
    """``fn(q, k, v, ...)`` (heads on axis 1 of each) fed K/V whose heads are the ones a group
    packing that assumes a power-of-two G reads (``kv_heads_pow2``): one KV head per query head,
    query head h given KV head h >> log2(G). Right for G = 1, 2, 4, 8."""
    @functools.wraps(fn)
    def run(q, k, v, *args, **kw):
        Hq = q.shape[1]
        return fn(q, heads_for_queries_pow2(k, Hq), heads_for_queries_pow2(v, Hq), *args, **kw)

    return documented(run, name, "Query head h reads KV head h >> log2(G): a group packing that assumes the "
                                 "GQA group size G is a power of two.")


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


# --- a store into another program's rows ----------------------------------------------------------

def _store_rows_kernel():
    """Built on first use: importing triton.language is left to the mutants that launch it."""
    import triton
    import triton.language as tl

    @triton.jit
    def store_rows(src_ptr, dst_ptr, total, D: tl.constexpr, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        lanes = tl.arange(0, BLOCK)
        x = tl.load(src_ptr + row * D + lanes, mask=lanes < D, other=0.0)
        # The bug: the store is bounded by the buffer's end, not the row's, so the tile's padding
        # lanes write zeros over the start of the next row (the next program's, which in grid
        # order runs later and writes its row over them).
        offs = row * D + lanes
        tl.store(dst_ptr + offs, x.to(dst_ptr.dtype.element_ty), mask=offs < total)

    return store_rows


def store_rows_past_their_end(o: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out`` (any shape, last axis D) written from ``o`` (same shape) by one Triton program per
    row whose store runs past its row into the next one: right only when the programs run in
    grid order, as the interpreter runs them by default."""
    import triton

    D = out.shape[-1]
    dst = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
    src = o.float().contiguous()
    rows = dst.numel() // D
    _store_rows_kernel()[(rows,)](src, dst, dst.numel(), D=D, BLOCK=2 * triton.next_power_of_2(D))
    if dst is not out:
        out.copy_(dst)
    return out


# --- a page table read as if no page were shared -----------------------------------------------------

def pages_owned_once(indptr: torch.Tensor, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(indptr, indices) as an implementation sees them that keeps one owner per physical page
    (a page -> sequence map filled in batch order): a page listed by several sequences (a prefix
    cache) stays only in the last one's list. The same table where no page is shared."""
    ptr = indptr.long().tolist()
    owner = {}
    for b in range(len(ptr) - 1):
        for page in indices[ptr[b]:ptr[b + 1]].tolist():
            owner[page] = b
    kept = [[p for p in indices[ptr[b]:ptr[b + 1]].tolist() if owner[p] == b] for b in range(len(ptr) - 1)]
    new_ptr = [0]
    for pages in kept:
        new_ptr.append(new_ptr[-1] + len(pages))
    flat = [p for pages in kept for p in pages]
    return (torch.tensor(new_ptr, dtype=indptr.dtype, device=indptr.device),
            torch.tensor(flat, dtype=indices.dtype, device=indices.device))


def owning_pages_once(fn, name: str):
    """``fn(q, kv_cache, indptr, indices, ...)`` given the page table of ``pages_owned_once``."""
    @functools.wraps(fn)
    def run(q, kv_cache, indptr, indices, *args, **kw):
        return fn(q, kv_cache, *pages_owned_once(indptr, indices), *args, **kw)

    return documented(run, name, "Keeps one owner per physical page (a page -> sequence map): a page that "
                                 "several sequences share (a prefix cache) is read by the last of them only.")
