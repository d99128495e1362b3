"""Reads one integer tensor from a ``.safetensors`` file: the page tables and offsets
(``kv_indptr``, ``kv_indices``, ``kv_last_page_len``, ``qo_indptr``) a workload stores there.

The format is small and documented (an 8-byte little-endian header length, a JSON header naming
each tensor's dtype, shape and byte range, then the raw little-endian data), so it is read here
rather than through the ``safetensors`` package, which the suite's environments need not have.
Only the integer dtypes a page table uses are read; anything else is refused with the reason.
"""
from __future__ import annotations

import json
import struct
from pathlib import Path

import torch

INTEGER_DTYPES = {"I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
                  "U8": torch.uint8}
#: A header larger than this is no page-table file (the format caps it at 100 MB).
MAX_HEADER = 100_000_000


class SafetensorsError(ValueError):
    pass


def read_tensor(path: str | Path, key: str) -> torch.Tensor:
    """Tensor ``key`` of the file at ``path`` (CPU, its stored integer dtype)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) != 8:
                raise SafetensorsError(f"{path}: too short for a safetensors header")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER:
                raise SafetensorsError(f"{path}: header length {n} is not plausible")
            header = json.loads(fh.read(n))
            if key not in header:
                names = sorted(k for k in header if k != "__metadata__")
                raise SafetensorsError(f"{path}: no tensor {key!r} (has {names})")
            entry = header[key]
            dtype = INTEGER_DTYPES.get(entry.get("dtype"))
            if dtype is None:
                raise SafetensorsError(f"{path}: tensor {key!r} is {entry.get('dtype')}, not an integer page table")
            begin, end = entry["data_offsets"]
            fh.seek(8 + n + begin)
            data = fh.read(end - begin)
    except OSError as exc:
        raise SafetensorsError(f"{path}: {exc.strerror or exc}") from None
    shape = [int(s) for s in entry["shape"]]
    count = 1
    for s in shape:
        count *= s
    if len(data) != count * torch.empty((), dtype=dtype).element_size():
        raise SafetensorsError(f"{path}: tensor {key!r} holds {len(data)} bytes, not {count} x {entry['dtype']}")
    if count == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape).clone()
