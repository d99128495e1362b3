"""Launch benchmark cases for ``ncu`` (no timing here): each bench case's kernel call exactly as
the benchmark times it (``attnsuite.bench.run.prepare``: the suite's own inputs,
``check_indices=False``), and the family's baselines, once to warm up and once to be profiled
(inside an NVTX range ``profile``, so input building is not profiled).

    ncu --nvtx --nvtx-include profile/ --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats --section InstructionStats --csv --page raw \\
        python scripts/ncu_bench_cases.py [substring ...]

Each launch is preceded by a line ``LAUNCH <family> <case> <callable>`` on stdout, so ncu's
kernels can be matched to cases in order. With substrings, only cases whose ``family[label]``
contains one of them run (``decode[fp16-B1``); without, every registered family's bench cases.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attnsuite import registry  # noqa: E402
from attnsuite.bench.run import prepare  # noqa: E402
from attnsuite.bench.vendor import vendor_baselines  # noqa: E402
from attnsuite.devices import open_device  # noqa: E402


def main(wanted):
    device = open_device("cuda", None)
    for family in registry.families().values():
        for case in family.cases:
            if "bench" not in case.tags or (wanted and not any(w in f"{family.name}[{case.label}]" for w in wanted)):
                continue
            name, impl = family.default_impl()
            inputs, outputs, call = prepare(family, case, device, impl)
            calls = {name: call}
            calls.update({b: entry[0] for b, entry in family.extra_baselines(case, inputs, impl).items()})
            vendor = vendor_baselines(device, family.vendor_problem(case, inputs))
            calls.update({b: fn for b, (fn, _) in vendor.items() if fn is not None})
            for what, fn in calls.items():
                fn()
                torch.cuda.synchronize()
                print(f"LAUNCH {family.name} {case.label} {what}", flush=True)
                with torch.cuda.nvtx.range("profile"):  # ncu --nvtx --nvtx-include profile/
                    fn()
                    torch.cuda.synchronize()
            del inputs, outputs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
