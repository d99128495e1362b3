"""Digests of one case's inputs and of what the implementation computes from them, for
tests/test_reproducible.py: ``python -m tests.case_digest --threads N [--before ID ...] ID``
runs the ``--before`` cases first in the same process (warm call caches, as inside a run),
then prints one JSON line for ID: sha256 of every input and of every output, bit for bit.
Runs on cpu (the interpreter); the ids are case ids of the quick catalogs."""
from __future__ import annotations

import argparse
import hashlib
import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from attnsuite import registry  # noqa: E402
from attnsuite.buffers import guarded_nan_buffer  # noqa: E402


def find(case_id: str):
    family = registry.family(case_id.split("[", 1)[0])
    case = next(c for c in family.cases if c.id == case_id)
    return family, case


def digest(t) -> str:
    if not isinstance(t, torch.Tensor):
        return repr(t)
    # Bit for bit: the raw bytes of the elements (a view's own elements, contiguous copy).
    return hashlib.sha256(t.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def run(case_id: str) -> dict:
    family, case = find(case_id)
    inputs = family.make_inputs(case, case.generator())
    outputs = {n: guarded_nan_buffer(shape, dt, torch.device("cpu"))[0]
               for n, (shape, dt) in family.output_specs(case, inputs).items()}
    produced = family.call(family.default_impl()[1], case, inputs, outputs)
    return {"inputs": {n: digest(t) for n, t in inputs.items()},
            "outputs": {n: digest(t) for n, t in produced.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("case")
    ap.add_argument("--before", action="append", default=[])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for other in args.before:
        run(other)
    print(json.dumps(run(args.case)))


if __name__ == "__main__":
    main()
