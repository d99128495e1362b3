"""Whether an implementation ran a Triton kernel in the interpreter (``TRITON_INTERPRET=1``).

Known failures of the interpreter itself (the ledger's ``interp_bf16_dot``: bf16 ``tl.dot``
multiplies raw bit patterns) can only explain the failure of a case in which some Triton kernel
was interpreted: a torch or vendor implementation's bf16 path is judged like any other. The
runner counts the interpreter's launches around the implementation's calls; the ledger entry
says it needs one (``only_after_interpreted_launch``).

Counting wraps ``InterpretedFunction.run``, the entry every ``kernel[grid](...)`` goes through
under the interpreter (``attnsuite/compile/capture.py`` replaces the same method, without
running anything, for compile-only). Outside the interpreter there is nothing to count: the
count is None.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterator, Optional

_counts: list[list[int]] = []      # one counter per active block, innermost last
_original = None


def _interpreted_class():
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # no triton, or one without an interpreter
        return None
    return InterpretedFunction


def _install() -> bool:
    """Wrap ``InterpretedFunction.run`` once per process; False when there is none."""
    global _original
    cls = _interpreted_class()
    if cls is None or "run" not in vars(cls):
        return False
    if _original is None:
        _original = vars(cls)["run"]

        @functools.wraps(_original)
        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                for counter in _counts:
                    counter[0] += 1
            return _original(self, *args, **kwargs)

        cls.run = run
    return True


@contextlib.contextmanager
def counting(active: bool = True) -> Iterator[list[Optional[int]]]:
    """``with counting() as n:`` ... ``n[0]``: how many kernels the interpreter launched inside
    the block (None when ``active`` is False or there is no interpreter to count)."""
    counter: list[Optional[int]] = [None]
    if not active or not _install():
        yield counter
        return
    counter[0] = 0
    _counts.append(counter)
    try:
        yield counter
    finally:
        _counts.remove(counter)
