"""Stand-alone: torch's CUDA SDPA backends with a softmax scale <= 0.

Calls ``torch.nn.functional.scaled_dot_product_attention`` on a CUDA GPU with one backend at a
time (FLASH_ATTENTION, CUDNN_ATTENTION, EFFICIENT_ATTENTION), causal and not, at scales -0.125, 0
and 0.125, and prints each output's NaN count and max abs error against a float64 softmax written
out here (a scale of 0 is a uniform average, a negative one favours the smallest scores). Inputs
are drawn here from a fixed seed; no attnsuite code runs. Needs a CUDA GPU:

    python scripts/library_defects/sdpa_cuda_nonpositive_scale.py
"""
import sys

import torch
import torch.nn.functional as F


def reference(q, k, v, causal, scale):
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(q.shape[-2], device=q.device)
        s = s.masked_fill(i[None, :] > i[:, None], float("-inf"))
    return torch.softmax(s, -1) @ v.double()


def main() -> int:
    if not torch.cuda.is_available():
        print("sdpa_cuda_nonpositive_scale: needs a CUDA device")
        return 2
    from torch.nn.attention import SDPBackend, sdpa_kernel
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 2, 65, 64, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    broken = 0
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        for causal in (False, True):
            for scale in (-0.125, 0.0, 0.125):
                try:
                    with sdpa_kernel(backend):
                        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
                except RuntimeError as exc:  # a backend that declines the shape says so
                    print(f"{backend.name} causal={causal} scale {scale:+.3f}: declined ({str(exc).splitlines()[0][:80]})")
                    continue
                nan = int(torch.isnan(o).sum())
                err = (o.double() - reference(q, k, v, causal, scale)).abs().max().item()
                broken += nan > 0 or err > 1e-2
                print(f"{backend.name} causal={causal} scale {scale:+.3f}: {nan} NaN, max abs err {err:.3g}")
    print("reproduced" if broken else "not reproduced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
