"""Input validation shared by every kernel wrapper, plus the small launch-plan record they return.

Every check raises before any kernel launch, with a message that starts with the public function
name and names the offending argument, e.g.
``prefill: v must have shape [B, Hkv, S, D] = [2, 2, 17, 64], got [2, 3, 17, 64]``.
Wrong Python type or dtype -> TypeError; wrong rank, shape, device, layout or value -> ValueError.

Layout rule used by all kernels here: a tensor must be contiguous in its last dimension
(``stride(-1) == 1``, or that dimension has size 1); every other stride is honoured as given.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
import numbers
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import torch

from . import settings

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

#: ``input_precision`` for every ``tl.dot``, always spelled out: "ieee" keeps fp32 products exact
#: (tf32 costs ~1e-3 relative) and changes nothing for 16-bit operands, while leaving it None
#: (the backend default) stops triton-ascend 3.2's frontend with "'NPUOptions' object has no
#: attribute 'default_dot_input_precision'".
DOT_INPUT_PRECISION = "ieee"


#: Set while ``capture_launches`` is active: the plans that ``launch`` was asked to run.
_captured: Optional[list] = None


def is_interpret() -> bool:
    """True when Triton runs kernels in its CPU interpreter (read at call time). False while
    planning for compile-only (``settings.host_compile``, or launches captured): the plans must
    be the ones a device would run."""
    return (_captured is None and not settings.current().host_compile
            and os.environ.get("TRITON_INTERPRET") == "1")


@contextmanager
def capture_launches() -> Iterator[list]:
    """Compile-only: inside this block every wrapper validates and plans as usual, with the
    device's tile configs, but ``launch`` records its plan instead of running it (and CPU tensors
    are accepted). Outputs are left unwritten."""
    global _captured
    previous, _captured = _captured, []
    try:
        yield _captured
    finally:
        _captured = previous


def cdiv(a: int, b: int) -> int:
    """Ceiling division for host code (``triton.cdiv`` is a jit-able function: ~5 us a call,
    which a decode wrapper pays several times per launch)."""
    return -(-int(a) // int(b))


def next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def _fmt_shape(shape: Sequence[Optional[int]]) -> str:
    return "[" + ", ".join("*" if s is None else str(int(s)) for s in shape) + "]"


def _fmt_dtype(dt: torch.dtype) -> str:
    return str(dt).replace("torch.", "")


def _fmt_dtypes(dtypes: Sequence[torch.dtype]) -> str:
    if len(dtypes) == 1:
        return _fmt_dtype(dtypes[0])
    return "one of (" + ", ".join(_fmt_dtype(d) for d in dtypes) + ")"


def check_tensor(fn: str, name: str, t: Any, *, rank: Optional[int] = None,
                 dtypes: Optional[Sequence[torch.dtype]] = None, device: Optional[torch.device] = None,
                 shape: Optional[Sequence[Optional[int]]] = None, dims: Optional[str] = None,
                 like: Optional[str] = None, last_dim_contiguous: bool = True) -> torch.Tensor:
    """Validate one tensor argument; returns it unchanged.

    ``shape`` entries may be None (any size). ``dims`` names the axes for messages ("[B, Hq, S, D]").
    ``like`` names the argument the dtype/device requirement comes from ("q"), for messages.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_has_data(fn, name, t)
    dims_txt = f" {dims}" if dims else ""
    if rank is not None and t.dim() != rank:
        raise ValueError(f"{fn}: {name} must have rank {rank}{dims_txt}, got rank {t.dim()} "
                         f"with shape {_fmt_shape(t.shape)}")
    if dtypes is not None and t.dtype not in tuple(dtypes):
        src = f" (same as {like})" if like else ""
        raise TypeError(f"{fn}: {name} must have dtype {_fmt_dtypes(tuple(dtypes))}{src}, "
                        f"got {_fmt_dtype(t.dtype)}")
    if device is not None and t.device != torch.device(device):
        src = f" (same as {like})" if like else ""
        raise ValueError(f"{fn}: {name} must be on device {torch.device(device)}{src}, got {t.device}")
    if shape is not None:
        ok = t.dim() == len(shape) and all(e is None or int(e) == a for e, a in zip(shape, t.shape))
        if not ok:
            eq = f"{dims} = " if dims else ""
            raise ValueError(f"{fn}: {name} must have shape {eq}{_fmt_shape(shape)}, "
                             f"got {_fmt_shape(t.shape)}")
    if last_dim_contiguous and t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{fn}: {name} must be contiguous in its last dimension (stride(-1) == 1), "
                         f"got strides {tuple(t.stride())}")
    return t


def check_has_data(fn: str, name: str, t: torch.Tensor) -> None:
    """A meta tensor has a shape but no memory: every later check (and Triton) would misread it."""
    if t.device.type == "meta":
        raise ValueError(f"{fn}: {name} is on the meta device, which holds no data")


def check_nonempty(fn: str, name: str, t: torch.Tensor, dims: Optional[str] = None) -> None:
    if any(s == 0 for s in t.shape):
        dims_txt = f" {dims}" if dims else ""
        raise ValueError(f"{fn}: {name} must have every dimension >= 1{dims_txt}, "
                         f"got {_fmt_shape(t.shape)}")


def check_launchable(fn: str, name: str, t: torch.Tensor) -> None:
    """A CPU tensor can only run under the Triton interpreter."""
    if t.device.type == "cpu" and not is_interpret() and _captured is None \
            and not settings.current().host_compile:
        raise ValueError(f"{fn}: {name} is on cpu; Triton kernels need a GPU device "
                         f"(or TRITON_INTERPRET=1 set before importing triton)")


def check_gqa(fn: str, hq: int, hkv: int, q_name: str = "q", kv_name: str = "k/v") -> int:
    """Return G = Hq // Hkv, or raise if Hq is not a multiple of Hkv."""
    if hkv <= 0 or hq % hkv != 0:
        raise ValueError(f"{fn}: the head count of {q_name} (Hq={hq}) must be a multiple of the "
                         f"head count of {kv_name} (Hkv={hkv}), i.e. Hq % Hkv == 0")
    return hq // hkv


def check_decode_qkv(fn: str, q: Any, k: Any, v: Any, max_head_dim: int) -> tuple[int, int, int, int, int]:
    """One query token per sequence over contiguous KV: q [B, Hq, 1, D], k/v [B, Hkv, S, D] of
    q's dtype and device, Hq % Hkv == 0, D <= max_head_dim. Returns (B, Hq, Hkv, S, D)."""
    check_tensor(fn, "q", q, rank=4, dims="[B, Hq, 1, D]", dtypes=FLOAT_DTYPES)
    check_nonempty(fn, "q", q, "[B, Hq, 1, D]")
    B, Hq, _, D = q.shape
    check_tensor(fn, "q", q, shape=(B, Hq, 1, D), dims="[B, Hq, 1, D]")
    if D > max_head_dim:
        raise ValueError(f"{fn}: q head dim D must be <= {max_head_dim}, got {D}")
    check_tensor(fn, "k", k, rank=4, dims="[B, Hkv, S, D]", dtypes=(q.dtype,), device=q.device, like="q")
    check_nonempty(fn, "k", k, "[B, Hkv, S, D]")
    Hkv, S = k.shape[1], k.shape[2]
    kv_shape = (B, Hkv, S, D)
    check_tensor(fn, "k", k, shape=kv_shape, dims="[B, Hkv, S, D]")
    check_tensor(fn, "v", v, rank=4, dims="[B, Hkv, S, D]", dtypes=(q.dtype,), device=q.device,
                 like="q", shape=kv_shape)
    check_gqa(fn, Hq, Hkv)
    return B, Hq, Hkv, S, D


def check_flag(fn: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{fn}: {name} must be a bool, got {type(value).__name__}")
    return value


#: log2(e): kernels work in base 2 and receive ``float32(scale * LOG2E)``.
LOG2E = 1.4426950408889634
#: The smallest magnitude that rounds to inf in float32 (round to nearest even).
_FP32_OVERFLOW = 2.0**128 - 2.0**103


def check_scale(fn: str, scale: Any, head_dim: int, name: str = "scale") -> float:
    """Return the softmax scale as a float (default 1/sqrt(head_dim)). Negative and zero scales
    are legal; the scale must stay finite as the kernels see it: converted to float32, and
    multiplied by log2(e) before that conversion."""
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"{fn}: {name} must be a real number or None, got {type(scale).__name__}")
    value = float(scale)
    if not math.isfinite(value):
        raise ValueError(f"{fn}: {name} must be finite, got {scale}")
    if abs(value) * LOG2E >= _FP32_OVERFLOW:
        raise ValueError(f"{fn}: {name} must be finite in float32 after the kernels' log2(e) "
                         f"factor, i.e. |{name}| < {_FP32_OVERFLOW / LOG2E:.6g}, got {scale}")
    return value


INT32_MAX = 2**31 - 1


def check_rows_fit_int32(fn: str, name: str, t: torch.Tensor, dim: int) -> None:
    """For kernels that step along ``dim`` with an int32 row index (``row * stride(dim) +
    column``; batch and head offsets are int64): one slice's reach must fit int32. Shape-only,
    so a cold-path check (the call key holds shapes and strides)."""
    reach = (t.shape[dim] - 1) * t.stride(dim) + t.shape[-1] - 1
    if reach > INT32_MAX:
        raise ValueError(f"{fn}: {name} rows reach element {reach} of one (batch, head) slice "
                         f"(size {t.shape[dim]}, stride {t.stride(dim)} along dim {dim}); the kernel's "
                         f"int32 row offsets stop at 2**31 - 1")


def check_int_range(fn: str, name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{fn}: {name} must be an int, got {type(value).__name__}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{fn}: {name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _non_overlapping(t: torch.Tensor) -> bool:
    # Sufficient condition: sorted by stride, each stride clears the span of the smaller ones.
    span = 1
    for stride, size in sorted((st, sz) for sz, st in zip(t.shape, t.stride()) if sz > 1):
        if stride < span:
            return False
        span += stride * (size - 1)
    return True


def check_output(fn: str, name: str, t: Any, *, shape: Sequence[int], dtype: torch.dtype,
                 device: torch.device, dims: Optional[str] = None,
                 inputs: Optional[dict] = None) -> torch.Tensor:
    """Validate a caller-provided output buffer: exact shape, dtype, device, writable layout.

    ``inputs`` maps argument names to tensors the buffer must not share memory with (kernels read
    those from other programs while this one writes).
    """
    check_tensor(fn, name, t, dtypes=(dtype,), device=device, shape=shape, dims=dims)
    if not _non_overlapping(t):
        raise ValueError(f"{fn}: {name} must not have overlapping elements (e.g. an expanded "
                         f"view), got strides {tuple(t.stride())} for shape {_fmt_shape(t.shape)}")
    check_no_alias(fn, name, t, inputs)
    return t


def memory_span(t: torch.Tensor) -> tuple[int, int]:
    """``[first byte, one past the last byte)`` of the memory ``t``'s elements lie in, from its
    address, sizes and strides (torch strides are never negative); empty for an empty tensor.
    Two tensors over the same memory overlap here whatever storage objects they come from."""
    start = t.data_ptr()
    if t.is_contiguous():
        return start, start + t.nbytes
    last = 0
    for size, stride in zip(t.shape, t.stride()):
        if size == 0:
            return start, start
        last += (size - 1) * stride
    return start, start + (last + 1) * t.element_size()


def _overlap(a: torch.Tensor, span: tuple, b: torch.Tensor, other: tuple) -> bool:
    """Non-empty spans that intersect, on one device (compared last: it is the slow part)."""
    return (span[0] < other[1] and other[0] < span[1] and span[0] < span[1] and other[0] < other[1]
            and a.device == b.device)


def check_no_alias(fn: str, name: str, t: torch.Tensor, inputs: Optional[dict]) -> None:
    """``t`` (an output) overlaps none of ``inputs`` in memory (kernels read those from other
    programs while this one writes). Compares address ranges, not storage objects: a second
    storage over the same memory (``from_blob``, ``set_``, a shared numpy buffer) is caught.
    Depends on addresses, so the lean call path (``kernels._callcache``) repeats it on every
    call."""
    span = memory_span(t)
    for other_name, other in (inputs or {}).items():
        if isinstance(other, torch.Tensor) and _overlap(t, span, other, memory_span(other)):
            raise ValueError(f"{fn}: {name} must not share memory with {other_name}")


def check_out_lse(fn: str, out: Any, lse: Any, return_lse: bool, *, o_shape: Sequence[int], o_dims: str,
                  lse_shape: Sequence[int], lse_dims: str, like: torch.Tensor, inputs: dict) -> None:
    """Caller-provided output buffers: ``out`` of ``like``'s dtype and device, ``lse`` fp32, only
    when ``return_lse``; neither aliasing an input nor each other."""
    if out is not None:
        check_output(fn, "out", out, shape=o_shape, dtype=like.dtype, device=like.device, dims=o_dims,
                     inputs=inputs)
    if lse is not None:
        if not return_lse:
            raise ValueError(f"{fn}: lse buffer given but return_lse=False")
        check_output(fn, "lse", lse, shape=lse_shape, dtype=torch.float32, device=like.device,
                     dims=lse_dims, inputs=inputs)
        if out is not None:
            check_no_alias(fn, "lse", lse, {"out": out})


def check_out_lse_aliases(fn: str, out: Any, lse: Any, inputs: dict) -> None:
    """The address-dependent part of ``check_out_lse``, in the same order and words, for a call
    whose shapes were validated before (``inputs`` holds tensors or None). Each input's span is
    read once; this runs on every lean call, so the common contiguous case is inlined."""
    spans = []
    for name, x in inputs.items():
        if x is not None:
            start = x.data_ptr()
            end = start + x.nbytes if x.is_contiguous() else memory_span(x)[1]
            if start < end:
                spans.append((name, x, start, end))
    out_lo = out_hi = 0
    for name, t in (("out", out), ("lse", lse)):
        if t is None:
            continue
        lo, hi = memory_span(t)
        for other_name, other, start, end in spans:
            if start < hi and lo < end and other.device == t.device:
                raise ValueError(f"{fn}: {name} must not share memory with {other_name}")
        if name == "out":
            out_lo, out_hi = lo, hi
        elif out_lo < hi and lo < out_hi and out.device == t.device:
            raise ValueError(f"{fn}: lse must not share memory with out")


@dataclass
class LaunchPlan:
    """One kernel launch, fully specified: ``kernel[grid](*args, **meta)``.

    ``then`` chains a follow-up launch (e.g. a split-KV merge) that must run after this one.
    A compile-only tier can compile every plan in ``chain()`` without launching.
    """
    kernel: Any
    grid: tuple
    args: tuple
    meta: dict = field(default_factory=dict)
    then: Optional["LaunchPlan"] = None
    #: Where the tile config came from: "table", "cache", "tuned" or "default" (``kernels._tune``).
    tuning: str = "default"
    #: Tensors the plan allocated that carry nothing between calls, as (tensor, zero-filled):
    #: split partials, merge tickets the kernel leaves at zero. A repeat call may reuse them
    #: (``kernels._callcache``) instead of allocating.
    workspace: tuple = ()
    #: Tensors the plan passes that are one object for every call of its key (a per-device
    #: lookup table, built once and never written): the lean path keeps them as they are.
    constants: tuple = ()

    def chain(self) -> Iterator["LaunchPlan"]:
        p: Optional[LaunchPlan] = self
        while p is not None:
            yield p
            p = p.then


def launch(plan: LaunchPlan) -> list:
    """Run (or, under ``capture_launches``, record) every launch of the chain; returns what each
    JIT launch returned (the compiled kernel on a GPU), [] when recorded. The one place a plan
    is launched: tests that must see no launch replace it, and the lean call path
    (``kernels._callcache``) honours a replacement on repeat calls too."""
    if _captured is not None:
        _captured.append(plan)
        return []
    return run_plan(plan)


def run_plan(plan: LaunchPlan) -> list:
    """Launch every kernel of the chain (no capture: the tuner times candidates with this)."""
    return [p.kernel[p.grid](*p.args, **p.meta) for p in plan.chain()]


#: ``launch`` as defined here, to tell when it has been replaced.
DEFAULT_LAUNCH = launch


def is_live(t: torch.Tensor) -> bool:
    """True when a plan for ``t`` is for a real device (not the interpreter, not compile-only's
    CPU tensors). Capturing a device call (the benchmarks record its config) stays live."""
    return not is_interpret() and t.device.type != "cpu"


def use_fast_path(t: torch.Tensor) -> bool:
    """Whether a wrapper takes its backend-specific fast path for ``t`` (``settings.kernel_path``):
    auto uses them on CUDA tensors and the portable kernels everywhere else (NPU, interpreter,
    compile-only's host tensors)."""
    choice = settings.current().kernel_path
    if choice == "auto":
        return t.device.type == "cuda"
    return choice == "fast"


# --- Index tensors (page tables, token lists): dtype/device/rank, then their contents. ---

def check_index_tensor(fn: str, name: str, t: Any, *, device: torch.device, rank: int,
                       shape: Optional[Sequence[Optional[int]]] = None, dims: Optional[str] = None,
                       like: str = "q") -> torch.Tensor:
    """An int32 index tensor on ``device`` with the given rank (and shape); returns it unchanged.

    The message for a wrong dtype reads e.g. ``paged_decode: kv_page_indices must be int32, got int64``.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    check_has_data(fn, name, t)
    if t.dtype != torch.int32:
        raise TypeError(f"{fn}: {name} must be int32, got {_fmt_dtype(t.dtype)}")
    return check_tensor(fn, name, t, rank=rank, device=device, like=like, shape=shape, dims=dims)


def check_values_in_range(fn: str, name: str, t: torch.Tensor, lo: Any, hi: Any, *,
                          where: Optional[torch.Tensor] = None, what: str = "values",
                          closed: bool = False) -> None:
    """Data-dependent check (reads ``t``: a device sync): every element of ``t`` (only where
    ``where`` is True, if given) lies in ``[lo, hi)`` (``[lo, hi]`` with ``closed``). ``lo``/``hi``
    are numbers or tensors that broadcast against ``t``. The message names the first offending
    element, its value and the bounds.
    """
    lo_t, lo = _bound(lo, t)
    hi_t, hi = _bound(hi, t)
    bad = (t < lo) | ((t > hi) if closed else (t >= hi))
    if where is not None:
        bad = bad & where
    if not bool(bad.any()):
        return
    pos = tuple(int(i) for i in bad.nonzero()[0])
    lo_v = _bound_at(lo_t, lo, t, pos)
    hi_v = _bound_at(hi_t, hi, t, pos)
    at = f" at index {list(pos)}" if t.dim() else ""
    close = "]" if closed else ")"
    raise ValueError(f"{fn}: {name} {what} must be in [{lo_v}, {hi_v}{close}, got {t[pos].item()}{at}")


def _bound(value: Any, t: torch.Tensor) -> tuple:
    """(the bound as a tensor or None, what to compare with). An int that fits ``t``'s integer
    dtype is compared as a Python scalar, without copying it to the device first; anything
    else as a tensor (a scalar out of the dtype's range would wrap around)."""
    if isinstance(value, torch.Tensor):
        return value, value
    if (isinstance(value, numbers.Integral) and not isinstance(value, bool) and not t.is_floating_point()
            and t.dtype != torch.bool and torch.iinfo(t.dtype).min <= value <= torch.iinfo(t.dtype).max):
        return None, value
    as_tensor = torch.as_tensor(value, device=t.device)
    return as_tensor, as_tensor


def _bound_at(as_tensor: Optional[torch.Tensor], value: Any, t: torch.Tensor, pos: tuple):
    """A bound of ``check_values_in_range`` at the offending position, as the message shows it."""
    if as_tensor is None:
        return torch.as_tensor(value).item()
    return as_tensor.expand_as(t)[pos].item() if as_tensor.dim() else as_tensor.item()


_ASCEND: Optional[bool] = None


def on_ascend(t: torch.Tensor) -> bool:
    """Planning for an Ascend NPU: an npu tensor, or compile-only (cpu tensors, no interpreter)
    under triton-ascend. Tile and grid choices that only Ascend needs key on this."""
    global _ASCEND
    if t.device.type == "npu":
        return True
    if t.device.type != "cpu" or is_interpret():
        return False
    if _ASCEND is None:
        import importlib.util
        _ASCEND = any(importlib.util.find_spec(f"triton.backends.{n}") is not None
                      for n in ("ascend", "huawei"))
    return _ASCEND

