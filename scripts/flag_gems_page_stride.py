"""Is FlagGems 5.0.2's paged failure the library's or the adapter's?

For a few paged_decode cases, calls the suite's FlagGems adapter twice on the same inputs: as
shipped (K and V passed as strided views of the suite's cache, whose page stride covers both the
K and the V half of a page), and with those views copied to contiguous
``[pages, page_size, Hkv, D]`` tensors first. Prints each output's max abs error against the
float64 reference. The adapter's mapping is right, and the library ignores the page stride, when
the copied call matches and the strided one does not. Needs a GPU and FlagGems:

    python scripts/flag_gems_page_stride.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attnsuite import registry  # noqa: E402
from attnsuite.devices import CudaDevice  # noqa: E402
from attnsuite.ecosystem import flag_gems as adapter  # noqa: E402

LABELS = ("fp16-HND-P16-shuffled-L100_37-Hq4-Hkv2-D64-lse-vals_zeros",
          "fp16-NHD-P64-shuffled-L130-Hq7-Hkv1-D64-lse")


def run(family, case, inputs, copied: bool):
    shipped = adapter.paged_kv
    if copied:
        adapter.paged_kv = lambda cache, layout: tuple(t.contiguous() for t in shipped(cache, layout))
    try:
        outputs = {n: torch.full(shape, float("nan"), dtype=dt, device="cuda")
                   for n, (shape, dt) in family.output_specs(case, inputs).items()}
        produced = family.call(family.impls["flag_gems"], case, inputs, outputs)
        torch.cuda.synchronize()
        return produced
    finally:
        adapter.paged_kv = shipped


def main():
    family = registry.family("paged_decode")
    device = CudaDevice(0)
    for label in LABELS:
        case = next(c for c in family.cases if c.label == label)
        inputs = {k: device.place(v) for k, v in family.make_inputs(case, case.generator()).items()}
        ref = family.reference(case, inputs, torch.float64)
        for copied in (False, True):
            got = run(family, case, inputs, copied)
            errs = {n: float((got[n].double() - ref[n].double()).abs().nan_to_num(float("inf")).max()) for n in ref}
            print(f"{label} {'contiguous copies' if copied else 'strided views (as shipped)'}: "
                  + ", ".join(f"{n} max abs err {e:.3e}" for n, e in errs.items()), flush=True)


if __name__ == "__main__":
    main()
