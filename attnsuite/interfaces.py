"""The calling convention every implementation of a family must accept: the one place it is
written down (``python -m attnsuite.interfaces`` prints it), and the check run when an
implementation is registered (``check_impl``), so a wrong signature fails before any case.

Conventions shared by all families: tensors arrive on the device, in the layouts of
``../shared/spec/kernels.md``; ``out`` (and ``lse`` when ``return_lse``) are preallocated,
NaN-filled buffers the implementation must fill; it returns ``(o, lse)``, with ``lse`` fp32
natural-log when asked (anything when not). Raise ``Unsupported("why")`` for a case the
implementation does not handle (e.g. no LSE): the case is skipped with that reason.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass


class Unsupported(Exception):
    """Raised by an implementation for a case it does not support; the case is skipped."""


@dataclass(frozen=True)
class Interface:
    family: str
    positional: tuple[str, ...]
    keywords: tuple[str, ...]
    returns: str
    #: Methods an implementation object must have instead of being called directly (mustafar).
    methods: tuple[str, ...] = ()

    def signature(self) -> str:
        if self.methods:
            return f"{self.family}: an object with methods {', '.join(self.methods)} -> {self.returns}"
        kw = ", ".join(f"{k}=..." for k in self.keywords)
        return f"{self.family}({', '.join(self.positional)}, *, {kw}) -> {self.returns}"


_OUT = ("return_lse", "out", "lse")

INTERFACES = {i.family: i for i in (
    Interface("prefill", ("q", "k", "v"), ("causal", *_OUT), "(o [B, Hq, S, D], lse [B, Hq, S])"),
    Interface("prefill_varlen", ("q", "k", "v", "seq"), ("causal", *_OUT),
              "(o, lse); padded: q [B, Hq, S, D], seq = lengths [B]; packed: q [T, Hq, D], "
              "seq = cu_seqlens [B + 1]"),
    Interface("decode", ("q", "k", "v"), _OUT, "(o [B, Hq, 1, D], lse [B, Hq, 1])"),
    Interface("paged_decode", ("q", "kv_cache", "kv_page_indptr", "kv_page_indices", "kv_last_page_len"),
              ("layout", *_OUT), "(o [B, Hq, D], lse [B, Hq])"),
    Interface("sparse_decode", ("q", "k", "v", "sparse_ind", "sparse_nnz"), _OUT,
              "(o [B, Hq, 1, D], lse [B, Hq, 1])"),
    Interface("sparse_paged_decode", ("q", "kv_cache", "kv_page_indptr", "kv_page_indices", "sparse_ind",
                                      "sparse_nnz"), ("layout", "kv_last_page_len", *_OUT),
              "(o [B, Hq, D], lse [B, Hq])"),
    Interface("magicpig_decode", ("q", "kv_cache", "kv_page_indptr", "kv_page_indices", "sparse_ind",
                                  "sparse_nnz", "K", "L"), ("layout", "kv_last_page_len", *_OUT),
              "(o [B, Hq, D], lse [B, Hq])"),
    Interface("block_sparse", ("q", "k", "v", "sabi"), ("block_shape", *_OUT),
              "(o [B, H, S, D], lse [B, H, S] or an empty tensor)"),
    Interface("mustafar", (), (), "see cases/mustafar.py MustafarOps",
              methods=("compress", "decompress", "keys", "values", "decode")),
    Interface("probes", ("case", "inputs", "out"), (), "the probe's single output tensor"),
)}


class BadImplementation(TypeError):
    pass


def check_impl(family: str, name: str, fn: object) -> None:
    """Raise BadImplementation (naming the implementation and the expected call) when ``fn``
    cannot be called the way the harness calls implementations of ``family``."""
    iface = INTERFACES.get(family)
    if iface is None:
        return
    expected = iface.signature()
    if iface.methods:
        missing = [m for m in iface.methods if not callable(getattr(fn, m, None))]
        if missing:
            raise BadImplementation(f"implementation {name!r} of {family}: missing {', '.join(missing)}; "
                                    f"expected {expected}")
        return
    if not callable(fn):
        raise BadImplementation(f"implementation {name!r} of {family} is not callable; expected {expected}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and C extensions: nothing to check before calling
    try:
        sig.bind(*iface.positional, **{k: None for k in iface.keywords})
    except TypeError as exc:
        raise BadImplementation(f"implementation {name!r} of {family} has signature {name}{sig}, which "
                                f"cannot be called as {expected}: {exc}") from None


def describe() -> str:
    return "\n".join(INTERFACES[f].signature() for f in INTERFACES)


if __name__ == "__main__":
    print(describe())
