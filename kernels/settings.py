"""How the kernel wrappers run: one documented settings object, set explicitly by whoever drives
them (the suite's pytest plugin, a benchmark script, a serving loop), never behind their back.

    import kernels.settings as ks
    ks.configure(kernel_path="portable")      # for this process, from now on
    with ks.using(autotune=True):              # for one block
        decode(q, k, v)

Fields:

* ``kernel_path``: ``auto`` (default): the backend fast paths on CUDA tensors, the portable
  kernels everywhere else (NPU, interpreter, compile-only); ``portable``: the portable kernels on
  every device; ``fast``: the fast paths everywhere, the interpreter included (how CPU CI checks
  them).
* ``autotune``: on CUDA, time the tile candidates of a shape missing from the shipped and cached
  tables, and cache the fastest (``kernels._tune``).
* ``host_compile``: compile-only planning. Wrappers accept host (CPU) tensors and plan exactly
  what they would launch on the device (device tile configs, not the interpreter's); the caller
  captures the launches at Triton's level and compiles them instead of running them.
* ``direct_launch``: on CUDA, a repeated identical call launches the compiled kernel directly
  instead of through Triton's JIT dispatch (``kernels._launcher``); False forces the JIT path.
* ``tune_cache``: the user's tile cache file (``kernels._tune``; None: the default,
  ``~/.cache/attnsuite/tune.json``). The shipped tables (``kernels/tuned``) come first.
* ``persistent_programs``: the launch grid (``kernels._grid``). None (default): on Ascend
  (compile-only included) a persistent grid of about one program per core, each looping over its
  share of the tiles, since an Ascend program is bound to a physical core; the plain grid (one
  program per tile) elsewhere. An int N >= 1: a persistent grid of at most N programs on every
  device (how CPU CI runs the Ascend loop in the interpreter). 0: the plain grid everywhere.

The process starts from ``ATTNSUITE_KERNEL_PATH`` / ``ATTNSUITE_AUTOTUNE`` /
``ATTNSUITE_TUNE_CACHE`` when a user sets them (read once, at import), otherwise from the
defaults above; the kernels read nothing else from the environment at call time but Triton's
own interpreter flag. This module imports nothing heavy: it is safe to import before triton.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Iterator, Optional

KERNEL_PATHS = ("auto", "portable", "fast")
KERNEL_PATH_ENV = "ATTNSUITE_KERNEL_PATH"
AUTOTUNE_ENV = "ATTNSUITE_AUTOTUNE"
TUNE_CACHE_ENV = "ATTNSUITE_TUNE_CACHE"


@dataclasses.dataclass(frozen=True)
class Settings:
    kernel_path: str = "auto"
    autotune: bool = False
    host_compile: bool = False
    direct_launch: bool = True
    tune_cache: Optional[str] = None
    persistent_programs: Optional[int] = None

    def __post_init__(self):
        if self.kernel_path not in KERNEL_PATHS:
            raise ValueError(f"kernel_path must be one of {KERNEL_PATHS}, got {self.kernel_path!r}")
        for name in ("autotune", "host_compile", "direct_launch"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")
        if self.tune_cache is not None and not isinstance(self.tune_cache, str):
            raise TypeError(f"tune_cache must be a str path or None, got {type(self.tune_cache).__name__}")
        n = self.persistent_programs
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
            raise ValueError(f"persistent_programs must be None or an int >= 0, got {n!r}")
        # Part of every lean-path cache key (kernels._callcache): hash the fields once.
        object.__setattr__(self, "_hash", hash(dataclasses.astuple(self)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def from_env(cls, environ=os.environ) -> "Settings":
        return cls(kernel_path=environ.get(KERNEL_PATH_ENV) or "auto",
                   autotune=environ.get(AUTOTUNE_ENV) == "1",
                   tune_cache=environ.get(TUNE_CACHE_ENV) or None)


_current = Settings.from_env()


def current() -> Settings:
    return _current


def configure(**changes) -> Settings:
    """Replace fields of the process-wide settings (``None`` leaves a field as it is)."""
    global _current
    _current = dataclasses.replace(_current, **{k: v for k, v in changes.items() if v is not None})
    return _current


@contextlib.contextmanager
def using(**changes) -> Iterator[Settings]:
    """The settings with ``changes`` for the duration of the block, then the previous ones."""
    global _current
    previous = _current
    configure(**changes)
    try:
        yield _current
    finally:
        _current = previous
