"""Benchmarks: every family's headline cases (tag "bench"), plus the sweeps in the full profile,
timed against the reference and the vendor's attention in the same run (attnsuite/bench).
Run on a device: ``pytest benchmarks --device cuda``; on cpu they skip, with the reason."""
import importlib

NAMES = ("prefill", "prefill_varlen", "decode", "paged_decode", "sparse_decode",
         "sparse_paged_decode", "magicpig_decode", "block_sparse", "mustafar")
FAMILIES = [importlib.import_module(f"cases.{name}").FAMILY for name in NAMES]


def test_bench(bench_case, bench):
    bench.run(bench_case)
