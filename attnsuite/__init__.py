"""attnsuite: the harness of the Triton attention conformance suite (pytest plugin, records, report)."""
__version__ = "0.1.0"
