"""Triton attention kernels under test; each module exposes a wrapper and its ``*_plan`` function."""
