"""What every adapter is built from: the ``adapter`` and ``staged`` markers (an adapter carries
its ``Library``; a staged one keeps its preparation apart from the timed library call), ``note``
for what it did to the case on the way (collected by the runner through ``collecting``), and the
scale and LSE-base conventions of kernels.md."""
from __future__ import annotations

import contextlib
import functools
import math
from typing import Callable, Iterator

from .library import Library


def adapter(library: Library):
    """Mark a function as an adapter of ``library``."""
    def mark(fn):
        fn.library = library
        return fn
    return mark


def staged(library: Library, prepare: Callable) -> Callable:
    """An adapter made of two steps: ``prepare(*args, **kw)`` does everything that is not the
    library's kernel (checks, copies, page tables, workspaces) and returns ``launch``, a
    zero-argument call of the library that returns ``(o, lse)``. Calling the adapter does both;
    a timer calls ``adapter.prepare(...)`` once and times ``launch()`` alone, so a copy the
    adapter had to make is outside the timing."""
    @functools.wraps(prepare)
    def run(*args, **kwargs):
        return prepare(*args, **kwargs)()
    run.prepare = prepare
    return adapter(library)(run)


_notes: list[str] | None = None


def note(text: str) -> None:
    """Record what the adapter did to the case (``"k, v: transposed to [B, S, H, D] (copy)"``)."""
    if _notes is not None and text not in _notes:
        _notes.append(text)


@contextlib.contextmanager
def collecting() -> Iterator[list[str]]:
    """Collect the ``note``s made inside (the runner wraps the implementation calls in it)."""
    global _notes
    saved, _notes = _notes, []
    try:
        yield _notes
    finally:
        _notes = saved


def default_scale(scale, head_dim: int) -> float:
    """The softmax scale a call means: ``None`` is ``1/sqrt(D)`` (kernels.md)."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


#: ln(2): a base-2 LSE times this is the natural-log LSE the suite compares.
LN2 = math.log(2.0)
