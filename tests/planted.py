"""Misbehaving implementations for the harness's own checks (a hang, a crash, a write past the
output, an input modified in place, a wrong answer). The per-family planted-bug catalog is
mutants/ (python -m attnsuite.mutate)."""
from __future__ import annotations

import math
import os
import time

from kernels.decode import decode


def decode_wrong_kv_head(q, k, v, **kw):
    """Query head h reads KV head h % Hkv instead of h // G: invisible when G == 1 or Hkv == 1."""
    group = q.shape[1] // k.shape[1]
    return decode(q, k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1), **kw)


def decode_hangs(q, k, v, **kw):
    started = os.environ.get("ATTN_PLANTED_STARTED")
    if started:  # lets a test know the case is under way before it interrupts the run
        open(started, "a").close()
    # Short sleeps: a signal the kernel hands to another thread (torch's, the watchdog's) only
    # sets a flag; the main thread must wake to act on it, as a Python loop would.
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        time.sleep(0.05)


def decode_writes_past_end(q, k, v, *, out=None, **kw):
    o, lse = decode(q, k, v, out=out, **kw)
    flat = out.view(-1)
    # One element past the end of the output, inside the harness's guard region.
    flat.as_strided((1,), (1,), flat.storage_offset() + flat.numel()).fill_(0.0)
    return o, lse


def decode_modifies_k(q, k, v, **kw):
    k.mul_(1.0)
    k[..., 0, 0] = math.pi
    return decode(q, k, v, **kw)


def decode_aborts(q, k, v, **kw):
    """SIGABRT on every call, as a failed assertion in a driver does."""
    os.abort()


def decode_hangs_in_native_code(q, k, v, **kw):
    """Blocks every signal, then sleeps in C: pytest-timeout's SIGALRM never reaches Python."""
    import ctypes
    import signal

    signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))
    ctypes.CDLL(None).sleep(3600)


def decode_out_of_memory(q, k, v, **kw):
    """The device runs out of memory (torch's own exception type, as a CUDA allocator raises)."""
    import torch

    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


def decode_ignores_out(q, k, v, *, out=None, lse=None, return_lse=False, **kw):
    """Right numbers, but in tensors of its own: the caller's out/lse buffers stay unwritten."""
    return decode(q, k, v, return_lse=return_lse, **kw)


def decode_copies_out(q, k, v, *, out=None, lse=None, return_lse=False, **kw):
    """Fills the caller's buffers, then returns fresh copies of them instead."""
    o, l = decode(q, k, v, out=out, lse=lse, return_lse=return_lse, **kw)
    return o.clone(), (l.clone() if l is not None else None)


def decode_never_writes(q, k, v, *, out=None, lse=None, return_lse=False, **kw):
    """Returns the caller's buffers untouched (NaN-filled)."""
    return out, lse
