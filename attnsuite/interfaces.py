"""The calling convention every implementation of a family must accept. Each family declares
its ``Interface`` in its catalog module (``cases/<name>.py``); ``python -m attnsuite.interfaces``
prints them all, with shapes, dtypes, layouts and the softmax scale, and ``check_impl`` runs when
an implementation is registered, so a wrong signature fails before any case.

Conventions shared by all families: tensors arrive on the device, in the layouts of
``docs/contract.md``, possibly as strided views (innermost stride 1); ``out`` (and ``lse``
when ``return_lse``) are preallocated, NaN-filled buffers the implementation must fill and
return (or views of them); ``lse`` is fp32 natural-log. ``scale`` (the softmax scale) is always
passed as a keyword: ``None`` means ``1/sqrt(D)``, and the catalogs pass other scales too.
Raise ``Unsupported("why")`` for a case the implementation does not handle (e.g. no LSE, a view
it cannot take): the case is skipped with that reason.

A kernel written before serving stacks passed their own scale, or one that returns no LSE, is
accepted as it is: its signature may leave out ``scale``, ``return_lse``, ``out`` and ``lse``
(attnsuite/optional_keywords.py says what the harness then does), and one whose signature cannot
say so sets ``fn.attnsuite_lse = False``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass


class Unsupported(Exception):
    """Raised by an implementation for a case it does not support; the case is skipped."""


@dataclass(frozen=True)
class Interface:
    positional: tuple[str, ...]
    keywords: tuple[str, ...]
    returns: str
    #: Methods an implementation object must have instead of being called directly (mustafar).
    methods: tuple[str, ...] = ()
    #: One line per argument: name, shape, dtype, layout ("q  [B, Hq, S, D]  fp16 | bf16").
    arguments: tuple[str, ...] = ()
    notes: str = ""

    def signature(self, family: str) -> str:
        if self.methods:
            return f"{family}: an object with methods {', '.join(self.methods)} -> {self.returns}"
        kw = ", ".join(f"{k}=..." for k in self.keywords)
        return f"{family}({', '.join(self.positional)}, *, {kw}) -> {self.returns}"

    def describe(self, family: str) -> str:
        lines = [self.signature(family)]
        lines += [f"    {a}" for a in self.arguments]
        if self.notes:
            lines.append(f"    {self.notes}")
        return "\n".join(lines)


#: Keywords every attention family takes for its outputs.
OUT_KEYWORDS = ("return_lse", "out", "lse")
#: The softmax scale keyword (docs/contract.md, "Softmax scale") and the output keywords: what every
#: attention family's call passes besides its own arguments.
ATTENTION_KEYWORDS = ("scale", *OUT_KEYWORDS)
#: The interface note every family with a softmax shares.
SCALE_NOTE = ("scale: float or None (None: 1/sqrt(D)); the catalogs also pass 1/sqrt(1.5 D) (MLA's "
              "1/sqrt(192) at D = 128), 4/sqrt(D) and 1.0")


#: Keywords an implementation's signature may leave out (attnsuite/optional_keywords.py): a
#: scale-less kernel runs the default-scale cases, an LSE-less one is judged on ``o``, one with no
#: output buffers has its result copied into the caller's.
OPTIONAL_KEYWORDS = ATTENTION_KEYWORDS


class BadImplementation(TypeError):
    pass


def left_out(fn: object, iface: Interface) -> tuple[str, ...]:
    """The optional keywords of ``iface`` that ``fn``'s signature does not take (none when it
    takes ``**kwargs`` or cannot be inspected: it is called with all of them)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return ()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return ()
    takes = {n for n, p in params.items() if p.kind is not inspect.Parameter.POSITIONAL_ONLY}
    return tuple(k for k in iface.keywords if k in OPTIONAL_KEYWORDS and k not in takes)


def returns_lse(fn: object, iface: Interface) -> bool:
    """Whether ``fn`` can return an LSE: it takes ``return_lse`` and does not say otherwise
    (``fn.attnsuite_lse = False``)."""
    return getattr(fn, "attnsuite_lse", True) is not False and "return_lse" not in left_out(fn, iface)


def check_impl(family, name: str, fn: object) -> None:
    """Raise BadImplementation (naming the implementation and the expected call) when ``fn``
    cannot be called the way the harness calls implementations of ``family``."""
    iface = getattr(family, "interface", None)
    if iface is None:
        return
    expected = iface.signature(family.name)
    if iface.methods:
        missing = [m for m in iface.methods if not callable(getattr(fn, m, None))]
        if missing:
            raise BadImplementation(f"implementation {name!r} of {family.name}: missing "
                                    f"{', '.join(missing)}; expected {expected}")
        return
    if not callable(fn):
        raise BadImplementation(f"implementation {name!r} of {family.name} is not callable; "
                                f"expected {expected}")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins and C extensions: nothing to check before calling
    missing = left_out(fn, iface)
    try:
        sig.bind(*iface.positional, **{k: None for k in iface.keywords if k not in missing})
    except TypeError as exc:
        optional = [k for k in iface.keywords if k in OPTIONAL_KEYWORDS]
        hint = f" ({', '.join(optional)} may be left out)" if optional else ""
        raise BadImplementation(f"implementation {name!r} of {family.name} has signature {name}{sig}, "
                                f"which cannot be called as {expected}{hint}: {exc}") from None


def describe(families) -> str:
    """Every family's call, argument shapes and notes (``families``: name -> Family)."""
    head = __doc__.split("\n\n")[1].replace("\n", " ")
    blocks = [head] + [f.interface.describe(name) for name, f in families.items()
                       if getattr(f, "interface", None) is not None]
    return "\n\n".join(blocks)


if __name__ == "__main__":
    from .registry import families as _families

    print(describe(_families()))
