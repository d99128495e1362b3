"""FlashInfer-Trace interop: FlashInfer-Bench's Definition and Workload files in as cases of our
families (``--workloads DIR``), our conformance results out as FlashInfer-Trace traces
(``--trace-out DIR``).

Schema followed: flashinfer-ai/flashinfer-bench at commit
40e6ca7844b514eb4b1c7edba6d6a7377df57870 (2026-04-30): the pydantic models in
``flashinfer_bench/data/{definition,workload,trace,trace_set}.py`` and the pages
``docs/flashinfer-trace/{definition,workload,trace}.mdx`` and ``docs/op-types/gqa-{paged,ragged}.mdx``.
``schema.py`` transcribes the fields and status names used here (no network, no pydantic needed).

Modules: ``schema`` (field lists, status names, a validator of the fields we read and write),
``safetensors_index`` (reads a tensor a workload stores, through the ``safetensors`` package: the ``trace`` extra),
``workloads`` (Definition + Workload files -> cases), ``traces`` (records -> trace files).
"""
