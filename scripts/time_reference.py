"""Wall time of a family's reference on its bench cases, on this machine's CPU.

    python scripts/time_reference.py sparse_paged_decode [--dtype fp16] [--repeat 3]

Builds each bench case's inputs exactly as the suite does, then times the float64 reference
(the truth) and the same math in the input dtype (the tolerance baseline).
"""
from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("family")
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    family = importlib.import_module(f"cases.{args.family}").FAMILY
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for case in (c for c in family.cases if "bench" in c.tags and c["dtype"] == args.dtype):
        inputs = family.make_inputs(case, case.generator())
        for dtype in (torch.float64, case.dtype):
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                family.reference(case, inputs, dtype)
                times.append(time.perf_counter() - t0)
            print(f"{case.id}  {str(dtype):>14}: min {min(times):.3f} s, median {statistics.median(times):.3f} s")


if __name__ == "__main__":
    main()
