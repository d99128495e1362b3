"""Stand-alone: FlagGems 5.0.2's paged ``flash_attn_varlen_func`` and the cache's page stride.

Builds a small paged KV cache the way FlashInfer and vLLM keep one, ``[pages, 2, page_size, Hkv,
D]`` (K and V halves of a page side by side), passes K and V as the strided views
``cache[:, 0]`` and ``cache[:, 1]``, and compares the output and LSE with an fp32 torch reference;
then the same call with those views copied to contiguous tensors. Inputs are drawn here from a
fixed seed; no attnsuite code runs. Needs a CUDA GPU and FlagGems:

    python scripts/library_defects/flag_gems_paged.py
"""
import sys

import torch


def reference(q, k_pages, v_pages, table, lengths, scale):
    out, lse = torch.zeros_like(q, dtype=torch.float32), torch.full(q.shape[:2], float("-inf"), device=q.device)
    g = q.shape[1] // k_pages.shape[2]
    for b, n in enumerate(lengths):  # a handful of sequences: plain code is clearest here
        if n == 0:
            continue
        k = k_pages[table[b]].flatten(0, 1)[:n].float().repeat_interleave(g, 1)   # [n, Hq, D]
        v = v_pages[table[b]].flatten(0, 1)[:n].float().repeat_interleave(g, 1)
        s = torch.einsum("hd,nhd->hn", q[b].float(), k) * scale
        lse[b] = torch.logsumexp(s, -1)
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(s, -1), v)
    return out, lse


def main() -> int:
    if not torch.cuda.is_available():
        print("flag_gems_paged: needs a CUDA device")
        return 2
    try:
        import flag_gems
        from flag_gems import ops
    except Exception as exc:  # report why the library is unusable and stop
        print(f"flag_gems_paged: FlagGems does not import: {type(exc).__name__}: {exc}")
        return 2
    print("torch", torch.__version__, "FlagGems", getattr(flag_gems, "__version__", "?"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    for B, Hq, Hkv, P, D, lengths in ((1, 7, 1, 64, 64, (130,)), (2, 4, 2, 16, 64, (100, 37))):
        pages_per = [-(-n // P) for n in lengths]
        num_pages = sum(pages_per) + 3
        cache = torch.randn(num_pages, 2, P, Hkv, D, device="cuda", dtype=torch.float16, generator=gen)
        perm = torch.randperm(num_pages, device="cuda", generator=gen)
        table = torch.zeros(B, max(pages_per), dtype=torch.int32, device="cuda")
        start = 0
        for b, n in enumerate(pages_per):
            table[b, :n] = perm[start:start + n]
            start += n
        q = torch.randn(B, Hq, D, device="cuda", dtype=torch.float16, generator=gen)
        scale = D ** -0.5
        ref_o, ref_l = reference(q, cache[:, 0], cache[:, 1], table.long(), lengths, scale)
        seqused = torch.tensor(lengths, dtype=torch.int32, device="cuda")
        cu_q = torch.arange(B + 1, dtype=torch.int32, device="cuda")
        for name, (k, v) in (("strided views", (cache[:, 0], cache[:, 1])),
                             ("contiguous copies", (cache[:, 0].contiguous(), cache[:, 1].contiguous()))):
            o, lse = ops.flash_attn_varlen_func(q, k, v, 1, cu_q, max(lengths), seqused_k=seqused,
                                                softmax_scale=scale, causal=False, block_table=table,
                                                return_softmax_lse=True)
            o_err = (o.float() - ref_o).abs().max().item()
            l_err = (lse.transpose(0, 1).float() - ref_l).abs().max().item()
            print(f"B{B} Hq{Hq} Hkv{Hkv} P{P} D{D} L{lengths}, {name}: max abs err o {o_err:.3g}, lse {l_err:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
