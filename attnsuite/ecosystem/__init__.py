"""Other projects' attention kernels as implementations of our families (issue 27).

An adapter is a plain function with the family's interface (attnsuite/interfaces.py) that maps
layouts, scale and LSE base onto one library call. It carries ``.library`` (a ``Library``), so
the harness can say which library and version a record is about, and reports through ``note``
anything it had to do to the case on the way (a copy, a transpose, a cast): those notes are
recorded with the case, and such work is done outside the timed call where the library allows.
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
from dataclasses import dataclass

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
        """The imported module, or ``Unsupported`` carrying the import error (imported once)."""
        module, error = _import(self.module)
        if module is None:
            raise Unsupported(f"{self.name} ({self.distribution}) is not usable here: {error}")
        return module

    def import_error(self) -> str | None:
        return _import(self.module)[1]


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
