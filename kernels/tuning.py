"""The shipped tile tables (``kernels/tuned/<GPU>.json``): where they live, what a valid one
holds, and how one is written. ``scripts/tune_table.py`` makes them on a GPU; the planners read
them through ``kernels._tune`` before the user's cache.

File format::

    {"device": "NVIDIA H100 80GB HBM3",            # torch.cuda.get_device_name, exactly
     "made_with": {"triton": ..., "torch": ..., "command": ...},
     "kernels": {"decode": {"8192/1024/64/4/torch.float16/0":
                            {"config": {...}, "candidates_ms": [[ms, config], ...]}}}}

A key is the planner's tuning key joined by "/" (see each ``pick`` call). Every config must be
one of its kernel's candidates for that key: a table can only choose among configs the
planners know, never invent one.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch

from ._tune import TABLE_DIR, read_table, retuning, table_path

__all__ = ["TABLE_DIR", "table_path", "read_table", "retuning", "candidates_for", "check_table",
           "write_table"]


def _dtype(text: str) -> torch.dtype:
    dt = getattr(torch, text.replace("torch.", ""), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {text!r}")
    return dt


def _decode(parts):
    from .decode import decode_candidates
    return decode_candidates(int(parts[2]), _dtype(parts[4]))


def _prefill(parts):
    from .prefill import prefill_candidates
    return prefill_candidates(int(parts[2]), _dtype(parts[3]))


def _prefill_fast(parts):
    from .attn_fast import fast_candidates
    return fast_candidates(int(parts[1]), int(parts[2]), _dtype(parts[3]))


def _flat(parts):
    from .paged_decode import flat_candidates
    if parts[7:] not in ([], ["fp8"]):
        raise ValueError(f"paged_decode_flat: key part {parts[7]!r} must be 'fp8'")
    return flat_candidates(int(parts[3]), _dtype(parts[5]), kv_fp8=parts[7:] == ["fp8"])


def _sparse(magicpig):
    def candidates(parts):
        from .sparse_paged_decode import sparse_paged_candidates
        return sparse_paged_candidates(int(parts[2]), _dtype(parts[3]), magicpig)
    return candidates


#: kernel name in a table -> (key lengths, candidates from the key's parts)
KERNELS: dict[str, tuple[tuple[int, ...], Callable]] = {
    "decode": ((6,), _decode),
    "prefill": ((4,), _prefill),
    "prefill_fast": ((4,), _prefill_fast),
    "paged_decode_flat": ((7, 8), _flat),  # 8: an fp8 cache's key, "fp8" last
    "sparse_paged_decode": ((6,), _sparse(False)),
    "magicpig_decode": ((6,), _sparse(True)),
}


def candidates_for(kernel: str, key: str) -> list[dict]:
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r} (known: {', '.join(KERNELS)})")
    sizes, fn = KERNELS[kernel]
    parts = key.split("/")
    if len(parts) not in sizes:
        raise ValueError(f"{kernel}: key {key!r} has {len(parts)} parts, expected "
                         f"{' or '.join(map(str, sizes))}")
    return fn(parts)


def check_table(kernels: dict) -> list[str]:
    """Problems of a table's ``kernels`` section (empty list: valid)."""
    problems = []
    for kernel, entries in kernels.items():
        for key, entry in entries.items():
            try:
                options = candidates_for(kernel, key)
            except ValueError as exc:
                problems.append(f"{kernel}/{key}: {exc}")
                continue
            cfg = entry.get("config") if isinstance(entry, dict) else None
            if cfg not in options:
                problems.append(f"{kernel}/{key}: config {cfg} is not one of the kernel's candidates")
    return problems


def write_table(device_name: str, kernels: dict, made_with: dict, directory: Path = TABLE_DIR) -> Path:
    """Merge ``kernels`` into the device's table file (new keys replace old ones) and write it,
    after checking every entry."""
    path = table_path(device_name, directory)
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = {}
    merged = {k: dict(v) for k, v in (current.get("kernels") or {}).items()}
    for kernel, entries in kernels.items():
        merged.setdefault(kernel, {}).update(entries)
    problems = check_table(merged)
    if problems:
        raise ValueError("refusing to write an invalid table:\n" + "\n".join(problems))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"device": device_name, "made_with": made_with, "kernels": merged},
                               indent=1, sort_keys=True) + "\n")
    return path
