"""The lean call path (kernels._callcache, kernels._launcher): a repeat call with new tensors of
the same shapes gives exactly what a first call gives, skips validation and planning, still
rejects bad input with the same errors; workspace is never shared across streams or with a
graph being captured; the direct launch passes exactly what Triton's JIT would, and falls back
to it. In the interpreter on cpu; the direct launch and graph capture for real on a GPU."""
import importlib
import inspect

import pytest
import torch

import kernels._callcache as cc
import kernels._checks as checks
import kernels._launcher as launcher
import kernels.settings as ks
from attnsuite.bench.run import unchecked

interpreted = pytest.mark.skipif(not checks.is_interpret(), reason="needs TRITON_INTERPRET=1 (the cpu device)")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU machine)")

#: family -> predicate picking quick cases that cover each wrapper (and both varlen layouts,
#: each mustafar kernel).
PICKS = {
    "prefill": lambda c: c["dtype"] == "fp16",
    "prefill_varlen": lambda c: c["dtype"] == "fp16",
    "decode": lambda c: c["dtype"] == "fp16",
    "paged_decode": lambda c: c["dtype"] == "fp16",
    "sparse_decode": lambda c: c["dtype"] == "fp16",
    "sparse_paged_decode": lambda c: c["dtype"] == "fp16",
    "magicpig_decode": lambda c: c["dtype"] == "fp16",
    "block_sparse": lambda c: c["dtype"] == "fp16",
    "mustafar": lambda c: c["op"] != "compress",
    "mla_paged_decode": lambda c: c["dtype"] == "fp16",
    "mla_paged_prefill": lambda c: c["dtype"] == "fp16",
    "dsa_sparse_attention": lambda c: c["dtype"] == "fp16",
    "dsa_topk_indexer": lambda c: True,
}


def _cases():
    out = []
    for name, pick in PICKS.items():
        family = importlib.import_module(f"cases.{name}").FAMILY
        chosen, seen = [], set()
        for case in family.cases:
            if case.profile != "quick" or not pick(case):
                continue
            kind = case.params.get("layout") or case.params.get("op") or ""
            if kind in seen:
                continue
            seen.add(kind)
            chosen.append(pytest.param(family, case, id=case.id))
        out += chosen
    return out


def _same_layout_copy(t, gen):
    """A new tensor with ``t``'s shape, strides and dtype, and (floats) new values."""
    new = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    if t.is_floating_point():
        work = torch.float32 if t.element_size() == 1 else t.dtype  # no fp8 arithmetic on cpu
        new.copy_((t.to(work) + 0.25 * torch.randn(t.shape, generator=gen).to(work)).to(t.dtype))
    else:
        new.copy_(t)
    return new


def _run(family, impl, case, inputs):
    outputs = {n: torch.full(s, float("nan") if d.is_floating_point else -7, dtype=d)
               for n, (s, d) in family.output_specs(case, inputs).items()}
    family.call(impl, case, inputs, outputs)
    return outputs


@interpreted
@pytest.mark.parametrize("path", ["portable", "fast"])
@pytest.mark.parametrize("name", ["decode", "paged_decode"])
def test_split_workspace_and_merge_tickets_are_reused_correctly(name, path, monkeypatch):
    """Several KV splits: scratch partials (portable: merged by a second launch) or zeroed
    tickets the last program resets (fast path: merged in-kernel), kept from call to call."""
    family = importlib.import_module(f"cases.{name}").FAMILY
    wanted = {"decode": "decode[fp16-B2-Hq8-Hkv2-S300-D64-lse]",
              "paged_decode": "paged_decode[fp16-HND-P16-shuffled-L1_16_40-Hq8-Hkv2-D64-lse]"}[name]
    case = next(c for c in family.cases if f"{name}[{c.id}]" == wanted or c.id == wanted)
    split = {"num_splits": 3}
    impl = lambda *a, **kw: unchecked(family.impls["triton"])(*a, **kw, **split)  # noqa: E731
    captured = []
    real_bind = cc._bind
    monkeypatch.setattr(cc, "_bind", lambda *args: captured.append(real_bind(*args)) or captured[-1])
    with ks.using(kernel_path=path):
        test_a_repeat_call_relaunches_the_bound_plan_with_the_new_tensors(family, case, monkeypatch, impl)
    specs = [b.spec for b in captured if b is not None]
    assert specs and all(specs), "the call did not split"
    assert any(zero for spec in specs for _, _, zero in spec) == (path == "fast")


@interpreted
@pytest.mark.parametrize("family,case", _cases())
def test_a_repeat_call_relaunches_the_bound_plan_with_the_new_tensors(family, case, monkeypatch, impl=None):
    gen = torch.Generator().manual_seed(7)
    a = family.make_inputs(case, case.generator())
    b = {k: _same_layout_copy(v, gen) if isinstance(v, torch.Tensor) else v for k, v in a.items()}
    impl = impl or unchecked(family.impls["triton"])
    binds = []
    real_bind = cc._bind
    monkeypatch.setattr(cc, "_bind", lambda *args: binds.append(1) or real_bind(*args))
    _clear_all()
    _run(family, impl, case, a)
    first = len(binds)
    assert first >= 1
    hit = _run(family, impl, case, b)
    assert len(binds) == first, "the second call planned again instead of relaunching"
    _clear_all()
    fresh = _run(family, impl, case, b)
    for name in fresh:
        assert torch.equal(hit[name].nan_to_num(), fresh[name].nan_to_num()), name
        assert not (hit[name].isnan() if hit[name].is_floating_point() else hit[name] == -7).all(), name


def _clear_all():
    for mod in ("prefill", "prefill_varlen", "decode", "paged_decode", "sparse_decode",
                "sparse_paged_decode", "magicpig_decode", "block_sparse", "mustafar", "mla_paged",
                "dsa_sparse_attention", "dsa_topk_indexer"):
        m = importlib.import_module(f"kernels.{mod}")
        for value in vars(m).values():
            if isinstance(value, cc.CallCache):
                value.clear()


def _decode_inputs(S=40):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 1, 16, generator=g).half()
    k = torch.randn(1, 2, S, 16, generator=g).half()
    return q, k, torch.randn(1, 2, S, 16, generator=g).half()


@interpreted
def test_bad_input_after_a_good_call_of_the_same_shapes_still_raises():
    from kernels.decode import decode

    q, k, v = _decode_inputs()
    out, lse = torch.empty_like(q), torch.empty(1, 4, 1)
    decode(q, k, v, out=out, lse=lse, return_lse=True)
    decode(q, k, v, out=out, lse=lse, return_lse=True)  # a hit
    with pytest.raises(ValueError, match="decode: out must not share memory with q"):
        decode(q, k, v, out=q, lse=lse, return_lse=True)
    with pytest.raises(ValueError, match="decode: lse must not share memory with out"):
        decode(q, k, v, out=out, lse=out.view(torch.float32).view(-1)[:4].view(1, 4, 1), return_lse=True)
    with pytest.raises(TypeError, match="decode: return_lse must be a bool"):
        decode(q, k, v, out=out, lse=lse, return_lse=1)
    with pytest.raises(ValueError, match="decode: scale must be finite"):
        decode(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="decode: scale must be a real number"):
        decode(q, k, v, scale=[1.0])


@interpreted
def test_data_checks_run_on_every_checked_call():
    from kernels.sparse_decode import sparse_decode

    q, k, v = _decode_inputs()
    ind = torch.zeros(1, 4, 3, dtype=torch.int32)
    nnz = torch.full((1, 4), 3, dtype=torch.int32)
    sparse_decode(q, k, v, ind, nnz)
    sparse_decode(q, k, v, ind, nnz)
    with pytest.raises(ValueError, match="sparse_decode: sparse_ind entries"):
        sparse_decode(q, k, v, torch.full((1, 4, 3), 99, dtype=torch.int32), nnz)
    sparse_decode(q, k, v, torch.full((1, 4, 3), 99, dtype=torch.int32), torch.zeros_like(nnz))


@interpreted
def test_a_replaced_launch_sees_repeat_calls_too(monkeypatch):
    from kernels.prefill import prefill

    q, k, v = (torch.randn(1, 2, 16, 16).half() for _ in range(3))
    prefill(q, k, v, causal=True)
    seen = []
    monkeypatch.setattr(checks, "launch", lambda plan: seen.append(plan))
    prefill(q, k, v, causal=True)
    assert len(seen) == 1 and seen[0].kernel.fn.__name__ == "_prefill_fwd"
    assert seen[0].args[0] is q


def test_the_key_tells_apart_what_validation_looks_at():
    cache = cc.CallCache("t")
    t = torch.zeros(4, 8, dtype=torch.float16)
    key = cache.key((t,), (None,), (True,))
    assert key == cache.key((torch.zeros(4, 8, dtype=torch.float16),), (None,), (True,))
    assert key != cache.key((t,), (None,), (1,))                       # True vs 1
    assert key != cache.key((t.t().contiguous().t(),), (None,), (True,))  # strides
    assert key != cache.key((t.view(-1)[1:].view(-1)[:31],), (None,), (True,))
    assert key != cache.key((t.to(torch.bfloat16),), (None,), (True,))
    assert key != cache.key((t.view(-1)[1:9].view(8),), (None,), (True,))
    misaligned = torch.zeros(40, dtype=torch.float16)[1:33].view(4, 8)
    assert cache.key((misaligned,), (None,), (True,)) != key           # 16-byte alignment
    assert cache.key(([1.0],), (), ()) is None                          # not a tensor: full path
    with ks.using(kernel_path="fast"):
        assert cache.key((t,), (None,), (True,)) != key                 # settings
    with checks.capture_launches():
        assert cache.key((t,), (None,), (True,)) is None                # compile-only: bypassed
    with ks.using(host_compile=True):
        assert cache.key((t,), (None,), (True,)) is None
    assert cache.lookup(cache.key((t,), (), ([1],))) is None            # unhashable scalar


def test_workspace_is_per_stream_and_fresh_while_capturing(monkeypatch):
    stream, capturing = [1], [False]
    monkeypatch.setattr(cc, "_stream_of", lambda device: stream[0])
    monkeypatch.setattr(cc, "_capturing", lambda device: capturing[0])
    bound = cc.Bound([], ((((2, 3)), torch.float32, False), ((4,), torch.int32, True)))
    first = (torch.empty(2, 3), torch.zeros(4, dtype=torch.int32))
    bound.adopt(torch.device("cpu"), first)
    dev = torch.device("cpu")
    assert bound._workspace(dev) is first
    stream[0] = 2
    other = bound._workspace(dev)
    assert other is not first and other[1].eq(0).all() and bound._workspace(dev) is other
    capturing[0] = True
    a, b = bound._workspace(dev), bound._workspace(dev)
    assert a is not b and a is not other and a[0] is not other[0]
    capturing[0] = False
    assert bound._workspace(dev) is other
    capturing[0] = True
    bound2 = cc.Bound([], ((((1,)), torch.float32, False),))
    bound2.adopt(dev, (torch.empty(1),))  # a first call under capture: its scratch is the graph's
    assert bound2.owned == {}


# --- the direct launch -----------------------------------------------------------------------

def _toy(X, Y, n, scale, BLOCK: "tl.constexpr" = 16, FLAG: "tl.constexpr" = False):  # noqa: F821
    pass


class _FakeJit:
    """What the launcher needs of a JITFunction: ``fn``, ``arg_names``, ``[grid]``."""

    def __init__(self, fn):
        self.fn, self.arg_names = fn, list(inspect.signature(fn).parameters)
        self.jit_calls = []

    def __getitem__(self, grid):
        return lambda *args, **kw: self.run(*args, grid=grid, **kw)

    def run(self, *args, grid, **kw):
        self.jit_calls.append((grid, args, kw))
        return _FakeCompiled()


class _FakeCompiled:
    function, packed_metadata = 1234, ("packed",)

    def __init__(self):
        self.calls = []
        self.run = lambda *a: self.calls.append(a)


def test_param_values_are_what_the_jit_binds():
    kernel = _FakeJit(_toy)
    args, meta = ("x", "y", 7, 0.5), {"BLOCK": 64, "num_warps": 4}
    values = launcher.param_values(kernel, args, meta)
    bound = inspect.signature(_toy).bind(*args, BLOCK=64)
    bound.apply_defaults()
    assert values == list(bound.arguments.values()) == ["x", "y", 7, 0.5, 64, False]
    assert launcher.param_values(object(), args, meta) is None


def test_direct_launch_passes_the_jit_s_arguments_and_falls_back(monkeypatch):
    class Driver:
        get_current_device = staticmethod(lambda: 0)
        get_current_stream = staticmethod(lambda dev: 555)

    class Runtime:
        launch_enter_hook = None
        launch_exit_hook = type("HookChain", (), {"calls": []})()

    monkeypatch.setattr(launcher, "_runtime", lambda: (Runtime, Driver))
    monkeypatch.setattr(launcher, "SUPPORTED", True)
    kernel = _FakeJit(_toy)
    args, meta = ("x", "y", 7, 0.5), {"BLOCK": 64, "num_warps": 4}
    compiled = kernel[(3, 2)](*args, **meta)
    step = launcher.launch_of(kernel, (3, 2), args, meta, compiled, live=True)
    values = launcher.param_values(kernel, args, meta)
    step.fire(values)
    assert compiled.calls == [(3, 2, 1, 555, 1234, ("packed",), None, None, None, *values)]
    with ks.using(direct_launch=False):
        step.fire(values)
    assert kernel.jit_calls[-1] == ((3, 2), args, meta) and len(compiled.calls) == 1
    Runtime.launch_enter_hook = type("HookChain", (), {"calls": [print]})()  # a profiler's hook
    step.fire(values)
    assert len(kernel.jit_calls) == 3 and len(compiled.calls) == 1
    Runtime.launch_enter_hook = None
    captured = []
    with monkeypatch.context() as m:  # a launch capture replaces Triton's entry: it must see this
        m.setattr(_FakeJit, "run", lambda self, *a, grid, **kw: captured.append(grid))
        step.fire(values)
    assert captured == [(3, 2)] and len(compiled.calls) == 1
    step.fire(values)
    assert len(compiled.calls) == 2
    # A chain asks for its device and stream once (chain_target) and passes them to each launch.
    assert launcher.chain_target() == (0, 555)
    step.fire(values, (0, 777))
    assert len(compiled.calls) == 3 and compiled.calls[-1][3] == 777
    step.fire(values, None)  # the chain was told the direct path is not allowed now
    step.fire(values, (1, 555))  # nor for this device
    assert len(kernel.jit_calls) == 5 and len(compiled.calls) == 3
    monkeypatch.setattr(Driver, "get_current_device", staticmethod(lambda: 1))  # another device
    step.fire(values)
    assert len(kernel.jit_calls) == 6 and len(compiled.calls) == 3
    assert launcher.launch_of(kernel, (1,), args, meta, compiled, live=False).compiled is None


def test_the_version_guard_covers_the_supported_tritons():
    import triton

    major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    assert launcher.SUPPORTED == ((3, 3) <= (major, minor) <= (3, 9))


# --- on a GPU --------------------------------------------------------------------------------

@CUDA
@pytest.mark.parametrize("num_splits", [1, 4])
def test_direct_and_jit_launches_agree_and_the_call_replays_in_a_graph(num_splits):
    from kernels.decode import decode

    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 8, 1, 64, device="cuda", generator=g).half()
    k = torch.randn(2, 2, 2048, 64, device="cuda", generator=g).half()
    v = torch.randn_like(k)
    with ks.using(direct_launch=False):
        want = decode(q, k, v, return_lse=True, num_splits=num_splits)
    decode(q, k, v, return_lse=True, num_splits=num_splits)
    got = decode(q, k, v, return_lse=True, num_splits=num_splits)  # direct
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    out, lse = torch.empty_like(q), torch.empty(2, 8, 1, device="cuda")
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        decode(q, k, v, return_lse=True, num_splits=num_splits, out=out, lse=lse)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        decode(q, k, v, return_lse=True, num_splits=num_splits, out=out, lse=lse)
    q.copy_(torch.randn_like(q))
    graph.replay()
    with ks.using(direct_launch=False):
        ref = decode(q, k, v, return_lse=True, num_splits=num_splits)
    torch.cuda.synchronize()
    assert torch.equal(out, ref[0]) and torch.equal(lse, ref[1])


@CUDA
@pytest.mark.parametrize("name", list(PICKS))
def test_every_unchecked_bench_call_is_capturable(name):
    from attnsuite.bench.graph_time import backend_for, check_capturable
    from attnsuite.bench.run import prepare
    from attnsuite.devices import open_device

    device = open_device("cuda", None)
    family = importlib.import_module(f"cases.{name}").FAMILY
    case = next(c for c in family.cases if "bench" in c.tags)
    _, _, call = prepare(family, case, device, family.impls["triton"])
    call()
    check_capturable(backend_for(device), call)


def test_every_kernel_plan_binds_completely_for_the_direct_launch():
    """With real JITFunctions (no interpreter; planning for host tensors as compile-only does),
    every launch of every family's bench and quick plans has a value for each kernel parameter,
    so none silently falls back to the JIT path on a GPU."""
    import os
    from tests.conftest import ROOT
    from tests.processes import run_python

    script = (
        "import importlib, torch\n"
        "import kernels.settings as ks\n"
        "from kernels.plans import capture_launches\n"
        "from kernels._launcher import param_values\n"
        "from attnsuite.bench.run import unchecked\n"
        "n = 0\n"
        "for name in ('prefill','prefill_varlen','decode','paged_decode','sparse_decode',\n"
        "             'sparse_paged_decode','magicpig_decode','block_sparse','mustafar',\n"
        "             'mla_paged_decode','mla_paged_prefill','dsa_sparse_attention','dsa_topk_indexer'):\n"
        "    fam = importlib.import_module(f'cases.{name}').FAMILY\n"
        "    picked = [c for c in fam.cases if c.profile == 'quick' and c.params.get('op') != 'compress'][:2]\n"
        "    for case in picked:\n"
        "        inputs = fam.make_inputs(case, case.generator())\n"
        "        outputs = {k: torch.empty(s, dtype=d) for k, (s, d) in fam.output_specs(case, inputs).items()}\n"
        "        for path in ('portable', 'fast'):\n"
        "            with ks.using(kernel_path=path, host_compile=True), capture_launches() as plans:\n"
        "                fam.call(unchecked(fam.impls['triton']), case, inputs, outputs)\n"
        "            for plan in plans:\n"
        "                for p in plan.chain():\n"
        "                    assert type(p.kernel).__name__ == 'JITFunction', type(p.kernel)\n"
        "                    v = param_values(p.kernel, p.args, p.meta)\n"
        "                    assert v is not None and len(v) == len(p.kernel.arg_names), (name, p.kernel)\n"
        "                    n += 1\n"
        "print('bound', n)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(ROOT)
    proc = run_python(["-c", script], cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0 and "bound" in proc.stdout, proc.stdout + proc.stderr
    assert int(proc.stdout.split()[-1]) >= 30


@interpreted
def test_a_launch_capture_sees_repeat_calls_and_the_bench_config_names_the_tile_source():
    from attnsuite.bench.run import _config
    from attnsuite.compile.capture import capture_call

    family = importlib.import_module("cases.decode").FAMILY
    case = next(c for c in family.cases if c.profile == "quick" and c["dtype"] == "fp16")
    inputs = family.make_inputs(case, case.generator())
    impl = unchecked(family.impls["triton"])
    _run(family, impl, case, inputs)
    outputs = {n: torch.empty(s, dtype=d) for n, (s, d) in family.output_specs(case, inputs).items()}
    launches = capture_call(lambda: family.call(impl, case, inputs, outputs))  # a repeat: bound plan
    assert [ln.name.lstrip("_") for ln in launches] == ["decode_fwd"]
    config = _config(impl, case, family, inputs, outputs)
    assert config["decode_fwd"]["tuning"] == "default" and "BLOCK_N" in config["decode_fwd"]


def test_tickets_of_a_captured_call_come_zeroed_from_the_pool_never_twice(monkeypatch):
    """No memset node per captured call: each capture takes its own aligned, zeroed slice of
    the device's pool (reserved by a first call outside capture); spent pool -> torch.zeros."""
    dev = torch.device("cpu")
    monkeypatch.setattr(cc, "_stream_of", lambda device: 1)
    capturing = [False]
    monkeypatch.setattr(cc, "_capturing", lambda device: capturing[0])
    monkeypatch.setattr(cc, "_tickets", {dev: [torch.zeros(12, dtype=torch.int32), 0]})
    monkeypatch.setattr(cc, "CAPTURE_TICKETS", 12)
    bound = cc.Bound([], (((2, 3), torch.float32, False), ((3,), torch.int32, True)))
    bound.adopt(dev, (torch.empty(2, 3), torch.zeros(3, dtype=torch.int32)))
    capturing[0] = True
    pool = cc._tickets[dev][0]
    a, b = bound._workspace(dev), bound._workspace(dev)
    for ws in (a, b):
        assert ws[1].shape == (3,) and ws[1].eq(0).all()
        assert ws[1].untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()
        assert (ws[1].data_ptr() - pool.data_ptr()) % 16 == 0
        assert ws[0].untyped_storage().data_ptr() != pool.untyped_storage().data_ptr()
    assert a[1].data_ptr() != b[1].data_ptr()
    c = bound._workspace(dev)  # 4 + 4 of 12 used; the third fits, a fourth does not
    d = bound._workspace(dev)
    assert c[1].untyped_storage().data_ptr() == pool.untyped_storage().data_ptr()
    assert d[1].untyped_storage().data_ptr() != pool.untyped_storage().data_ptr() and d[1].eq(0).all()
    # float workspace or int32 scratch that needs no zeros never comes from the pool
    bound2 = cc.Bound([], (((3,), torch.int32, False),))
    assert bound2._workspace(dev)[0].untyped_storage().data_ptr() != pool.untyped_storage().data_ptr()


@interpreted
@pytest.mark.parametrize("path", ["portable", "fast"])
def test_the_indexer_keeps_its_histograms_and_logits_scratch_from_call_to_call(path, monkeypatch):
    """The indexer's radix-select histograms (zeroed once, left zero by its last launch) and
    the logits buffer the caller does not get back are the bound plan's workspace: a repeat call
    with new values selects what a fresh call selects."""
    family = importlib.import_module("cases.dsa_topk_indexer").FAMILY
    case = next(c for c in family.cases if c.profile == "quick" and not c["logits"])
    captured = []
    real_bind = cc._bind
    monkeypatch.setattr(cc, "_bind", lambda *args: captured.append(real_bind(*args)) or captured[-1])
    with ks.using(kernel_path=path):
        test_a_repeat_call_relaunches_the_bound_plan_with_the_new_tensors(family, case, monkeypatch)
    specs = [b.spec for b in captured if b is not None]
    assert specs and all(any(zero and dtype == torch.int32 for _, dtype, zero in spec) for spec in specs)
    assert all(any(not zero and dtype == torch.float32 for _, dtype, zero in spec) for spec in specs)
