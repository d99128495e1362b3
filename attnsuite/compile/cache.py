"""Compile each specialization once per run: many compile-only cases launch the same kernel with
the same dtypes, constexprs and alignments (only sizes passed as plain integers differ), and an
Ascend compile is never cached by Triton itself (it stops at the missing ``hivmc``).

The key is what Triton would key its own cache on (``ASTSource.hash()``: the kernel's source and
dependencies, signature, constants, attributes) plus the backend options, the target and the
toolchain. The grid is not part of it: the grid checks and the grid hazard are applied to every
launch after the lookup.

Storage: files in a directory shared by the processes of one run (xdist workers), one JSON file
per key, written atomically; a per-key lock makes a second worker wait for the first one's compile
instead of repeating it. The directory is ``ATTNSUITE_COMPILE_CACHE`` when set, else one named by
xdist's run id (``PYTEST_XDIST_TESTRUNUID``) in the temporary directory; a single process without
xdist keeps its cache in memory.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from . import toolchain

CACHE_ENV = "ATTNSUITE_COMPILE_CACHE"
_STALE_S = 24 * 3600
_PREFIX = "attnsuite-compile-"


def specialization_key(link: Any, target: str) -> Optional[str]:
    """A hex digest naming what compiling ``link`` for ``target`` depends on, or None when the
    launch cannot even be bound (that failure is reported by the compile itself, uncached)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    from . import cuda, npu, target_kind
    from .jitfn import as_jit_function, compiling
    from .specialize import specialize

    if target_kind(target) == "npu":
        gpu_target = GPUTarget("npu", npu.parse_target(target), 0)
    else:
        gpu_target = GPUTarget("cuda", cuda.parse_target(target), 32)
    try:
        with compiling():
            jf = as_jit_function(link.kernel)
            spec = specialize(jf, make_backend(gpu_target), tuple(link.args), dict(link.meta))
            src_hash = spec.src.hash()
    except Exception:  # noqa: BLE001 - an unbindable launch is compiled (and fails) uncached
        return None
    options = sorted((k, repr(v)) for k, v in spec.options.items())
    text = json.dumps([src_hash, options, target, toolchain.describe()])
    return hashlib.sha256(text.encode()).hexdigest()


def default_directory() -> Optional[Path]:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        return Path(tempfile.gettempdir()) / f"{_PREFIX}{run}"
    return None


def _sweep_stale(parent: Path) -> None:
    """Remove other runs' cache directories older than a day (they are only useful during a run)."""
    now = time.time()
    for old in parent.glob(f"{_PREFIX}*"):
        with contextlib.suppress(OSError):
            if old.is_dir() and now - old.stat().st_mtime > _STALE_S:
                shutil.rmtree(old, ignore_errors=True)


class CompileCache:
    """``get_or_compile(key, compile)`` -> (value, hit). Values are JSON-able dicts."""

    def __init__(self, directory: Optional[Path] = None):
        self.directory = directory
        self._memory: dict[str, dict] = {}
        if directory is not None and not directory.exists():
            _sweep_stale(directory.parent)
            directory.mkdir(parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        with open(self.directory / f"{key}.lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _read(self, key: str) -> Optional[dict]:
        path = self.directory / f"{key}.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def _write(self, key: str, value: dict) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(value, fh, default=str)
        os.replace(tmp, self.directory / f"{key}.json")

    def get_or_compile(self, key: Optional[str], compile: Callable[[], dict]) -> tuple[dict, bool]:
        if key is None:
            return compile(), False
        if key in self._memory:
            return self._memory[key], True
        if self.directory is None:
            value = self._memory[key] = compile()
            return value, False
        with self._locked(key):
            value = self._read(key)
            hit = value is not None
            if not hit:
                value = compile()
                self._write(key, value)
        self._memory[key] = value
        return value, hit


_shared: dict[Optional[Path], CompileCache] = {}


def for_this_run() -> CompileCache:
    """The cache of the current run (see module doc), one object per process and directory."""
    directory = default_directory()
    if directory not in _shared:
        _shared[directory] = CompileCache(directory)
    return _shared[directory]
