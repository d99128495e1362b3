"""Launch each dense-core kernel (prefill, varlen, block-sparse) once per path, for ``ncu`` (no timing here):

    ncu --kernel-name regex:'prefill|block_sparse|sdpa|fmha|flash|cudnn' \\
        --section SpeedOfLight --section Occupancy --section WarpStateStats \\
        python scripts/profile_dense_core.py

Shapes: the prefill bench (fp16 B8 Hq64 Hkv16 S1024 D64 causal), prefill S16384 D128 causal
bf16, block_sparse S16384 H3 128x512 at s = 0; each by the portable kernel, the CUDA fast path
and SDPA pinned to cuDNN, in that order.
"""
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kernels.settings as ks  # noqa: E402
from kernels.block_sparse import block_sparse  # noqa: E402
from kernels.prefill import prefill  # noqa: E402


def cudnn(q, k, v, causal):
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=q.shape[1] != k.shape[1])


def main():
    dev = "cuda"
    shapes = [("prefill_bench", torch.float16, (8, 64, 16, 1024, 64), True),
              ("prefill_16k", torch.bfloat16, (1, 32, 8, 16384, 128), True),
              ("block_sparse_16k", torch.bfloat16, (1, 3, 3, 16384, 128), False)]
    for name, dt, (B, Hq, Hkv, S, D), causal in shapes:
        q = torch.randn(B, Hq, S, D, device=dev, dtype=dt)
        k = torch.randn(B, Hkv, S, D, device=dev, dtype=dt)
        v = torch.randn_like(k)
        for path in ("portable", "fast"):
            with ks.using(kernel_path=path):
                if name.startswith("block_sparse"):
                    n = S // 512
                    sabi = torch.arange(n, dtype=torch.int32, device=dev).expand(B, Hq, S // 128, n).contiguous()
                    block_sparse(q, k, v, sabi, block_shape=(128, 512), check_indices=False)
                else:
                    prefill(q, k, v, causal=causal)
            torch.cuda.synchronize()
            print(name, path, "launched", flush=True)
        cudnn(q, k, v, causal)
        torch.cuda.synchronize()
        print(name, "cudnn launched", flush=True)


if __name__ == "__main__":
    main()
