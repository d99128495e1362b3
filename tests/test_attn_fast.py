"""The dense core's CUDA fast path (kernels/attn_fast.py): which kernel the switch picks, when
descriptor loads are used, and the numbers of both load paths against a float64 softmax in the
interpreter, on the inputs where the flat loop and the folded scale could go wrong (a partial
last block, a negative or zero scale, a head dim that is not a power of two)."""
import math

import pytest
import torch

import kernels.settings as ks
from kernels import attn_fast
from kernels._checks import capture_launches
from kernels.block_sparse import block_sparse
from kernels.prefill import prefill
from attnsuite.sparsity import block_index


def _names(call, **settings):
    with ks.using(**settings), capture_launches() as plans:
        call()
    return [(getattr(p.kernel, "fn", p.kernel).__name__, p.meta) for plan in plans for p in plan.chain()]


def test_switch_picks_the_fast_kernels_only_on_the_fast_path_and_off_a_persistent_grid():
    q = torch.randn(1, 4, 40, 64, dtype=torch.float16)
    k = torch.randn(1, 2, 40, 64, dtype=torch.float16)
    call = lambda: prefill(q, k, k, causal=True)  # noqa: E731
    assert _names(call, kernel_path="fast")[0][0] == "_prefill_fast"
    assert _names(call, kernel_path="portable")[0][0] == "_prefill_fwd"
    assert _names(call, kernel_path="auto")[0][0] == "_prefill_fwd"  # CPU tensors
    assert _names(call, kernel_path="fast", persistent_programs=3)[0][0] == "_prefill_fwd"
    qb = torch.randn(1, 2, 300, 64, dtype=torch.float16)
    sabi = block_index(3, 2, 0.0, generator=torch.Generator().manual_seed(0), batch_heads=(1, 2))
    callb = lambda: block_sparse(qb, qb, qb, sabi, block_shape=(128, 256))  # noqa: E731
    assert _names(callb, kernel_path="fast")[0][0] == "_block_sparse_fast"
    assert _names(callb, kernel_path="portable")[0][0] == "_block_sparse_fwd"


def test_descriptor_loads_only_for_16_byte_aligned_bases_and_strides():
    t = torch.randn(2, 4, 64, 64, dtype=torch.float16)
    assert attn_fast.tma_ok(t)
    assert not attn_fast.tma_ok(torch.randn(2, 4, 64, 36, dtype=torch.float16))  # 72-byte rows
    assert not attn_fast.tma_ok(t.flatten()[1:1 + 2 * 4 * 63 * 64].view(2, 4, 63, 64))  # base + 2 B
    assert not attn_fast.tma_ok(t.transpose(2, 3))  # last stride not 1
    cfg = attn_fast.finish_config(dict(BLOCK_M=64, BLOCK_N=64, BLOCK_D=64, num_warps=4,
                                       num_stages=3, USE_TMA=True), 64, 36,
                                  (torch.randn(1, 1, 8, 36, dtype=torch.float16),), False)
    assert cfg["USE_TMA"] is False and cfg["EVEN_D"] is False


def _softmax_ref(q, k, v, scale, visible):
    G = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(G, 1)
    v = v.double().repeat_interleave(G, 1)
    s = (q.double() @ k.transpose(-1, -2) * scale).masked_fill(~visible, float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


@pytest.mark.parametrize("D", [64, 40, 36])  # descriptors; not a power of two; no descriptors
@pytest.mark.parametrize("scale", [None, -0.3, 0.0])
def test_fast_prefill_matches_float64_softmax_on_both_load_paths(D, scale):
    torch.manual_seed(D)
    B, Hq, Hkv, S = 1, 6, 2, 45
    q = torch.randn(B, Hq, S, D, dtype=torch.float16)
    k = torch.randn(B, Hkv, S, D, dtype=torch.float16)
    v = torch.randn(B, Hkv, S, D, dtype=torch.float16)
    sc = 1 / math.sqrt(D) if scale is None else scale
    for causal in (True, False):
        with ks.using(kernel_path="fast"):
            o, lse = prefill(q, k, v, causal=causal, scale=scale, return_lse=True)
        visible = torch.ones(S, S, dtype=torch.bool)
        if causal:
            visible = visible.tril()
        ro, rl = _softmax_ref(q, k, v, sc, visible)
        assert (o.double() - ro).abs().max() < 4e-3
        assert (lse.double() - rl).abs().max() < 1e-3


def test_fast_block_sparse_flat_loop_with_a_partial_last_block_matches_float64_softmax():
    torch.manual_seed(1)
    B, H, S, D, bq, bkv = 1, 2, 700, 64, 128, 256
    q, k, v = (torch.randn(B, H, S, D, dtype=torch.float16) for _ in range(3))
    n_rows, n_cols = -(-S // bq), -(-S // bkv)
    for s in (0.0, 0.4):
        sabi = block_index(n_rows, n_cols, s, generator=torch.Generator().manual_seed(3),
                           batch_heads=(B, H))
        with ks.using(kernel_path="fast"):
            o, lse = block_sparse(q, k, v, sabi, block_shape=(bq, bkv), return_lse=True)
        keep = torch.zeros(B, H, n_rows, n_cols + 1, dtype=torch.bool)
        keep.scatter_(-1, sabi.long().clamp(max=n_cols), True)
        visible = keep[..., :n_cols].repeat_interleave(bq, 2).repeat_interleave(bkv, 3)[:, :, :S, :S]
        ro, rl = _softmax_ref(q, k, v, 1 / 8, visible)
        assert bool((sabi == n_cols - 1).any())  # the partial block (keys 512..699) is listed
        assert (o.double() - ro).abs().max() < 4e-3
        assert (lse.double() - rl).abs().max() < 1e-3


def test_descriptor_scratch_is_kept_per_device_and_stream_and_fresh_under_graph_capture(monkeypatch):
    """Triton asks for descriptor scratch on every launch: a stream's buffer is handed out again
    (grown when a launch needs more), never another stream's or device's, and a launch being
    captured into a graph gets a buffer of its own each time."""
    capturing, device = [False], [0]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: device[0])
    scratch = attn_fast.DescriptorScratch("cpu")
    a = scratch(384, 1, 7)
    assert a.dtype == torch.int8 and a.numel() >= 384
    assert scratch(384, 1, 7) is a and scratch(100, 1, 7) is a
    other_stream = scratch(384, 1, 8)
    device[0] = 1
    other_device = scratch(384, 1, 7)
    assert len({id(a), id(other_stream), id(other_device)}) == 3
    device[0] = 0
    grown = scratch(4096, 1, 7)
    assert grown is not a and grown.numel() >= 4096 and scratch(384, 1, 7) is grown
    capturing[0] = True
    first, second = scratch(384, 1, 7), scratch(384, 1, 7)
    assert first is not second and all(t is not grown for t in (first, second))
    capturing[0] = False
    assert scratch(384, 1, 7) is grown
