"""attnsuite/interpreted.skip_repeated_patching: a @jit helper called inside an interpreted kernel
no longer re-patches ``triton.language`` (the interpreter's per-call scan), with the same result
bits and no patch left behind after the launch."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

from attnsuite import interpreted  # noqa: E402


@triton.jit
def _scaled_exp(x, s):
    return tl.exp(x * s) + tl.sum(x, axis=0)


@triton.jit
def _kernel(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, _scaled_exp(x, 0.5) - _scaled_exp(x * 2, 0.25))


def _run(x):
    out = torch.empty_like(x)
    _kernel[(1,)](x, out, N=x.numel())
    return out


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter only")
def test_helpers_give_the_same_bits_and_leave_nothing_patched(monkeypatch):
    from triton.runtime import interpreter

    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    calls = []
    monkeypatch.setattr(interpreted, "_patch_lang_original", None)
    before = interpreter._patch_lang
    counting = lambda fn: (calls.append(fn.__name__), before(fn))[1]  # noqa: E731
    monkeypatch.setattr(interpreter, "_patch_lang", counting)
    plain = _run(x)
    plain_calls = len(calls)
    calls.clear()
    assert interpreted.skip_repeated_patching()
    skipped = _run(x)
    assert torch.equal(plain.view(torch.int32), skipped.view(torch.int32))
    # Only the kernel's own patch reaches the interpreter; before, every helper call (ours and
    # tl.sum's own @jit helpers) patched again.
    assert plain_calls >= 3 and calls == ["_kernel"]
    assert tl.core.is_builtin(tl.load) and tl.core.is_builtin(tl.math.exp)  # restored after the launch


@pytest.mark.parametrize("preset", [None, "3"])
def test_the_plugin_gives_numpys_blas_one_thread_before_numpy_loads_unless_the_user_chose(preset):
    """OpenBLAS reads OPENBLAS_NUM_THREADS once, when numpy loads (torch loads it): the plugin sets
    it before its own imports, and keeps a value the user set."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if preset:
        env["OPENBLAS_NUM_THREADS"] = preset
    code = ("import os, sys, pytest; loaded = 'numpy' in sys.modules; import attnsuite.plugin; "
            "print(loaded, 'numpy' in sys.modules, os.environ['OPENBLAS_NUM_THREADS'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["False", "True", preset or "1"], out.stderr[-2000:]


def test_the_memoized_dtype_lookup_answers_as_the_interpreter_s_own():
    from triton.runtime import interpreter

    assert interpreted.memoize_np_dtypes() and interpreted.memoize_np_dtypes()  # installs once
    memo = interpreter._get_np_dtype
    original = memo.__wrapped__
    scalars = [tl.int1, tl.int8, tl.uint8, tl.int16, tl.uint16, tl.int32, tl.uint32, tl.int64, tl.uint64,
               tl.float16, tl.bfloat16, tl.float32, tl.float64, tl.float8e5, tl.float8e4nv]
    types = scalars + [tl.pointer_type(t) for t in scalars]
    types += [tl.block_type(t, [4, 8]) for t in types]
    for ty in types * 2:  # the second time from the memo
        assert memo(ty) == original(ty), ty
    assert memo(tl.block_type(tl.float16, [2])) == memo(tl.block_type(tl.float16, [16, 16])) == original(tl.float16)


def test_shared_type_layouts_build_the_objects_the_constructors_build():
    core = tl.core
    assert interpreted.share_type_layouts() and interpreted.share_type_layouts()  # installs once
    original_block, original_tensor = core.block_type.__init__.__wrapped__, core.tensor.__init__.__wrapped__

    def built(cls, init, *args):
        obj = cls.__new__(cls)
        init(obj, *args)
        return obj

    def fields(obj):
        return {k: (repr(v), type(v)) for k, v in vars(obj).items()}

    elements = [tl.float16, tl.bfloat16, tl.float32, tl.int1, tl.int64, tl.pointer_type(tl.float16),
                tl.pointer_type(tl.int8, const=True)]
    shapes = [[16], [2, 4], [1, 64, 32], [tl.constexpr(8), 4], core.tuple([4, 2])]
    for element in elements:
        for shape in shapes * 2:  # the second time from the shared layouts
            block = core.block_type(element, shape)
            assert fields(block) == fields(built(core.block_type, original_block, element, shape))
            assert block.element_ty is element
            for ty in (block, element):
                handle = object()
                t = core.tensor(handle, ty)
                assert fields(t) == fields(built(core.tensor, original_tensor, handle, ty))
                assert t.handle is handle and t.type is ty and t.dtype is ty.scalar
    # Shapes the constructor refuses are still refused with its error, each time, even beside an
    # accepted one they equal as a key.
    core.block_type(tl.float16, [4])
    for shape in ([], [3], [4.0], [np.int64(4)], (4,)):
        with pytest.raises(Exception) as expected:
            built(core.block_type, original_block, tl.float16, shape)
        for _ in range(2):
            with pytest.raises(expected.type):
                core.block_type(tl.float16, shape)


@triton.jit
def _shapes_kernel(x_ptr, y_ptr, out_ptr, M: tl.constexpr, N: tl.constexpr):
    rows = tl.arange(0, M)
    cols = tl.arange(0, N)
    x = tl.load(x_ptr + rows)
    y = tl.load(y_ptr + cols)
    outer = x[:, None] * 2.0 + y[None, :]        # broadcast of different shapes, and of a scalar
    same = outer * outer - outer                 # equal shapes
    scaled = same + tl.sum(same, axis=1)[:, None]
    tl.store(out_ptr + rows[:, None] * N + cols[None, :], scaled)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter only")
def test_equal_shape_broadcasts_are_skipped_with_the_same_bits(monkeypatch):
    from triton.language.semantic import TritonSemantic

    assert interpreted.skip_equal_broadcasts() and interpreted.skip_equal_broadcasts()  # installs once
    skipping = TritonSemantic.broadcast_impl_value
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, generator=gen), torch.randn(32, generator=gen)

    def run():
        out = torch.empty(16, 32)
        _shapes_kernel[(1,)](x, y, out, M=16, N=32)
        return out

    with_skip = run()
    monkeypatch.setattr(TritonSemantic, "broadcast_impl_value", skipping.__wrapped__)
    without = run()
    assert torch.equal(with_skip.view(torch.int32), without.view(torch.int32))
    outer = x[:, None] * 2.0 + y[None, :]
    same = outer * outer - outer
    torch.testing.assert_close(with_skip, same + same.sum(dim=1, keepdim=True))
    # Equal shapes come back as they are (the kernel above covers the others).
    monkeypatch.setattr(TritonSemantic, "broadcast_impl_value", skipping)
    semantic = TritonSemantic(None)
    a = tl.core.tensor(object(), tl.block_type(tl.float32, [4, 8]))
    b = tl.core.tensor(object(), tl.block_type(tl.float32, [4, 8]))
    assert semantic.broadcast_impl_value(a, b) == (a, b)


@triton.jit
def _index_kernel(x_ptr, out_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, (x * 3 + 7) - offs)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="interpreter only")
def test_unasserted_overflow_checks_are_skipped_and_come_back_with_debug(monkeypatch):
    from triton.language.semantic import TritonSemantic
    from triton.runtime import interpreter

    assert interpreted.skip_unasserted_overflow_checks() and interpreted.skip_unasserted_overflow_checks()
    skipping = TritonSemantic.binary_op_sanitize_overflow_impl
    checks = []
    original = skipping.__wrapped__
    counting = lambda self, lhs, rhs, op: (checks.append(op.__name__), original(self, lhs, rhs, op))[1]  # noqa: E731

    def run(x):
        out = torch.empty_like(x)
        _index_kernel[(1,)](x, out, N=x.numel())
        return out

    x = torch.arange(-64, 64, dtype=torch.int32)
    with_skip = run(x)
    monkeypatch.setattr(TritonSemantic, "binary_op_sanitize_overflow_impl", counting)
    without = run(x)
    assert checks, "the kernel's int32 arithmetic goes through the overflow check"
    assert torch.equal(with_skip, without) and torch.equal(with_skip, x * 3 + 7 - torch.arange(128, dtype=torch.int32))
    # A run with debug on gets the check again, and an int32 overflow is reported.
    monkeypatch.setattr(TritonSemantic, "binary_op_sanitize_overflow_impl", skipping)
    monkeypatch.setattr(interpreter.interpreter_builder, "options",
                        interpreter.InterpreterOptions(debug=True))
    assert torch.equal(run(x), with_skip)
    with pytest.raises(Exception, match="overflow"):
        run(torch.full((128,), 2**30, dtype=torch.int32))
