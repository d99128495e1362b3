"""Reading a block-sparse index row (``sabi``) inside a kernel: how many KV blocks it lists.

A row lists its blocks ascending and is right-padded with 65535, so the count is the number of
entries other than the padding value. The CUDA fast kernel (``attn_fast._block_sparse_fast``)
counts its own row with a few vector loads before its block loop, so a call makes no count
tensor: the sum over sabi it replaces cost two small launches and their allocations per call.

The portable kernel keeps the count made by the wrapper (``block_sparse.counts_on_host``):
triton-ascend 3.2.0rc2's adapter rejects a ``for`` loop whose bound is a reduction (here the
count), whatever the loop holds; 3.2.0 compiles it.
"""
import triton
import triton.language as tl


@triton.jit
def listed_blocks(row_ptr, stride_ic, n_cols):
    """Entries of the ``n_cols``-entry row at ``row_ptr`` (entry stride ``stride_ic``) that are
    not the padding value 65535, as an int32 scalar."""
    # 256 entries per load: one load covers every row of the benchmarks (up to S = 32768 at
    # BKV = 128); a longer row takes one more load per 256 entries.
    offs = tl.arange(0, 256)
    listed = tl.zeros([256], dtype=tl.int32)
    for c0 in range(0, n_cols, 256):
        cols = c0 + offs
        entry = tl.load(row_ptr + cols * stride_ic, mask=cols < n_cols, other=65535)
        listed += (entry != 65535).to(tl.int32)
    return tl.sum(listed, axis=0)
