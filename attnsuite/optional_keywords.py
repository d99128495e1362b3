"""An implementation whose signature leaves out some of the family's optional keywords
(``scale``, ``return_lse``, ``out``, ``lse``: attnsuite/interfaces.py), called the way the family
calls every implementation, so the family's ``call`` stays one line for all of them:

- no ``scale``: a case with the default scale (``scale=None``, 1/sqrt(D)) calls it without the
  keyword; a case with any other scale is ``Unsupported``: "takes no scale keyword";
- no ``return_lse`` (or ``fn.attnsuite_lse = False``): it returns ``o`` alone (or a tuple whose
  first item is ``o``); it is judged on ``o``, and a case that asks for the LSE records it as not
  provided (the record's ``not_provided``), which is no failure;
- no ``out`` / ``lse``: the tensor it returns must have the buffer's shape, dtype and device (a
  contract failure otherwise), and is copied into the caller's buffer, which is then judged.

An implementation that takes every keyword is used as it is (``fit`` returns it unchanged).
"""
from __future__ import annotations

import torch

from .interfaces import Unsupported, left_out, returns_lse
from .result import CaseFailure

NO_SCALE = "takes no scale keyword"


def fit(family, fn):
    """``fn`` itself, or a ``FittedCall`` when its signature leaves out optional keywords."""
    iface = getattr(family, "interface", None)
    if iface is None or iface.methods or "return_lse" not in iface.keywords:
        return fn
    missing = left_out(fn, iface)
    lse = returns_lse(fn, iface)
    if not missing and lse:
        return fn
    return FittedCall(fn, frozenset(missing), lse)


class FittedCall:
    def __init__(self, fn, missing: frozenset, lse: bool):
        self.fn, self.missing = fn, missing
        #: False: the runner judges ``o`` only and records the LSE as not provided.
        self.attnsuite_lse = lse
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            if hasattr(fn, name):
                setattr(self, name, getattr(fn, name))

    def __getattr__(self, name):  # .library, .unusable and the like: the implementation's own
        return getattr(self.fn, name)

    def attnsuite_notes(self) -> list[str]:
        """What the harness does on the way to this implementation, for the record."""
        said = []
        if "out" in self.missing:
            said.append("takes no out=: its o is copied into the caller's buffer")
        if self.attnsuite_lse and "lse" in self.missing:
            said.append("takes no lse=: its lse is copied into the caller's buffer")
        return said

    def __call__(self, *args, scale=None, return_lse=False, out=None, lse=None, **kwargs):
        if "scale" in self.missing:
            if scale is not None:
                raise Unsupported(NO_SCALE)
        else:
            kwargs["scale"] = scale
        if "return_lse" not in self.missing:
            kwargs["return_lse"] = bool(return_lse) and self.attnsuite_lse
        if "lse" not in self.missing and "return_lse" not in self.missing:
            kwargs["lse"] = lse if self.attnsuite_lse else None
        if "out" not in self.missing:
            kwargs["out"] = out
        result = self.fn(*args, **kwargs)
        if self.attnsuite_lse:
            o, got_lse = result
        else:
            o, got_lse = (result[0] if isinstance(result, (tuple, list)) else result), None
        if out is not None and "out" in self.missing:
            o = _into(out, o, "o", "out")
        if lse is not None and got_lse is not None and "lse" in self.missing:
            got_lse = _into(lse, got_lse, "lse", "lse")
        return o, got_lse


def _into(buffer: torch.Tensor, got, name: str, keyword: str) -> torch.Tensor:
    """``got`` copied into the caller's ``buffer``, which it must match exactly (a copy would
    otherwise broadcast or convert a wrong result into a right-looking one)."""
    if not isinstance(got, torch.Tensor):
        raise CaseFailure("contract", f"{name}: the implementation (it takes no {keyword}=) returned "
                                      f"{type(got).__name__}, not a tensor")
    if got.shape != buffer.shape or got.dtype != buffer.dtype or got.device != buffer.device:
        raise CaseFailure("contract", f"{name}: the implementation (it takes no {keyword}=) returned "
                                      f"{list(got.shape)} {got.dtype} on {got.device}; expected "
                                      f"{list(buffer.shape)} {buffer.dtype} on {buffer.device}")
    buffer.copy_(got)
    return buffer
