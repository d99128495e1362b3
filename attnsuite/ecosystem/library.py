"""The ``Library`` record: which project an adapter calls, the release it was written against,
and how that project is imported (once per process; a broken install becomes ``Unsupported``
with the import error, never a crash). ``library_info`` is what a record says about it."""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import warnings
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
