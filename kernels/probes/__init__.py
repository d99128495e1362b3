"""Minimal kernels that reproduce one known compiler or interpreter failure each, beside the
portable rewrite that avoids it. They run as the ``probes`` family (cases/probes.py)."""
