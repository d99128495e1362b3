"""Stand-alone: does torch.compile'd flex_attention compile for short or GQA prefill shapes?

Calls ``torch.nn.attention.flex_attention`` directly (no attnsuite code), compiled as its
documentation asks, over a small grid of shapes, and prints one line per shape: ``ok`` with the
max abs error against an fp32 eager reference, or the exception's type and first line. Inputs
are drawn here from a fixed seed. Needs a CUDA GPU:

    python scripts/library_defects/flex_short_gqa.py
"""
import itertools
import sys

import torch


def reference(q, k, v, causal, scale):
    g = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(g, 1)
    v = v.float().repeat_interleave(g, 1)
    s = (q.float() @ k.transpose(-1, -2)) * scale
    if causal:
        i = torch.arange(q.shape[2], device=q.device)
        s = s.masked_fill(i[None, :] > i[:, None], float("-inf"))
    return torch.softmax(s, -1) @ v


def main() -> int:
    if not torch.cuda.is_available():
        print("flex_short_gqa: needs a CUDA device")
        return 2
    from torch.nn.attention import flex_attention as fa
    torch._dynamo.config.recompile_limit = 512
    flex = torch.compile(fa.flex_attention, dynamic=False)
    gen = torch.Generator(device="cuda").manual_seed(0)
    print("torch", torch.__version__, torch.cuda.get_device_name(0))
    failed = 0
    for (hq, hkv), S, D, causal, lse in itertools.product(((4, 4), (8, 2)), (17, 127, 128, 1000),
                                                         (64,), (False, True), (True,)):
        q = torch.randn(2, hq, S, D, device="cuda", dtype=torch.float16, generator=gen)
        k = torch.randn(2, hkv, S, D, device="cuda", dtype=torch.float16, generator=gen)
        v = torch.randn(2, hkv, S, D, device="cuda", dtype=torch.float16, generator=gen)
        mask = None
        if causal:
            mask = fa.create_block_mask(lambda b, h, qi, ki: ki <= qi, None, None, S, S, device="cuda")
        kw = dict(block_mask=mask, scale=D ** -0.5, enable_gqa=hq != hkv)
        if lse:
            kw["return_aux"] = fa.AuxRequest(lse=True)
        tag = f"Hq{hq} Hkv{hkv} S{S} D{D} causal={causal} lse={lse}"
        try:
            out = flex(q, k, v, **kw)
            o = out[0] if lse else out
            err = (o.float() - reference(q, k, v, causal, D ** -0.5)).abs().max().item()
            print(f"ok    {tag} max_abs_err={err:.2e}")
        except Exception as exc:  # the point of the script: report what the library raises
            failed += 1
            first = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else ""
            print(f"FAIL  {tag} {type(exc).__name__}: {first}")
    print(f"{failed} shapes failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
