"""The npu device backend and the Ascend baselines, without an NPU.

torch_npu cannot be imported here (it needs CANN), so the backend is checked against a fake
``torch.npu`` namespace that records calls, and the baselines' argument builders on CPU tensors.
What the operators do with those arguments is our reading of their documentation: the paged
test emulates that reading on CPU and compares it with the suite's reference.
"""
import math
import sys
import types

import pytest
import torch

from attnsuite.baselines import BaselineUnavailable
from attnsuite.baselines import npu as nb
from attnsuite.devices import DeviceUnavailable, open_device
from attnsuite.devices.cpu import CpuDevice
from attnsuite.devices.cuda import CudaDevice
from attnsuite.devices.npu import NpuDevice
from references.attention import attention
from references.paged import paged_decode_reference


class FakeNpu:
    """Stands in for ``torch.npu``: records every call as (name, args)."""

    def __init__(self, count=4, available=True):
        self.calls = []
        self.count, self.available = count, available

    def _record(name, result=None):
        def method(self, *args):
            self.calls.append((name, args))
            return result
        return method

    is_available = lambda self: self.available  # noqa: E731
    device_count = lambda self: self.count  # noqa: E731
    set_device = _record("set_device")
    synchronize = _record("synchronize")
    memory_allocated = _record("memory_allocated", 100)
    max_memory_allocated = _record("max_memory_allocated", 200)
    reset_peak_memory_stats = _record("reset_peak_memory_stats")
    empty_cache = _record("empty_cache")
    get_device_name = _record("get_device_name", "Ascend910B2")


@pytest.fixture
def fake_npu(monkeypatch):
    """A fake torch.npu plus an importable (empty) torch_npu module."""
    npu = FakeNpu()
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    fake_module = types.ModuleType("torch_npu")
    fake_module.__version__ = "2.8.0"
    monkeypatch.setitem(sys.modules, "torch_npu", fake_module)
    return npu


# -- device backend -----------------------------------------------------------------------------
@pytest.mark.parametrize("worker,visible,index", [(None, 4, 0), ("gw1", 4, 1), ("gw6", 4, 2), ("gw3", 1, 0)])
def test_worker_n_is_pinned_to_npu_n_mod_visible(fake_npu, worker, visible, index):
    fake_npu.count = visible
    device = open_device("npu", worker)
    assert device.index == index and device.label() == f"npu:{index}"
    assert fake_npu.calls == [("set_device", (index,))]


@pytest.mark.parametrize("env,shown", [(None, "ASCEND_RT_VISIBLE_DEVICES unset"),
                                       ("5,6", "ASCEND_RT_VISIBLE_DEVICES '5,6'")])
def test_no_visible_npu_names_the_visibility_variable(fake_npu, monkeypatch, env, shown):
    fake_npu.available = False
    if env is None:
        monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", env)
    with pytest.raises(DeviceUnavailable, match="sees no NPU") as info:
        NpuDevice.check_available()
    assert shown in str(info.value)


def test_missing_torch_npu_is_reported_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # import fails even where it is installed
    with pytest.raises(DeviceUnavailable, match=r"^--device npu: torch_npu is not importable .*CANN"):
        NpuDevice.check_available()


def test_backend_methods_call_torch_npu_with_its_own_index(fake_npu):
    device = NpuDevice(2)
    device.synchronize()
    assert device.memory_stats() == {"allocated_bytes": 100, "peak_allocated_bytes": 200}
    device.reset_peak_memory()
    device.empty_cache()
    assert device.name() == "Ascend910B2"
    assert fake_npu.calls == [
        ("synchronize", (2,)), ("memory_allocated", (2,)), ("max_memory_allocated", (2,)),
        ("reset_peak_memory_stats", (2,)), ("empty_cache", ()), ("get_device_name", (2,)),
    ]


def test_placement_targets_npu_with_the_device_index(fake_npu, monkeypatch):
    moved = []

    class Tensor:
        def to(self, where):
            moved.append(where)
            return self

    monkeypatch.setattr(torch, "device", lambda kind, index: f"{kind}:{index}")
    NpuDevice(3).place(Tensor())
    assert moved == ["npu:3"]


def test_driver_names_torch_npu_and_cann(fake_npu):
    torch_npu = sys.modules["torch_npu"]
    assert NpuDevice(0).driver() == "torch_npu 2.8.0, CANN unknown"  # no get_cann_version: older release
    torch_npu.npu = types.SimpleNamespace(utils=types.SimpleNamespace(get_cann_version=lambda: "8.5.0"))
    assert NpuDevice(0).driver() == "torch_npu 2.8.0, CANN 8.5.0"


# -- event timing -------------------------------------------------------------------------------
class FakeClock:
    """A device clock that only ``fn`` advances, with events that read it when recorded."""

    def __init__(self, durations):
        self.now, self.durations, self.log = 0.0, list(durations), []
        clock = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing, "timing events must be created with enable_timing=True"
                self.stamp = None

            def record(self):
                self.stamp = clock.now

            def elapsed_time(self, end):
                clock.log.append("elapsed")
                return end.stamp - self.stamp

        self.Event = Event

    def fn(self):
        self.log.append("call")
        self.now += self.durations.pop(0)


def test_time_events_returns_device_ms_per_call_after_warmup(fake_npu, monkeypatch):
    clock = FakeClock([50.0, 1.5, 2.0, 2.5])  # the first call compiles: warmup, not timed
    fake_npu.Event = clock.Event
    monkeypatch.setattr(NpuDevice, "synchronize", lambda self: clock.log.append("sync"))
    times = NpuDevice(0).time_events(clock.fn, warmup=1, repeat=3)
    assert times == [1.5, 2.0, 2.5]
    # One synchronize before timing, one after the last call; events are read only after it.
    assert clock.log == ["call", "sync", "call", "call", "call", "sync", "elapsed", "elapsed", "elapsed"]


def test_cuda_and_npu_time_with_their_own_namespace(fake_npu):
    assert NpuDevice(0)._torch_module() is fake_npu
    assert CudaDevice(0)._torch_module() is torch.cuda
    assert CpuDevice()._torch_module() is None


def test_cpu_time_events_is_wall_clock(monkeypatch):
    calls = []
    times = CpuDevice().time_events(lambda: calls.append(1), warmup=2, repeat=3)
    assert len(calls) == 5 and len(times) == 3 and all(t >= 0.0 for t in times)
    with pytest.raises(ValueError, match="repeat >= 1"):
        CpuDevice().time_events(lambda: None, repeat=0)


# -- npu_fusion_attention arguments -------------------------------------------------------------
def _bnsd(B=2, Hq=8, Hkv=2, S=17, D=64, dtype=torch.float16, Sq=None):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, Hq, S if Sq is None else Sq, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    v = torch.randn(B, Hkv, S, D, generator=g).to(dtype)
    return q, k, v


def test_causal_mask_is_the_compressed_2048_upper_triangle():
    mask = nb.causal_mask()
    assert mask.shape == (2048, 2048) and mask.dtype == torch.bool
    assert mask[0, 1] and not mask[1, 0] and not mask.diagonal().any()
    assert torch.equal(mask, torch.ones(2048, 2048, dtype=torch.bool).triu(1))


def test_fusion_attention_causal_arguments():
    q, k, v = _bnsd()
    call = nb.fusion_attention_args(q, k, v, causal=True)
    assert call.op == "npu_fusion_attention"
    assert [t.shape for t in call.args] == [q.shape, k.shape, v.shape]  # GQA: k/v keep Hkv heads
    kw = call.kwargs
    assert (kw["head_num"], kw["input_layout"], kw["keep_prob"], kw["sparse_mode"]) == (8, "BNSD", 1.0, 2)
    assert kw["scale"] == pytest.approx(1 / math.sqrt(64))
    assert kw["atten_mask"].shape == (2048, 2048)
    assert call.out_shape == tuple(q.shape) and call.lse_shape is None


def test_left_up_causal_mask_reads_as_the_spec_causal_rule():
    """Mode 2 applies the mask's top-left S x S corner; masking there must equal causal=True."""
    q, k, v = _bnsd(dtype=torch.float64, Hq=4, Hkv=4, S=9)
    corner = nb.causal_mask()[:9, :9]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    o = torch.softmax(scores.masked_fill(corner, float("-inf")), dim=-1) @ v
    torch.testing.assert_close(o, attention(q, k, v, causal=True)[0])


def test_fusion_attention_non_causal_passes_no_mask_and_the_given_scale():
    q, k, v = _bnsd()
    kw = nb.fusion_attention_args(q, k, v, causal=False, scale=0.5).kwargs
    assert kw["sparse_mode"] == 0 and kw["atten_mask"] is None and kw["scale"] == 0.5


def test_fusion_attention_refuses_unsupported_dtype_and_bad_shapes():
    q, k, v = _bnsd(dtype=torch.float64)
    with pytest.raises(BaselineUnavailable, match="dtype"):
        nb.fusion_attention_args(q, k, v, causal=True)
    q, k, v = _bnsd(Hq=6, Hkv=4)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        nb.fusion_attention_args(q, k, v, causal=True)


# -- npu_fused_infer_attention_score arguments --------------------------------------------------
def test_fused_infer_dense_decode_arguments():
    q, k, v = _bnsd(Hq=8, Hkv=2, S=33, Sq=1)
    call = nb.fused_infer_args(q, k, v, lse=True)
    assert call.op == "npu_fused_infer_attention_score"
    assert call.kwargs == {"num_heads": 8, "num_key_value_heads": 2, "input_layout": "BNSD",
                           "scale": pytest.approx(1 / 8), "softmax_lse_flag": True}
    assert call.out_shape == (2, 8, 1, 64) and call.lse_shape == (2, 8, 1)


def test_fused_infer_scale_keyword_follows_the_release():
    q, k, v = _bnsd(Sq=1)
    kw = nb.fused_infer_args(q, k, v, scale=0.25, scale_keyword="scale_value").kwargs
    assert kw["scale_value"] == 0.25 and "scale" not in kw
    assert nb.scale_keyword(["query", "num_heads", "scale_value"]) == "scale_value"
    assert nb.scale_keyword(["query", "num_heads", "scale"]) == "scale"
    assert nb.scale_keyword([]) == "scale"


def test_fused_infer_refuses_what_its_documentation_excludes():
    q, k, v = _bnsd(dtype=torch.float32, Sq=1)
    with pytest.raises(BaselineUnavailable, match="dtype"):
        nb.fused_infer_args(q, k, v)
    q, k, v = _bnsd(Hq=128, Hkv=1, Sq=1)
    with pytest.raises(BaselineUnavailable, match="Hq/Hkv <= 64"):
        nb.fused_infer_args(q, k, v)


# -- paged decode -------------------------------------------------------------------------------
# Three sequences over a shuffled pool of 8 pages; the middle one has no pages.
INDPTR = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
INDICES = torch.tensor([6, 1, 3, 0, 7], dtype=torch.int32)
LAST = torch.tensor([5, 16, 16], dtype=torch.int32)  # the empty sequence's entry is unused


def _paged(layout, page_size=16, Hq=4, Hkv=2, D=32, pages=8, dtype=torch.float16):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(3, Hq, D, generator=g).to(dtype)
    shape = (pages, 2, Hkv, page_size, D) if layout == "HND" else (pages, 2, page_size, Hkv, D)
    return q, torch.randn(*shape, generator=g).to(dtype)


def test_block_table_and_lengths_from_a_csr_table_with_an_empty_sequence():
    table, lengths = nb.block_table_from_csr(INDPTR, INDICES, LAST, 16)
    assert table.dtype == torch.int32
    assert table.tolist() == [[6, 1, 0], [0, 0, 0], [3, 0, 7]]
    assert lengths == [16 + 5, 0, 32 + 16]


def test_block_table_keeps_one_column_when_every_sequence_is_empty():
    table, lengths = nb.block_table_from_csr(torch.tensor([0, 0, 0]), torch.tensor([], dtype=torch.int32),
                                             torch.tensor([1, 1]), 16)
    assert table.shape == (2, 1) and lengths == [0, 0]


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_paged_arguments_use_blocknum_kvn_blocksize_d(layout):
    q, cache = _paged(layout)
    call = nb.paged_fused_infer_args(q, cache, INDPTR, INDICES, LAST, layout=layout, lse=True)
    query, key, value = call.args
    assert query.shape == (3, 4, 1, 32)
    assert key.shape == value.shape == (8, 2, 16, 32) and key.is_contiguous() and value.is_contiguous()
    # page 6, KV head 1, slot 3 of K and V, wherever the suite's layout kept them
    k_src = cache[6, 0, 1, 3] if layout == "HND" else cache[6, 0, 3, 1]
    v_src = cache[6, 1, 1, 3] if layout == "HND" else cache[6, 1, 3, 1]
    assert torch.equal(key[6, 1, 3], k_src) and torch.equal(value[6, 1, 3], v_src)
    kw = call.kwargs
    assert (kw["num_heads"], kw["num_key_value_heads"], kw["input_layout"], kw["block_size"]) == (4, 2, "BNSD", 16)
    assert kw["actual_seq_lengths_kv"] == [21, 0, 48] and kw["block_table"].shape == (3, 3)
    assert call.out_shape == (3, 4, 32) and call.lse_shape == (3, 4)


def _emulate_paged_decode(call):
    """Our reading of the documented paged decode, on CPU: each sequence's first ``length`` tokens,
    taken block by block through its row of the block table."""
    query, key, value = call.args
    kw = call.kwargs
    outs = []
    for b, length in enumerate(kw["actual_seq_lengths_kv"]):
        blocks = kw["block_table"][b, :math.ceil(length / kw["block_size"])].long()
        k = key[blocks].transpose(0, 1).reshape(key.shape[1], -1, key.shape[3])[:, :length]
        v = value[blocks].transpose(0, 1).reshape(key.shape[1], -1, key.shape[3])[:, :length]
        outs.append(attention(query[b:b + 1], k[None], v[None], causal=False, scale=kw["scale"])[0][0, :, 0])
    return outs


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_paged_arguments_mean_the_same_attention_as_the_reference(layout):
    q, cache = _paged(layout)
    call = nb.paged_fused_infer_args(q, cache, INDPTR, INDICES, LAST, layout=layout)
    ref, _ = paged_decode_reference(q, cache, INDPTR, INDICES, LAST, layout=layout)
    emulated = _emulate_paged_decode(call)
    for b in (0, 2):  # the empty sequence's output is the operator's own business (undocumented)
        torch.testing.assert_close(emulated[b], ref[b])


@pytest.mark.parametrize("page_size,q_len,ok", [(1, 1, False), (8, 1, False), (16, 1, True), (64, 1, True),
                                                (256, 1, True), (64, 4, False), (128, 4, True),
                                                (512, 4, True), (640, 4, False)])
def test_page_sizes_the_operator_accepts(page_size, q_len, ok):
    reason = nb.paged_block_size_reason(page_size, q_len=q_len)
    assert (reason is None) == ok
    if not ok:
        assert str(page_size) in reason and ("16" in reason if q_len == 1 else "128" in reason)


def test_paged_decode_with_page_size_one_is_unavailable_not_a_wrong_call():
    q, cache = _paged("HND", page_size=1)
    with pytest.raises(BaselineUnavailable, match="page_size 1: paged decode needs block_size a multiple of 16"):
        nb.paged_fused_infer_args(q, cache, INDPTR, INDICES, torch.tensor([1, 1, 1]))


# -- callers --------------------------------------------------------------------------------------
def test_callers_without_torch_npu_raise_baseline_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    q, k, v = _bnsd(Sq=1)
    with pytest.raises(BaselineUnavailable, match="torch_npu is not importable .*CANN"):
        nb.fusion_attention(q, k, v, causal=True)
    with pytest.raises(BaselineUnavailable, match="torch_npu is not importable"):
        nb.fused_infer_decode(q, k, v)
    qp, cache = _paged("HND")
    with pytest.raises(BaselineUnavailable, match="torch_npu is not importable"):
        nb.fused_infer_paged_decode(qp, cache, INDPTR, INDICES, LAST)


@pytest.fixture
def fake_torch_npu(monkeypatch):
    received = {}

    def fused_infer(query, key, value, **kwargs):
        received.update(args=(query, key, value), kwargs=kwargs)
        B, N, S, D = query.shape
        return torch.zeros(B, N, S, D, dtype=query.dtype), torch.full((B, N, S, 1), 0.5)

    module = types.ModuleType("torch_npu")
    module.__version__ = "2.8.0"
    module.npu_fused_infer_attention_score = fused_infer
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    return received


def test_paged_caller_returns_the_suite_layout(fake_torch_npu):
    q, cache = _paged("NHD")
    o, lse = nb.fused_infer_paged_decode(q, cache, INDPTR, INDICES, LAST, layout="NHD")
    assert o.shape == (3, 4, 32) and lse.shape == (3, 4)
    assert fake_torch_npu["args"][0].shape == (3, 4, 1, 32) and "scale" in fake_torch_npu["kwargs"]


def test_caller_uses_scale_value_where_the_schema_names_it(fake_torch_npu, monkeypatch):
    monkeypatch.setattr(nb, "_fused_infer_argument_names", lambda: ["query", "scale_value"])
    q, k, v = _bnsd(Sq=1)
    o, lse = nb.fused_infer_decode(q, k, v, lse=False)
    assert o.shape == q.shape and lse is None
    assert "scale_value" in fake_torch_npu["kwargs"] and "scale" not in fake_torch_npu["kwargs"]


def test_caller_names_a_missing_operator(fake_torch_npu):
    q, k, v = _bnsd()
    with pytest.raises(BaselineUnavailable, match="torch_npu 2.8.0 has no npu_fusion_attention"):
        nb.fusion_attention(q, k, v, causal=False)
