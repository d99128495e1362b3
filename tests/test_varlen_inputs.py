"""prefill_padded / prefill_packed: bad input gets a clear error naming the argument before any
kernel launch; padded query rows come back exactly zero (LSE -inf), never unwritten."""
import pytest
import torch

import kernels._checks
from kernels.prefill_varlen import prefill_packed, prefill_padded


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(plan):
        raise AssertionError("a kernel was launched for bad input")

    monkeypatch.setattr("kernels.prefill_varlen.launch", refuse)
    monkeypatch.setattr(kernels._checks, "launch", refuse)


def t(*shape, dtype=torch.float16):
    return torch.zeros(shape, dtype=dtype)


def i32(*values, dtype=torch.int32):
    return torch.tensor(values, dtype=dtype)


def call_padded(q=None, k=None, v=None, lengths=None, **kw):
    # B=2, Hq=4, Hkv=2, S=5, D=16
    kw.setdefault("causal", True)
    return prefill_padded(t(2, 4, 5, 16) if q is None else q, t(2, 2, 5, 16) if k is None else k,
                          t(2, 2, 5, 16) if v is None else v, i32(5, 3) if lengths is None else lengths, **kw)


def call_packed(q=None, k=None, v=None, cu_seqlens=None, **kw):
    # T=7 tokens in sequences of 3 and 4, Hq=4, Hkv=2, D=16
    kw.setdefault("causal", True)
    return prefill_packed(t(7, 4, 16) if q is None else q, t(7, 2, 16) if k is None else k,
                          t(7, 2, 16) if v is None else v, i32(0, 3, 7) if cu_seqlens is None else cu_seqlens,
                          **kw)


PADDED_BAD = [
    ("q-not-tensor", dict(q=[1.0]), TypeError, "prefill_padded: q must be a torch.Tensor"),
    ("q-rank", dict(q=t(2, 4, 16)), ValueError, "prefill_padded: q must have rank 4"),
    ("k-dtype", dict(k=t(2, 2, 5, 16, dtype=torch.float32)), TypeError, "prefill_padded: k must have dtype float16"),
    ("v-shape", dict(v=t(2, 2, 6, 16)), ValueError, "prefill_padded: v must have shape"),
    ("gqa", dict(q=t(2, 3, 5, 16)), ValueError, "prefill_padded: the head count of q (Hq=3)"),
    ("lengths-int64", dict(lengths=i32(5, 3, dtype=torch.int64)), TypeError,
     "prefill_padded: lengths must be int32, got int64"),
    ("lengths-shape", dict(lengths=i32(5, 3, 2)), ValueError, "prefill_padded: lengths must have shape [B] = [2]"),
    ("lengths-rank", dict(lengths=i32(5, 3)[None]), ValueError, "prefill_padded: lengths must have rank 1"),
    ("lengths-zero", dict(lengths=i32(5, 0)), ValueError,
     "prefill_padded: lengths values must be in [1, 5], got 0 at index [1]"),
    ("lengths-over-S", dict(lengths=i32(6, 3)), ValueError,
     "prefill_padded: lengths values must be in [1, 5], got 6 at index [0]"),
    ("causal-type", dict(causal=1), TypeError, "prefill_padded: causal must be a bool"),
    ("out-shape", dict(out=t(2, 4, 5, 8)), ValueError, "prefill_padded: out must have shape"),
    ("lse-shape", dict(return_lse=True, lse=t(2, 4, 4, dtype=torch.float32)), ValueError,
     "prefill_padded: lse must have shape [B, Hq, S]"),
    ("lse-without-flag", dict(lse=t(2, 4, 5, dtype=torch.float32)), ValueError, "return_lse=False"),
]

PACKED_BAD = [
    ("q-rank", dict(q=t(1, 7, 4, 16)), ValueError, "prefill_packed: q must have rank 3"),
    ("k-tokens", dict(k=t(6, 2, 16)), ValueError, "prefill_packed: k must have shape [T, Hkv, D] = [7, 2, 16]"),
    ("v-dtype", dict(v=t(7, 2, 16, dtype=torch.bfloat16)), TypeError, "prefill_packed: v must have dtype float16"),
    ("gqa", dict(k=t(7, 3, 16), v=t(7, 3, 16)), ValueError, "prefill_packed: the head count of q (Hq=4)"),
    ("cu-int64", dict(cu_seqlens=i32(0, 3, 7, dtype=torch.int64)), TypeError,
     "prefill_packed: cu_seqlens must be int32, got int64"),
    ("cu-rank", dict(cu_seqlens=i32(0, 3, 7)[None]), ValueError, "prefill_packed: cu_seqlens must have rank 1"),
    ("cu-one-entry", dict(cu_seqlens=i32(0)), ValueError, "prefill_packed: cu_seqlens must have shape [B+1]"),
    ("cu-start", dict(cu_seqlens=i32(1, 3, 7)), ValueError, "prefill_packed: cu_seqlens must start at 0, got"),
    ("cu-decreasing", dict(cu_seqlens=i32(0, 5, 3, 7)), ValueError,
     "prefill_packed: cu_seqlens must be non-decreasing, got cu_seqlens[1] = 5 > cu_seqlens[2] = 3"),
    ("cu-end", dict(cu_seqlens=i32(0, 3, 6)), ValueError, "prefill_packed: cu_seqlens must end at T = 7"),
    ("cu-past-end", dict(cu_seqlens=i32(0, 3, 8)), ValueError, "prefill_packed: cu_seqlens must end at T = 7"),
    ("max-seqlen-short", dict(max_seqlen=3), ValueError,
     "prefill_packed: max_seqlen must be >= the longest sequence (4), got 3"),
    ("max-seqlen-type", dict(max_seqlen=4.0), TypeError, "prefill_packed: max_seqlen must be an int"),
    ("scale-nan", dict(scale=float("nan")), ValueError, "prefill_packed: scale must be finite"),
    ("lse-layout", dict(return_lse=True, lse=t(4, 7, dtype=torch.float32)), ValueError,
     "prefill_packed: lse must have shape [T, Hq] = [7, 4]"),
]


def _re(text):
    return text.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]").replace("+", r"\+")


@pytest.mark.parametrize("name,kwargs,exc,match", PADDED_BAD, ids=[b[0] for b in PADDED_BAD])
def test_padded_rejects(no_launch, name, kwargs, exc, match):
    with pytest.raises(exc, match=_re(match)):
        call_padded(**kwargs)


@pytest.mark.parametrize("name,kwargs,exc,match", PACKED_BAD, ids=[b[0] for b in PACKED_BAD])
def test_packed_rejects(no_launch, name, kwargs, exc, match):
    with pytest.raises(exc, match=_re(match)):
        call_packed(**kwargs)


def test_packed_out_must_not_alias_q(no_launch):
    q = t(7, 4, 16)
    with pytest.raises(ValueError, match="prefill_packed: out must not share memory with q"):
        call_packed(q=q, out=q)


def _interpreting():
    return kernels._checks.is_interpret()


@pytest.mark.skipif(not _interpreting() and not torch.cuda.is_available(),
                    reason="needs TRITON_INTERPRET=1 or a GPU")
@pytest.mark.parametrize("causal", [True, False])
def test_padded_rows_are_exact_zeros(causal):
    device = "cpu" if _interpreting() else "cuda"
    gen = torch.Generator().manual_seed(0)
    B, Hq, Hkv, S, D = 3, 4, 2, 40, 32
    q, k, v = (torch.randn(shape, generator=gen).to(torch.float16).to(device)
               for shape in ((B, Hq, S, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    lengths = torch.tensor([1, 40, 17], dtype=torch.int32, device=device)
    # Pre-fill the outputs with garbage: every padded row must be overwritten.
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, Hq, S), 123.0, dtype=torch.float32, device=device)
    o, l = prefill_padded(q, k, v, lengths, causal=causal, return_lse=True, out=out, lse=lse)
    for b, n in enumerate(lengths.tolist()):
        assert torch.equal(o[b, :, n:], torch.zeros_like(o[b, :, n:]))
        assert bool(torch.isneginf(l[b, :, n:]).all())
        assert bool(torch.isfinite(o[b, :, :n]).all()) and bool(torch.isfinite(l[b, :, :n]).all())
