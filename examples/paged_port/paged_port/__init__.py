"""An out-of-tree paged-decode implementation, written the way a first port of a CUDA kernel to
Triton tends to be: one program per (sequence, query head) and the page table read inside the
kernel for every token. It shows how a user plugs their own kernel into attnsuite (see
examples/README.md); it is not one of the suite's kernels."""
