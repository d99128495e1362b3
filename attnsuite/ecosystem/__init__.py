"""Other projects' attention kernels as implementations of our families.

An adapter is a plain function with the family's interface (attnsuite/interfaces.py) that maps
layouts, scale and LSE base onto one library call. It carries ``.library`` (a ``Library``), so
the harness can say which library and version a record is about, and reports through ``note``
anything it had to do to the case on the way (a copy, a transpose, a cast): those notes are
recorded with the case, and such work is done outside the timed call where the library allows.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator

from ..interfaces import Unsupported


@dataclass(frozen=True)
class Library:
    #: The name users know it by ("FlagGems"), its import name and its distribution name.
    name: str
    module: str
    distribution: str
    #: The release the adapters were written against (and, where one ran, tested against).
    written_against: str
    #: Whether an adapter of this library has run on a GPU (the README and records say so).
    gpu_tested: bool = False

    def installed_version(self) -> str | None:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None

    def load(self):
        """The imported module, or ``Unsupported`` carrying the import error (imported once).

        A library that is installed but broken (an import error, a missing CUDA extension, no
        device it knows) is reported once per process, as a ``LibraryUnusable`` warning with the
        error; every case of it is then ``unsupported`` with the same reason, never a crash."""
        module, error = _import(self.module)
        if module is None:
            reason = f"{self.name} ({self.distribution} {self.installed_version() or 'not installed'}) " \
                     f"is not usable here: {error}"
            if self.installed_version() is not None and self.name not in _reported:
                _reported.add(self.name)
                warnings.warn(reason, LibraryUnusable, stacklevel=2)
            raise Unsupported(reason)
        return module

    def attribute(self, dotted: str):
        """``module.a.b`` of the library, or ``Unsupported`` naming what this release lacks."""
        obj = self.load()
        path = self.module
        for part in dotted.split("."):
            path = f"{path}.{part}"
            try:
                obj = getattr(obj, part)
            except AttributeError:
                try:  # a submodule the package does not import itself
                    obj = importlib.import_module(path)
                except Exception as exc:
                    raise Unsupported(f"{self.name} {self.installed_version()} has no {path} (adapter written "
                                      f"against {self.written_against}): {type(exc).__name__}: {exc}") from None
        return obj

    def import_error(self) -> str | None:
        return _import(self.module)[1]


class LibraryUnusable(UserWarning):
    """An installed library that cannot be imported or run here (reported once per process)."""


_reported: set[str] = set()


@functools.lru_cache(maxsize=None)
def _import(name: str):
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # a broken install is a finding about the library, not a crash
        return None, f"{type(exc).__name__}: {exc}"


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


def library_info(impl) -> dict | None:
    """The record's ``library`` field for an implementation: which library and release it calls,
    what its adapter was written against, whether it has run on a GPU, and why it cannot be
    imported here (None when it can). None for an implementation with no ``.library``."""
    library = getattr(impl, "library", None)
    return dict(_info(library)) if isinstance(library, Library) else None


@functools.lru_cache(maxsize=None)
def _info(library: Library) -> dict:
    return {"name": library.name, "module": library.module, "distribution": library.distribution,
            "version": library.installed_version(), "written_against": library.written_against,
            "gpu_tested": library.gpu_tested, "import_error": library.import_error()}


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
    """The softmax scale a call means: ``None`` is ``1/sqrt(D)`` (docs/contract.md)."""
    return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


#: ln(2): a base-2 LSE times this is the natural-log LSE the suite compares.
LN2 = math.log(2.0)


def implementations(family: str) -> dict[str, Callable]:
    """Every ecosystem adapter of ``family``, by registered name (installed or not: one that
    cannot run here says why, case by case)."""
    from . import flag_gems, flashinfer, flex, torch_npu, torch_sdpa, vllm

    found: dict[str, Callable] = {}
    for module in (torch_sdpa, flex, flag_gems, vllm, flashinfer, torch_npu):
        found.update(module.IMPLS.get(family, {}))
    return found


def libraries() -> list[Library]:
    """The libraries the adapters are written against (for the README and the reports)."""
    from . import flag_gems, flashinfer, flex, torch_npu, torch_sdpa, vllm

    return [m.LIBRARY for m in (torch_sdpa, flex, flag_gems, vllm, flashinfer, torch_npu)]
