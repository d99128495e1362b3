"""Writes small tensors in the safetensors format (the tests' page-table blobs) by hand, from the
format's documentation (header length u64 LE, JSON header, raw LE data), so the reader (the
``safetensors`` package) is checked against files it did not write itself."""
from __future__ import annotations

import json
import struct
import sys

import torch

CODES = {torch.int32: "I32", torch.int64: "I64", torch.int16: "I16", torch.uint8: "U8", torch.bool: "BOOL",
         torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32", torch.float64: "F64"}


def safetensors_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        assert sys.byteorder == "little", "the raw bytes below are the host's"
        data = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


#: The stored page table of workload dec-st-1 (tests/data/flashinfer_trace): three sequences of
#: 2, 0 and 3 pages of 16; page 3 is shared (full in both), last pages of 9 and 16 tokens.
DEC_ST_1 = {"kv_indptr": torch.tensor([0, 2, 2, 5], dtype=torch.int32),
            "kv_indices": torch.tensor([3, 7, 1, 4, 3], dtype=torch.int32),
            "kv_last_page_len": torch.tensor([9, 0, 16], dtype=torch.int32)}
BLOB = "blob/workloads/gqa_paged/gqa_paged_decode_h4_kv2_d64_ps16/dec-st-1.safetensors"

if __name__ == "__main__":  # regenerate the committed blob: python -m tests.flashinfer_trace_blob
    from pathlib import Path

    path = Path(__file__).parent / "data" / "flashinfer_trace" / BLOB
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(safetensors_bytes(DEC_ST_1))
    print(path)
