"""Stand-alone: FlagGems' ``flash_attention_forward`` with a softmax scale <= 0.

Calls FlagGems directly (torch's ``aten::_flash_attention_forward`` convention: q, k, v
``[B, S, H, D]``), causal and not, at scales -0.125, 0 and 0.125, and prints each output's NaN
count and max abs error against a float64 softmax written out here. Inputs are drawn here from a
fixed seed; no attnsuite code runs. Needs a CUDA GPU and FlagGems:

    python scripts/library_defects/flag_gems_nonpositive_scale.py
"""
import sys

import torch


def reference(q, k, v, causal, scale):
    q, k, v = (t.double().transpose(1, 2) for t in (q, k, v))  # [B, H, S, D]
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(q.shape[-2], device=q.device)
        s = s.masked_fill(i[None, :] > i[:, None], float("-inf"))
    return (torch.softmax(s, -1) @ v).transpose(1, 2)


def main() -> int:
    if not torch.cuda.is_available():
        print("flag_gems_nonpositive_scale: needs a CUDA device")
        return 2
    try:
        import flag_gems
        from flag_gems import ops
    except Exception as exc:  # report why the library is unusable and stop
        print(f"flag_gems_nonpositive_scale: FlagGems does not import: {type(exc).__name__}: {exc}")
        return 2
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(1, 65, 2, 64, device="cuda", dtype=torch.float16, generator=gen) for _ in range(3))
    print("torch", torch.__version__, "FlagGems", getattr(flag_gems, "__version__", "?"))
    broken = 0
    for causal in (False, True):
        for scale in (-0.125, 0.0, 0.125):
            o = ops.flash_attention_forward(q, k, v, None, None, 65, 65, 0.0, causal, False, scale=scale)[0]
            nan = int(torch.isnan(o).sum())
            err = (o.double() - reference(q, k, v, causal, scale)).abs().max().item()
            broken += nan > 0 or err > 1e-2
            print(f"causal={causal} scale {scale:+.3f}: {nan} NaN, max abs err {err:.3g}")
    print("reproduced" if broken else "not reproduced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
