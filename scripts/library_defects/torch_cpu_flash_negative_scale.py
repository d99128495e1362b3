"""Stand-alone: torch's CPU flash attention with ``is_causal=True`` and a negative softmax scale.

Calls ``torch.nn.functional.scaled_dot_product_attention`` on the CPU with the FLASH_ATTENTION
backend only, once with ``is_causal=True`` and once with the same causal mask given as a boolean
``attn_mask``, at scales -0.125, 0 and 0.125, and prints each output's max abs error against a
float64 softmax written out here. Inputs are drawn here from a fixed seed; no attnsuite code
runs. Runs on any machine with torch:

    python scripts/library_defects/torch_cpu_flash_negative_scale.py
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def reference(q, k, v, scale):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    i = torch.arange(q.shape[-2])
    s = s.masked_fill(i[None, :] > i[:, None], float("-inf"))
    return torch.softmax(s, -1) @ v.double()


def main() -> int:
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 65, 64, generator=gen).half() * 8 for _ in range(3))
    mask = torch.ones(65, 65, dtype=torch.bool).tril()
    print("torch", torch.__version__)
    broken = 0
    for scale in (-0.125, 0.0, 0.125):
        for how, kwargs in (("is_causal=True", dict(is_causal=True)), ("boolean mask", dict(attn_mask=mask))):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                o = F.scaled_dot_product_attention(q, k, v, scale=scale, **kwargs)
            nan = int(torch.isnan(o).sum())
            err = (o.double() - reference(q, k, v, scale)).abs().max().item()
            broken += nan > 0
            print(f"scale {scale:+.3f}, {how}: {nan} NaN, max abs err {err:.3g}")
    print("reproduced" if broken else "not reproduced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
