"""Tile candidates of the varlen fast path on the bench sequences (padded and packed), one
process: ``python scripts/varlen_tiles.py``; do_bench medians (us), SDPA cuDNN on the dense
padded shape for the ratio."""
import os
import sys

import torch
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kernels import attn_fast  # noqa: E402
from kernels import prefill_varlen as pv  # noqa: E402
from kernels.prefill_varlen import prefill_packed, prefill_padded  # noqa: E402

L = (1024, 169, 528, 494, 585, 535, 300, 467)
B, Hq, Hkv, S, D = 8, 64, 16, 1024, 64
dev, dt = "cuda", torch.float16
q = torch.randn(B, Hq, S, D, device=dev, dtype=dt)
k = torch.randn(B, Hkv, S, D, device=dev, dtype=dt)
v = torch.randn_like(k)
lengths = torch.tensor(L, dtype=torch.int32, device=dev)
cu = torch.zeros(B + 1, dtype=torch.int32, device=dev)
cu[1:] = torch.cumsum(lengths, 0)
qp = torch.cat([q[b, :, :n].transpose(0, 1) for b, n in enumerate(L)]).contiguous()
kp = torch.cat([k[b, :, :n].transpose(0, 1) for b, n in enumerate(L)]).contiguous()
vp = torch.cat([v[b, :, :n].transpose(0, 1) for b, n in enumerate(L)]).contiguous()
with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
    t_ref = triton.testing.do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True), return_mode="median") * 1e3
print(f"cudnn dense padded {t_ref:.1f} us")
for tiles in [(64, 64, 4, 3, False), (128, 64, 8, 3, False), (128, 64, 4, 3, False), (64, 64, 4, 2, False),
              (64, 32, 4, 3, False), (64, 64, 4, 3, True), (128, 64, 8, 3, True)]:
    attn_fast._TILES_D64_SHORT[0] = tiles
    pv._PADDED.entries.clear()  # the wrappers remember their plans per call signature
    pv._PACKED.entries.clear()
    for name, fn in (("padded", lambda: prefill_padded(q, k, v, lengths, causal=True, check_indices=False)),
                     ("packed", lambda: prefill_packed(qp, kp, vp, cu, causal=True, max_seqlen=1024,
                                                       check_indices=False))):
        fn()
        t = triton.testing.do_bench(fn, return_mode="median") * 1e3
        print(f"{tiles} {name}: {t:.1f} us  {t / t_ref:.3f}x cudnn", flush=True)
