"""Reads one tensor of a workload's ``.safetensors`` file (a page table, offsets, or any input a
workload stores), through the ``safetensors`` package: the format FlashInfer-Trace datasets are
written in, read the way the rest of that ecosystem reads them, whatever the dtype.

The package is an optional extra of the suite, ``pip install 'attnsuite[trace]'``: only the
FlashInfer-Trace options (``--workloads``, ``--trace-out``) need it, and they say so, naming the
extra, before any case runs (``require``).
"""
from __future__ import annotations

from pathlib import Path

import torch

#: The optional dependency group (pyproject.toml) that brings the package.
EXTRA = "trace"
INSTALL = f"pip install 'attnsuite[{EXTRA}]'"


class SafetensorsError(ValueError):
    """A file that is not there, not a safetensors file, or lacks the tensor asked for."""


class MissingExtra(ImportError):
    """The ``safetensors`` package is not installed (the message names the extra that brings it)."""


def require(what: str = "reading FlashInfer-Trace workloads"):
    """The package's ``safe_open``, or ``MissingExtra`` saying ``what`` needs it and how to get it."""
    try:
        from safetensors import safe_open
    except ImportError as exc:
        raise MissingExtra(f"{what} needs the safetensors package ({exc}): install the "
                           f"'{EXTRA}' extra, {INSTALL}") from None
    return safe_open


def read_tensor(path: str | Path, key: str) -> torch.Tensor:
    """Tensor ``key`` of the file at ``path``, on the CPU in its stored dtype."""
    safe_open = require()
    path = Path(path)
    if not path.is_file():
        raise SafetensorsError(f"{path}: no such file")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as fh:
            keys = list(fh.keys())
            if key not in keys:
                raise SafetensorsError(f"{path}: no tensor {key!r} (has {sorted(keys)})")
            return fh.get_tensor(key)
    except SafetensorsError:
        raise
    except Exception as exc:  # the package's own errors (a truncated file, a bad header) name no type we can catch
        raise SafetensorsError(f"{path}: not a readable safetensors file: {type(exc).__name__}: {exc}") from None
