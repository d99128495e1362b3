"""Bad input gets a clear error naming the argument, before any kernel launch."""
import pytest
import torch

import kernels._checks
from kernels.decode import decode
from kernels.prefill import prefill


@pytest.fixture(autouse=True)
def no_launch(monkeypatch):
    def refuse(plan):
        raise AssertionError("a kernel was launched for bad input")

    for module in ("kernels.prefill", "kernels.decode"):
        monkeypatch.setattr(f"{module}.launch", refuse)
    monkeypatch.setattr(kernels._checks, "launch", refuse)


def t(*shape, dtype=torch.float16):
    return torch.zeros(shape, dtype=dtype)


def qkv(B=2, Hq=4, Hkv=2, Sq=5, S=5, D=16):
    return t(B, Hq, Sq, D), t(B, Hkv, S, D), t(B, Hkv, S, D)


def call_prefill(q=None, k=None, v=None, **kw):
    q0, k0, v0 = qkv()
    kw.setdefault("causal", True)
    return prefill(q0 if q is None else q, k0 if k is None else k, v0 if v is None else v, **kw)


def call_decode(q=None, k=None, v=None, **kw):
    q0, k0, v0 = qkv(Sq=1)
    return decode(q0 if q is None else q, k0 if k is None else k, v0 if v is None else v, **kw)


PREFILL_BAD = [
    ("q-not-tensor", dict(q=[1.0]), TypeError, "prefill: q must be a torch.Tensor"),
    ("q-rank", dict(q=t(2, 4, 16)), ValueError, "prefill: q must have rank 4"),
    ("q-int", dict(q=t(2, 4, 5, 16, dtype=torch.int32)), TypeError, "prefill: q must have dtype"),
    ("k-dtype", dict(k=t(2, 2, 5, 16, dtype=torch.float32)), TypeError, "prefill: k must have dtype float16"),
    ("v-shape", dict(v=t(2, 3, 5, 16)), ValueError, "prefill: v must have shape"),
    ("k-length", dict(k=t(2, 2, 6, 16)), ValueError, "prefill: k must have shape"),
    ("gqa", dict(q=t(2, 3, 5, 16), k=t(2, 2, 5, 16), v=t(2, 2, 5, 16)), ValueError, "multiple of"),
    ("noncontiguous", dict(q=t(2, 4, 16, 5).transpose(2, 3)), ValueError, "prefill: q must be contiguous"),
    ("causal-type", dict(causal=1), TypeError, "prefill: causal must be a bool"),
    ("scale-nan", dict(scale=float("nan")), ValueError, "prefill: scale must be finite"),
    ("out-shape", dict(out=t(2, 4, 5, 8)), ValueError, "prefill: out must have shape"),
    ("lse-dtype", dict(return_lse=True, lse=t(2, 4, 5)), TypeError, "prefill: lse must have dtype float32"),
    ("lse-without-flag", dict(lse=t(2, 4, 5, dtype=torch.float32)), ValueError, "return_lse=False"),
    ("empty", dict(q=t(2, 4, 0, 16), k=t(2, 2, 0, 16), v=t(2, 2, 0, 16)), ValueError, "prefill: q must have every"),
]

DECODE_BAD = [
    ("q-two-tokens", dict(q=t(2, 4, 2, 16)), ValueError, "decode: q must have shape"),
    ("k-rank", dict(k=t(2, 2, 16)), ValueError, "decode: k must have rank 4"),
    ("v-dtype", dict(v=t(2, 2, 5, 16, dtype=torch.bfloat16)), TypeError, "decode: v must have dtype float16"),
    ("gqa", dict(q=t(2, 3, 1, 16)), ValueError, "multiple of"),
    ("out-dtype", dict(out=t(2, 4, 1, 16, dtype=torch.float32)), TypeError, "decode: out must have dtype"),
    ("lse-shape", dict(return_lse=True, lse=t(2, 4, dtype=torch.float32)), ValueError, "decode: lse must have"),
]


@pytest.mark.parametrize("name,kwargs,exc,match", PREFILL_BAD, ids=[b[0] for b in PREFILL_BAD])
def test_prefill_rejects(name, kwargs, exc, match):
    with pytest.raises(exc, match=match.replace("(", r"\(").replace("[", r"\[")):
        call_prefill(**kwargs)


@pytest.mark.parametrize("name,kwargs,exc,match", DECODE_BAD, ids=[b[0] for b in DECODE_BAD])
def test_decode_rejects(name, kwargs, exc, match):
    with pytest.raises(exc, match=match.replace("(", r"\(").replace("[", r"\[")):
        call_decode(**kwargs)


def test_out_must_not_alias_an_input():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="prefill: out must not share memory with q"):
        prefill(q, k, v, causal=False, out=q)
