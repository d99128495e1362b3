"""Other projects' attention kernels as implementations of our families.

An adapter is a plain function with the family's interface (attnsuite/interfaces.py) that maps
layouts, scale and LSE base onto one library call. It carries ``.library`` (a ``Library``), so
the harness can say which library and version a record is about, and reports through ``note``
anything it had to do to the case on the way (a copy, a transpose, a cast): those notes are
recorded with the case, and such work is done outside the timed call where the library allows.

Layers, each importing only the ones above it: ``library`` (the ``Library`` record) ->
``_adapter`` (markers, ``note``, conventions) -> ``_layout`` (layout moves) -> one module per
library (``torch_sdpa``, ``flex``, ``flag_gems``, ``vllm``, ``flashinfer``, ``torch_npu``) ->
``registry`` (every adapter by family). This package re-exports the names the harness uses.
"""
from __future__ import annotations

from ._adapter import LN2, adapter, collecting, default_scale, note, staged
from .library import Library, LibraryUnusable, library_info
from .registry import implementations, libraries

__all__ = ["LN2", "Library", "LibraryUnusable", "adapter", "collecting", "default_scale", "implementations",
           "libraries", "library_info", "note", "staged"]
