"""Benchmarks: every registered family's headline cases (tag "bench"), plus the sweeps in the
full profile, timed against the reference and the vendor's attention in the same run
(attnsuite/bench). Run on a device: ``pytest benchmarks --device cuda``; on cpu they skip, with
the reason. The cases come from the family registry (the plugin parametrizes ``bench_case``)."""


def test_bench(bench_case, bench):
    bench.run(bench_case)
