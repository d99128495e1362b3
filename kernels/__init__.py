"""Triton attention kernels under test; each module exposes a wrapper and its ``*_plan`` function.

Kernels list their per-call sizes, counts and LSE/index strides in ``do_not_specialize``: Triton
would otherwise compile a new variant whenever one of them is 1 or a multiple of 16, and on a GPU
run of the full profile those compiles took longer than the cases themselves (sm_90 variants of
the prefill kernel over the full profile: 151 -> 26). The strides of the streamed K/V/Q tiles stay
specialized, since their divisibility is what lets loads vectorize.
"""
