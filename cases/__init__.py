"""Conformance catalogs: one module per kernel family (its interface, cases as data, inputs,
reference binding, vendor implementations and charts), discovered by the harness from this
registry. The module ``cases/<name>.py`` is itself the test file of its family: pytest collects
its cases from the ``FAMILY`` object it defines (``pytest cases/decode.py``).

Adding a family = a kernel file (kernels/), a reference file (references/), a catalog module
(cases/) and a mutants module (mutants/), plus one line here: nothing else names a family.
Everything that goes over families reads this tuple (attnsuite/registry.py); a family without a
mutants module yet, or without bench cases, is passed over by ``attnsuite.mutate`` and the
benchmarks and profiles with the reason, never an error."""

FAMILIES = (
    "prefill",
    "prefill_varlen",
    "decode",
    "paged_decode",
    "sparse_decode",
    "sparse_paged_decode",
    "magicpig_decode",
    "block_sparse",
    "mustafar",
    "mla_paged_decode",
    "mla_paged_prefill",
    "dsa_sparse_attention",
    "dsa_topk_indexer",
    "probes",
)
