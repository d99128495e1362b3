"""Probe gather_int32 (porting_notes.md#gather_int32): ``tl.gather`` on an int32 tile (e.g.
selecting packed 2-bit code words per element).

original: ``tl.gather(words, idx, axis=0)`` with int32 ``words``. triton-ascend 3.2.0rc4 and
    3.2.0 reject it in the frontend ("Expected dtype fp16/fp32/bf16..., but got int32"): the
    gather of A2/A3 takes float dtypes only.
rewrite: bitcast the words to fp32, gather, bitcast back (a bit-exact round trip).
"""
import torch
import triton
import triton.language as tl

from kernels._checks import LaunchPlan, launch


@triton.jit
def _gather_words(W, IDX, O, N: tl.constexpr):
    offs = tl.arange(0, N)
    words = tl.load(W + offs)
    tl.store(O + offs, tl.gather(words, tl.load(IDX + offs), axis=0))


@triton.jit
def _gather_words_as_f32(W, IDX, O, N: tl.constexpr):
    offs = tl.arange(0, N)
    words = tl.load(W + offs).to(tl.float32, bitcast=True)
    picked = tl.gather(words, tl.load(IDX + offs), axis=0)
    tl.store(O + offs, picked.to(tl.int32, bitcast=True))


def _gather(kernel, words: torch.Tensor, idx: torch.Tensor, out: torch.Tensor | None) -> torch.Tensor:
    (N,) = words.shape
    if words.dtype != torch.int32 or idx.dtype != torch.int32 or idx.shape != words.shape:
        raise TypeError("gather_int32: words and idx must be int32 vectors of one length")
    if N & (N - 1):
        raise ValueError(f"gather_int32: N must be a power of two, got {N}")
    if out is None:
        out = torch.empty_like(words)
    launch(LaunchPlan(kernel=kernel, grid=(1,), args=(words.contiguous(), idx.contiguous(), out),
                      meta=dict(N=N)))
    return out


def original(words, idx, out=None):
    """``words[idx]`` with ``tl.gather`` on int32."""
    return _gather(_gather_words, words, idx, out)


def rewrite(words, idx, out=None):
    """``words[idx]`` gathered as fp32 bit patterns."""
    return _gather(_gather_words_as_f32, words, idx, out)
