"""Conformance catalogs: one module per kernel family (its interface, cases as data, inputs,
reference binding, vendor implementations and charts), discovered by the harness from this
registry. The module ``cases/<name>.py`` is itself the test file of its family: pytest collects
its cases from the ``FAMILY`` object it defines (``pytest cases/decode.py``).

Adding a family = a kernel file (kernels/), a reference file (references/), a catalog module
(cases/) and a mutants module (mutants/), plus one line here."""

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
    "dsa_sparse_attention",
    "dsa_topk_indexer",
    "probes",
)
