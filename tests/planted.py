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
    time.sleep(3600)


def decode_crashes(q, k, v, **kw):
    os._exit(3)  # what a segfaulting launch looks like to the harness


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
