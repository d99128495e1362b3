"""A catalog written the way a user would write one (``python -m attnsuite.mutate --catalog
tests.mutation_catalog``): some entries are deliberately mislabelled (a correct "mutant", a wrong
"control"), one hangs and one kills its process, so tests/test_mutants.py can check how each is
counted."""
import math
import os
import time

import torch

FAMILY = "decode"


def _attention(q, k, v, scale, return_lse, out, lse, *, scale_by=1.0):
    G = q.shape[1] // k.shape[1]
    kk, vv = k.float().repeat_interleave(G, 1), v.float().repeat_interleave(G, 1)
    s = (q.float() @ kk.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale) * scale_by
    out.copy_(torch.softmax(s, -1) @ vv)
    if return_lse:
        lse.copy_(torch.logsumexp(s, -1))
    return out, (lse if return_lse else None)


def decode_correct(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Not a bug at all: a mutant that must survive."""
    return _attention(q, k, v, scale, return_lse, out, lse)


def decode_unscaled(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Scores twice as large as they should be."""
    return _attention(q, k, v, scale, return_lse, out, lse, scale_by=2.0)


def decode_hangs(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Never returns."""
    time.sleep(3600)


def decode_crashes(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """Kills its process, as a segfault in native code would."""
    os._exit(3)


def decode_sdpa(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """A correct control."""
    return _attention(q, k, v, scale, return_lse, out, lse)


def decode_returns_zeros(q, k, v, *, scale=None, return_lse=False, out=None, lse=None):
    """A "control" that is wrong: every output zero."""
    out.zero_()
    if return_lse:
        lse.zero_()
    return out, (lse if return_lse else None)


MUTANTS = {f.__name__: f for f in (decode_correct, decode_hangs, decode_unscaled, decode_crashes)}
CONTROLS = {f.__name__: f for f in (decode_sdpa, decode_returns_zeros)}
