"""Probe gather_inner_axis (porting_notes.md#gather_transposed): the same transposed gather as
``gather_transposed``, with the loaded indices put on the inner axis by indexing,
``(K + tok * stride)[None, :] + offs_d[:, None]``, instead of ``tl.reshape``. It fails
differently on triton-ascend 3.2.0rc2 ("failed to legalize unresolved materialization ... to
'tensor<16x!tt.ptr<f16>>'", then SIGABRT), hence a probe of its own.

rewrite: the row gather then ``tl.trans`` of ``gather_transposed``.
"""
import triton
import triton.language as tl

from .gather_transposed import _gather_rows_then_trans, gather


@triton.jit
def _gather_kt_inner(K, IDX, KT, stride_kt, N: tl.constexpr, D: tl.constexpr):
    offs_n = tl.arange(0, N)
    offs_d = tl.arange(0, D)
    tok = tl.load(IDX + offs_n)
    k_ptr = K + tok * stride_kt
    kt = tl.load(k_ptr[None, :] + offs_d[:, None])  # [D, N]: the gathered tokens vary fastest
    tl.store(KT + offs_d[:, None] * N + offs_n[None, :], kt)


def original(k, idx, out=None):
    """``k[idx].T`` [D, N], the pointer tensor indexed with ``[None, :]``."""
    return gather(_gather_kt_inner, k, idx, out, "gather_inner_axis")


def rewrite(k, idx, out=None):
    """``k[idx].T`` [D, N], gathered as rows [N, D] and transposed in registers."""
    return gather(_gather_rows_then_trans, k, idx, out, "gather_inner_axis")
