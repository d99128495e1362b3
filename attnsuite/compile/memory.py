"""On-chip memory a kernel uses, from ``bishengir-compile --enable-memory-display``.

With that flag bishengir writes ``memory_info_aiv.json`` (vector core) and / or
``memory_info_aic.json`` (cube core) into its working directory: per record (one per planning
attempt) a ``scope`` ("ub" on the vector core, "cbuf" and "cc" on the cube core) and the buffers it
placed, each with an ``offset`` list (bytes; several offsets for a multi-buffered allocation) and an
``extent`` (bits). A scope's use is the end of its highest buffer. For a kernel whose tiles do not
fit, the figure equals the ``ub overflow, requires N bits`` of bishengir's error message
(``tests/test_compile_core.py`` checks that on the ub_overflow probe).
"""
from __future__ import annotations

import glob
import json
import os


def _scope_bytes(buffers: list) -> int:
    end = 0
    for buf in buffers or []:
        extent_bits = int(buf.get("extent") or 0)
        for offset in buf.get("offset") or [0]:
            end = max(end, int(offset) + -(-extent_bits // 8))
    return end


def read_display(directory: str) -> dict:
    """``{"aiv": {"ub": bytes}, "aic": {"cbuf": bytes, "cc": bytes}}`` from the display files in
    ``directory`` (the largest figure when bishengir planned a scope several times); ``{}`` when
    bishengir wrote none (it stopped before memory planning)."""
    found: dict = {}
    for path in sorted(glob.glob(os.path.join(directory, "memory_info_*.json"))):
        core = os.path.basename(path)[len("memory_info_"):-len(".json")]
        try:
            with open(path) as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            continue
        for record in data.get("Record") or []:
            scope = record.get("scope")
            if not scope:
                continue
            used = _scope_bytes(record.get("memory_info_array"))
            scopes = found.setdefault(core, {})
            scopes[scope] = max(used, scopes.get(scope, 0))
    return found
