"""Launch the decode-side bench cases for ``ncu`` (no timing here): each case's
kernel call exactly as the benchmark times it (``attnsuite.bench.run.prepare``: the suite's own
inputs, ``check_indices=False``), and the family's baselines, once to warm up and once to be
profiled (inside an NVTX range ``profile``, so input building is not profiled).

    ncu --nvtx --nvtx-include profile/ --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section InstructionStats --csv --page raw \\
        python scripts/profile_decode_families.py [substring ...]

Each launch is preceded by a line ``LAUNCH <family> <case> <callable>`` on stdout, so ncu's
kernels can be matched to cases in order. With substrings, only cases whose
``family[label]`` contains one of them run.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attnsuite import registry  # noqa: E402
from attnsuite.bench.run import prepare  # noqa: E402
from attnsuite.bench.vendor import vendor_baselines  # noqa: E402
from attnsuite.devices import CudaDevice  # noqa: E402

CASES = (
    ("decode", "fp16-B1-Hq32-Hkv8-S32000-D128-lse"),
    ("decode", "fp16-B8-Hq64-Hkv16-S1024-D64"),
    ("paged_decode", "fp16-HND-P16-shuffled-L32000-Hq32-Hkv8-D128-vs_decode"),
    ("sparse_decode", "fp16-B1-Hq32-Hkv8-S32000-D128-keep0.02-shuffled"),
    ("sparse_paged_decode", "fp16-HND-P256-scattered-L68927_89366_81975-Hq32-Hkv8-D256-keep0.02-shuffled"),
    ("magicpig_decode", "fp16-HND-P256-scattered-L68927_89366_81975-Hq32-Hkv8-D256-keep0.02-shuffled-K10-L150"),
    ("mustafar", "keys-2bit-s0.7-B1-Hq32-Hkv8-S32768-D128"),
    ("mustafar", "keys-16bit-s0.7-B1-Hq32-Hkv8-S32768-D128"),
    ("mustafar", "values-2bit-s0.7-B1-Hq32-Hkv8-S32768-D128"),
)


def main(wanted):
    device = CudaDevice(0)
    for fam_name, label in CASES:
        if wanted and not any(w in f"{fam_name}[{label}]" for w in wanted):
            continue
        family = registry.family(fam_name)
        case = next(c for c in family.cases if c.label == label)
        name, impl = family.default_impl()
        inputs, outputs, call = prepare(family, case, device, impl)
        calls = {name: call}
        calls.update({b: fn for b, (fn, _) in family.extra_baselines(case, inputs, impl).items()})
        vendor = vendor_baselines(device, family.vendor_problem(case, inputs))
        calls.update({b: fn for b, (fn, _) in vendor.items() if fn is not None})
        for what, fn in calls.items():
            fn()
            torch.cuda.synchronize()
            print(f"LAUNCH {fam_name} {label} {what}", flush=True)
            with torch.cuda.nvtx.range("profile"):  # ncu --nvtx --nvtx-include profile/
                fn()
                torch.cuda.synchronize()
        del inputs, outputs, calls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
