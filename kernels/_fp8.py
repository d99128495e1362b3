"""FP8 (e4m3fn) KV caches: the scale checks and the portable e4m3 decode (docs/fp8.md).

A cache of ``torch.float8_e4m3fn`` holds values ``fp8.to(fp32) * scale`` with one fp32 scale per
tensor (``k_scale``, ``v_scale``). Kernels read such a cache one of two ways:

* ``native``: the cache is passed as is and the loaded ``tl.float8e4nv`` tile is cast with
  ``.to()``. Compiled CUDA converts in hardware (sm_89+) or with Triton's own emulation. Not used
  under the Triton interpreter, which decodes the NaN encodings 0x7f/0xff as +-480
  (porting_notes.md#fp8_load), nor on Ascend, whose 910B has no fp8 type.
* ``bits``: the wrapper passes ``cache.view(torch.uint8)`` and ``e4m3_to_f32`` decodes the bit
  pattern with integer arithmetic and one int32 -> fp32 bitcast. Exact for all 256 patterns
  (subnormals, +-448, NaN), and it needs no fp8 type from the backend.

The decode is exact into fp16 and bf16 as well (3 mantissa bits, exponents 2^-9 .. 2^8), so a
kernel can decode to q's dtype, feed ``tl.dot`` as usual and apply the scales in fp32 afterwards:
``q . (k * k_scale) = (q . k) * k_scale`` and ``p @ (v * v_scale) = (p @ v) * v_scale``.
"""
from __future__ import annotations

import functools
import math
import struct

import torch
import triton
import triton.language as tl

from ._checks import is_interpret

FP8_DTYPE = torch.float8_e4m3fn
#: How a kernel reads an fp8 cache (constexpr ``KV_FP8``): not fp8, Triton's cast, bit decode.
NOT_FP8, NATIVE, BITS = 0, 1, 2


@triton.jit
def e4m3_to_f32(bits):
    """fp32 value of e4m3fn bit patterns (any integer tile holding 0..255).

    e4m3fn: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is subnormal
    (m * 2^-9), 0x7f and 0xff are NaN, there is no infinity. Every value is ``mant * 2^(e' - 10)``
    with ``mant = m (+ 8 when normal)`` and ``e' = max(e, 1)``; the power of two is built as fp32
    bits, so the product of two exact factors is exact."""
    b = bits.to(tl.int32) & 255
    e = (b >> 3) & 15
    m = b & 7
    mant = tl.where(e == 0, m, m + 8).to(tl.float32)
    pow2 = ((tl.maximum(e, 1) + 117) << 23).to(tl.float32, bitcast=True)  # 2^(max(e,1) - 10)
    mag = tl.where((b & 127) == 127, float("nan"), mant * pow2)
    return tl.where(b >= 128, -mag, mag)


@triton.jit
def e4m3_to_f16(bits):
    """fp16 value of e4m3fn bit patterns (any integer tile holding 0..255), the cheap form.

    Moving e4m3's exponent and mantissa fields into fp16's (``(b & 0x7f) << 7``) gives the value
    times 2^-8 (the exponent biases are 7 and 15), subnormals included (fp16 subnormals are
    ``m * 2^-24``); one exact multiply by 256 restores it. 0x7f/0xff would come out as +-480:
    they are made NaN explicitly."""
    b = bits.to(tl.int32) & 255
    h = (((b & 127) << 7) | ((b & 128) << 8)).to(tl.int16).to(tl.float16, bitcast=True)
    return tl.where((b & 127) == 127, float("nan"), h * 256.0)


@triton.jit
def f16_row_scale(amax):
    """Powers of two (down, up) for rows whose largest magnitude is ``amax`` (fp32 [rows]): a
    bf16 row times ``down`` has its largest element in [2^14, 2^15) and is exact in fp16 (bf16's 8
    significant bits fit fp16's 11; only elements below 2^-38 of the row's largest round), and
    ``up`` undoes it on the row's scores. Why: on sm_90 e4m3 -> fp16 is one conversion per two
    elements in hardware, e4m3 -> bf16 goes through fp32, so a bf16 query meets an fp8 cache in
    fp16."""
    # Clamped so that up (<= 2^113) stays finite in fp32 with room for the score scale; rows
    # below 2^-86 keep their largest element under 2^14 (still exact down to fp16's subnormals).
    shift = tl.minimum(tl.maximum(((amax.to(tl.int32, bitcast=True) >> 23) & 255) - 141, -100), 113)
    return ((127 - shift) << 23).to(tl.float32, bitcast=True), ((127 + shift) << 23).to(tl.float32, bitcast=True)


@triton.jit
def load_kv(ptrs, mask, KV_FP8: tl.constexpr, DTYPE: tl.constexpr):
    """A K or V tile in DTYPE (q's dtype): masked slots read as 0 and are never loaded, so an
    fp8 NaN there never reaches the arithmetic. fp8 caches are decoded exactly, unscaled."""
    if KV_FP8 == 2:
        x = e4m3_to_f32(tl.load(ptrs, mask=mask, other=0)).to(DTYPE)
    elif KV_FP8 == 1:
        x = tl.load(ptrs, mask=mask, other=0.0).to(DTYPE)
    else:
        x = tl.load(ptrs, mask=mask, other=0.0)
    return x


def is_fp8(t: torch.Tensor) -> bool:
    return t.dtype == FP8_DTYPE


def check_kv_scale(fn: str, name: str, value) -> float:
    """A per-tensor dequantisation scale: a Python number or a one-element fp32 tensor, finite,
    checked as the kernel sees it (rounded to fp32). Returns it as a Python float (fp32 value).
    Zero and negative scales are legal (they are what the caller stored)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"{fn}: {name} must be a single per-tensor scale, got a tensor of shape "
                             f"{list(value.shape)}")
        if value.dtype != torch.float32:
            raise TypeError(f"{fn}: {name} must be float32, got {value.dtype}")
        value = float(value.detach().cpu().reshape(()))
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{fn}: {name} must be a float or a one-element float32 tensor, "
                        f"got {type(value).__name__}")
    value = float(value)
    try:
        as_f32 = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        as_f32 = math.inf
    if not math.isfinite(as_f32):
        raise ValueError(f"{fn}: {name} must be finite in float32, got {value!r}"
                         + (" (overflows float32)" if math.isfinite(value) else ""))
    return as_f32


def check_kv_scales(fn: str, cache: torch.Tensor, k_scale, v_scale) -> tuple[float, float]:
    """Both scales (fp32 values). A 16-bit cache takes only the default 1.0: a scale given with
    a cache that is not fp8 is a mistake the caller should hear about."""
    k, v = check_kv_scale(fn, "k_scale", k_scale), check_kv_scale(fn, "v_scale", v_scale)
    if not is_fp8(cache) and (k != 1.0 or v != 1.0):
        raise ValueError(f"{fn}: k_scale/v_scale apply to a float8_e4m3fn cache only; the cache is "
                         f"{cache.dtype} (got k_scale={k_scale!r}, v_scale={v_scale!r})")
    return k, v


def call_scales(fn: str, cache, k_scale, v_scale) -> tuple[float, float]:
    """A wrapper's scales as the kernel sees them, checked on every call (a scale tensor's value
    may change between calls); the default (1.0, 1.0) costs two type checks."""
    if type(k_scale) is float and type(v_scale) is float and k_scale == 1.0 == v_scale:
        return 1.0, 1.0
    if isinstance(cache, torch.Tensor):
        return check_kv_scales(fn, cache, k_scale, v_scale)
    return check_kv_scale(fn, "k_scale", k_scale), check_kv_scale(fn, "v_scale", v_scale)


def kv_read_mode(cache: torch.Tensor, native_ok: bool) -> int:
    """NOT_FP8, NATIVE or BITS for a cache; ``native_ok``: the target converts fp8 correctly
    (compiled CUDA)."""
    if not is_fp8(cache):
        return NOT_FP8
    return NATIVE if native_ok else BITS


def fp8_mode(cache: torch.Tensor) -> int:
    """How the kernels read this cache: Triton's own fp8 cast only where it is right and
    compiles, i.e. compiled CUDA on sm_89+ (the interpreter decodes the NaN encodings as +-480;
    sm_80 and Ascend have no fp8e4nv); the bit decode everywhere else."""
    if not is_fp8(cache):
        return NOT_FP8
    native_ok = (cache.device.type == "cuda" and not is_interpret()
                 and _capability(torch.cuda.current_device() if cache.device.index is None
                                 else cache.device.index) >= (8, 9))
    return kv_read_mode(cache, native_ok)


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple:
    """A CUDA device's compute capability, asked once (the wrappers ask on every call)."""
    return torch.cuda.get_device_capability(index)


def kernel_view(cache: torch.Tensor, mode: int) -> torch.Tensor:
    """The tensor a kernel is given: the byte view for bit decoding, else the cache itself."""
    return cache.view(torch.uint8) if mode == BITS else cache
