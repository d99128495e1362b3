"""Compile-only core (attnsuite.compile): compile launch plans without launching them.

Runs in whichever environment it finds: the upstream-Triton tests compile for sm_80 / sm_90 (no
GPU needed: ptxas ships in the wheel) and skip under triton-ascend; the Ascend tests compile for
Ascend910B2 (no NPU or CANN needed) and skip under upstream Triton. The IR scanner, grid checks
and message classification are pure Python and run everywhere.

The repository's plugin sets TRITON_INTERPRET=1 for the default cpu device before triton is
imported, so the kernels here are usually InterpretedFunctions: compiling them exercises the
rebuild in ``attnsuite.compile.jitfn`` too.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from attnsuite.compile import CompileOutcome, ToolchainUnavailable, compile_plan, target_kind, toolchain
from attnsuite.compile import cuda as cuda_compile
from attnsuite.compile import npu as npu_compile
from attnsuite.compile.result import trim_message
from attnsuite.compile.scalarize import count_scalar_accesses, summarize

ROOT = Path(__file__).resolve().parents[1]
HAVE = toolchain.installed()
needs_upstream = pytest.mark.skipif(
    HAVE != "upstream", reason=f"CUDA compile needs upstream triton; this environment has {toolchain.describe()}")
needs_ascend = pytest.mark.skipif(
    HAVE != "ascend", reason=f"Ascend compile needs triton-ascend; this environment has {toolchain.describe()}")
needs_bishengir = pytest.mark.skipif(
    HAVE != "ascend" or npu_compile.bishengir_bin_dir() is None,
    reason=(f"Ascend compile needs triton-ascend; this environment has {toolchain.describe()}"
            if HAVE != "ascend" else "Ascend compile past the adapter needs bishengir-compile "
                                     "(pip install ascendnpu-ir)"))

NPU_STAGES = {"frontend", "adapter", "bishengir", "ub_overflow", "grid"}


# -- kernels and plans ----------------------------------------------------------------------

try:  # the kernels need triton; the pure-Python tests below do not
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - no toolchain at all
    triton = None

if triton is not None:
    # Module level on purpose: Triton 3.2 (triton-ascend) resolves ``tl.constexpr`` annotations
    # in the kernel's module globals.
    @triton.jit
    def scale_rows(X, O, n, N: tl.constexpr):
        offs = tl.arange(0, N)
        x = tl.load(X + offs, mask=offs < n, other=0.0)
        tl.store(O + offs, x * 2.0, mask=offs < n)

    @triton.jit
    def broken_kernel(X, O, N: tl.constexpr):
        offs = tl.arange(0, N)
        tl.store(O + offs, tl.not_a_function(tl.load(X + offs)))  # deliberate frontend error

    @triton.jit
    def big_tile(X, O, BM: tl.constexpr, BN: tl.constexpr):
        offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        x = tl.load(X + offs)
        tl.store(O + offs, tl.exp(x) * 2.0 + x)

    @triton.jit
    def gather_transposed(K, IDX, O, stride_t, BN: tl.constexpr, D: tl.constexpr):
        offs_n = tl.arange(0, BN)
        offs_d = tl.arange(0, D)
        tok = tl.load(IDX + offs_n)
        kt = tl.load((K + tok * stride_t)[None, :] + offs_d[:, None])
        tl.store(O + offs_d[:, None] * BN + offs_n[None, :], kt)


def _kernels():
    if triton is None:
        pytest.skip("no triton installed")
    return dict(scale_rows=scale_rows, broken_kernel=broken_kernel, big_tile=big_tile,
                gather_transposed=gather_transposed)


def _plan(kernel, grid, args, meta):
    from kernels._checks import LaunchPlan
    return LaunchPlan(kernel=kernel, grid=grid, args=args, meta=meta)


def _attention_plans():
    torch = pytest.importorskip("torch")
    from kernels.decode import decode_plan
    from kernels.prefill import prefill_plan

    q = torch.randn(1, 2, 16, 16, dtype=torch.float16)
    prefill = prefill_plan(q, q, q, torch.empty_like(q), None, causal=True, scale=0.25, interpret=False)
    qd = torch.randn(2, 4, 1, 64, dtype=torch.float16)
    kd = torch.randn(2, 2, 1100, 64, dtype=torch.float16)
    lse = torch.empty(2, 4, 1, dtype=torch.float32)
    decode = decode_plan(qd, kd, kd, torch.empty_like(qd), lse, scale=0.125, num_splits=3, interpret=False)
    assert decode.then is not None, "decode with 3 splits should chain the merge kernel"
    return {"prefill": prefill, "decode": decode}


# -- pure Python: runs everywhere -------------------------------------------------------------

def test_toolchain_is_read_from_package_metadata():
    assert HAVE in ("upstream", "ascend", None)
    assert toolchain.describe().startswith(("triton ", "triton-ascend ", "no triton"))


def test_targets_are_recognised():
    assert target_kind("sm_80") == "cuda" and target_kind("cuda:90") == "cuda"
    assert target_kind("Ascend910B2") == "npu" and target_kind("npu:Ascend910B3") == "npu"
    assert cuda_compile.parse_target("sm_90a") == 90
    with pytest.raises(ValueError):
        target_kind("gfx942")


def test_asking_for_the_other_toolchain_is_refused():
    other = "Ascend910B2" if HAVE == "upstream" else "sm_80"
    if HAVE is None:
        pytest.skip("no triton installed")
    with pytest.raises(ToolchainUnavailable, match="cannot share an environment"):
        compile_plan(_plan(object(), (1,), (), {}), other)


@pytest.mark.parametrize("grid,ok", [
    ((1,), True), ((65535,), True), ((65536,), False), ((256, 256), False), ((255, 257), True),
    ((16, 16, 255), True), ((16, 16, 256), False), (70000, False),
])
def test_npu_grid_limit(grid, ok):
    msg = npu_compile.check_grid(grid)
    assert (msg is None) == ok
    if not ok:
        assert "65535" in msg and "programs" in msg


def test_cuda_grid_limit():
    assert cuda_compile.check_grid((2**31 - 1, 65535, 65535)) is None
    assert "axis 1" in cuda_compile.check_grid((1, 65536))


@pytest.mark.parametrize("output,verdict,stage", [
    ("[ERROR] Cannot find hivmc under $PATH\n"
     'loc("k.py":9:0): error: External hivmc run fails, returning module before running external compiler\n'
     "[ERROR] Failed to run BiShengIR pipeline", "pass", None),
    ("[NOTE] Ub overflow detected; automatically set enable-code-motion to false and retrying compilation.\n"
     'loc("k.py":8:0): error: ub overflow, requires 8388608 bits while 1572864 bits available!', "fail",
     "ub_overflow"),
    ('loc("k.py":8:0): error: \'hivm.hir.vadd\' op operand #0 must be ...\n[ERROR] Cannot find hivmc under $PATH',
     "fail", "bishengir"),
])
def test_bishengir_output_classification(output, verdict, stage):
    assert npu_compile.classify_bishengir(output) == (verdict, stage)


def test_trim_message_drops_stack_dumps():
    text = "k.py:13:27: error: cannot div 0!\nPLEASE submit a bug report\nStack dump:\n" + "\n".join(
        f" #{i} 0x00000000deadbeef frame{i}" for i in range(40))
    assert trim_message(text) == "k.py:13:27: error: cannot div 0!"


# What triton-ascend 3.2.0 emits (trimmed) for a transposed gather, a page-table lookup and a
# row gather: loops marked ExtractedLoadOrStore around one-element / one-row moves.
IR_MARKED = textwrap.dedent('''\
    #loc = loc("/src/paged.py":10:0)
    module {
      func.func @k(%arg2: memref<?xf16> loc(#loc), %arg3: memref<?xi32> loc(#loc), %arg5: i32 loc(#loc)) {
        %c32 = arith.constant 32 : index loc(#loc1)
        %c16 = arith.constant 16 : index loc(#loc1)
        %c1 = arith.constant 1 : index loc(#loc1)
        %c0 = arith.constant 0 : index loc(#loc1)
        %0 = tensor.empty() : tensor<16xi32> loc(#loc2)
        %1 = scf.for %arg13 = %c0 to %c16 step %c1 iter_args(%arg14 = %0) -> (tensor<16xi32>) {
          %6 = arith.index_cast %arg13 : index to index loc(#loc2)
          %rc0 = memref.reinterpret_cast %arg3 to offset: [%6], sizes: [1], strides: [1] : memref<?xi32> to memref<1xi32, strided<[1], offset: ?>> loc(#loc2)
          %7 = memref.load %rc0[%c0] : memref<1xi32, strided<[1], offset: ?>> loc(#loc2)
          %inserted = tensor.insert %7 into %arg14[%arg13] : tensor<16xi32> loc(#loc2)
          scf.yield {DiscreteMemAccess} %inserted : tensor<16xi32> loc(#loc2)
        } {ExtractedLoadOrStore} loc(#loc2)
        %2 = scf.for %arg12 = %c0 to %c32 step %c1 iter_args(%arg13 = %t) -> (tensor<32x16xf16>) {
          %3 = scf.for %arg14 = %c0 to %c16 step %c1 iter_args(%arg15 = %arg13) -> (tensor<32x16xf16>) {
            %extracted = tensor.extract %1[%arg14] {DiscreteMemAccess} : tensor<16xi32> loc(#loc3)
            %9 = arith.index_cast %extracted : i32 to index loc(#loc3)
            %rc1 = memref.reinterpret_cast %arg2 to offset: [%9], sizes: [1], strides: [1] : memref<?xf16> to memref<1xf16, strided<[1], offset: ?>> loc(#loc3)
            %10 = memref.load %rc1[%c0] : memref<1xf16, strided<[1], offset: ?>> loc(#loc3)
            %ins = tensor.insert %10 into %arg15[%arg12, %arg14] : tensor<32x16xf16> loc(#loc3)
            scf.yield {DiscreteMemAccess} %ins : tensor<32x16xf16> loc(#loc3)
          } {ExtractedLoadOrStore} loc(#loc3)
          scf.yield %3 : tensor<32x16xf16> loc(#loc3)
        } {ExtractedLoadOrStore} loc(#loc3)
        %alloc = memref.alloc() : memref<16x32xf16> loc(#loc4)
        scf.for %arg13 = %c0 to %c16 step %c1 {
          %extracted = tensor.extract %1[%arg13] {DiscreteMemAccess} : tensor<16xi32> loc(#loc4)
          %11 = arith.index_cast %extracted : i32 to index loc(#loc4)
          %rc2 = memref.reinterpret_cast %arg2 to offset: [%11], sizes: [1, 32], strides: [32, 1] : memref<?xf16> to memref<1x32xf16, strided<[32, 1], offset: ?>> loc(#loc4)
          %subview = memref.subview %alloc[%arg13, 0] [1, 32] [1, 1] : memref<16x32xf16> to memref<1x32xf16, strided<[32, 1], offset: ?>> loc(#loc4)
          memref.copy %rc2, %subview : memref<1x32xf16, strided<[32, 1], offset: ?>> to memref<1x32xf16, strided<[32, 1], offset: ?>> loc(#loc4)
        } {ExtractedLoadOrStore, hivm.parallel_loop} loc(#loc4)
        return loc(#loc)
      } loc(#loc)
    } loc(#loc)
    #loc1 = loc("/src/paged.py":11:5)
    #loc2 = loc("/src/paged.py":13:19)
    #loc3 = loc(callsite(#loc5 at #loc6))
    #loc4 = loc("/src/paged.py":15:16)
    #loc5 = loc("/src/helpers.py":4:8)
    #loc6 = loc("/src/paged.py":14:12)
    ''')

# What rc2 emits for a row gather: the same element-wise loads, but no marker attributes and no
# locations; plus a legitimate per-iteration scalar load inside a real loop (must not count).
IR_UNMARKED = textwrap.dedent('''\
    module {
      func.func @k(%arg1: memref<?xf16>, %arg2: memref<?xi32>, %arg5: i32) {
        %c32 = arith.constant 32 : index
        %c16 = arith.constant 16 : index
        %c1 = arith.constant 1 : index
        %c0 = arith.constant 0 : index
        %4 = scf.for %arg11 = %c0 to %c16 step %c1 iter_args(%arg12 = %3) -> (tensor<16x32xf16>) {
          %5 = scf.for %arg13 = %c0 to %c32 step %c1 iter_args(%arg14 = %arg12) -> (tensor<16x32xf16>) {
            %extracted = tensor.extract %broadcasted[%arg11, %arg13] : tensor<16x32xi32>
            %6 = arith.index_cast %extracted : i32 to index
            %rc = memref.reinterpret_cast %arg1 to offset: [%6], sizes: [1], strides: [1] : memref<?xf16> to memref<1xf16, strided<[1], offset: ?>>
            %7 = memref.load %rc[%c0] : memref<1xf16, strided<[1], offset: ?>>
            %inserted = tensor.insert %7 into %arg14[%arg11, %arg13] : tensor<16x32xf16>
            scf.yield %inserted : tensor<16x32xf16>
          }
          scf.yield %5 : tensor<16x32xf16>
        }
        %8 = scf.for %arg13 = %c0_i32 to %arg5 step %c1_i32 iter_args(%arg14 = %1) -> (tensor<16x32xf32>)  : i32 {
          %rc3 = memref.reinterpret_cast %arg2 to offset: [%i], sizes: [1], strides: [1] : memref<?xi32> to memref<1xi32, strided<[1], offset: ?>>
          %p = memref.load %rc3[%c0] : memref<1xi32, strided<[1], offset: ?>>
          %alloc = memref.alloc() : memref<16x32xf16>
          memref.copy %rc4, %alloc : memref<16x32xf16, strided<[?, 1], offset: ?>> to memref<16x32xf16>
          %t = bufferization.to_tensor %alloc restrict writable : memref<16x32xf16>
          %e = linalg.elemwise_binary {fun = #linalg.binary_fn<add>} ins(%arg14, %tf : tensor<16x32xf32>, tensor<16x32xf32>) outs(%arg14 : tensor<16x32xf32>) -> tensor<16x32xf32>
          scf.yield %e : tensor<16x32xf32>
        }
        return
      }
    }
    ''')


def test_scalarize_finds_marked_loops_with_source_lines():
    found = count_scalar_accesses(IR_MARKED)
    assert [(a["loc"], a["kind"], a["granularity"], a["dtype"], a["trips"], a["loops"]) for a in found] == [
        ("paged.py:13", "load", "element", "i32", 16, 1),
        ("helpers.py:4", "load", "element", "f16", 512, 2),   # inlined helper: callee first
        ("paged.py:15", "load", "row", "f16", 16, 1),
    ]
    assert found[1]["stack"] == ["helpers.py:4", "paged.py:14"]
    assert found[2]["elements_per_access"] == 32
    assert all(a["detected_by"] == "marker" and "ExtractedLoadOrStore" in a["markers"] for a in found)
    assert summarize(found)[0] == "1 scalarized access at paged.py:13 (element load i32 x16)"


def test_scalarize_finds_unmarked_element_loops_but_not_real_loops():
    found = count_scalar_accesses(IR_UNMARKED)
    assert len(found) == 1
    (a,) = found
    assert (a["loc"], a["granularity"], a["trips"], a["loops"], a["detected_by"]) == ("?", "element", 512, 2,
                                                                                      "pattern")


# A loop the kernel wrote itself: one row per trip, its address read from memory (nothing marked);
# and a page loop moving a [16, 64] tile per trip (not a row gather).
IR_ROW_LOOP = textwrap.dedent('''\
    module {
      func.func @rows(%arg2: memref<?xf16>, %arg3: memref<?xi32>, %arg5: i32) {
        %c0 = arith.constant 0 : index
        %c0_i32 = arith.constant 0 : i32
        %c32_i32 = arith.constant 32 : i32
        %c1_i32 = arith.constant 1 : i32
        %2 = scf.for %arg12 = %c0_i32 to %c32_i32 step %c1_i32 iter_args(%arg13 = %1) -> (tensor<64xf32>)  : i32 {
          %3 = arith.index_cast %arg12 : i32 to index loc(#loc2)
          %reinterpret_cast_0 = memref.reinterpret_cast %arg3 to offset: [%3], sizes: [1], strides: [1] : memref<?xi32> to memref<1xi32, strided<[1], offset: ?>> loc(#loc3)
          %4 = memref.load %reinterpret_cast_0[%c0] : memref<1xi32, strided<[1], offset: ?>> loc(#loc3)
          %5 = arith.muli %4, %arg5 : i32 loc(#loc4)
          %6 = arith.index_cast %5 : i32 to index loc(#loc4)
          %reinterpret_cast_1 = memref.reinterpret_cast %arg2 to offset: [%6], sizes: [64], strides: [1] : memref<?xf16> to memref<64xf16, strided<[1], offset: ?>> loc(#loc5)
          %alloc = memref.alloc() : memref<64xf16> loc(#loc5)
          memref.copy %reinterpret_cast_1, %alloc : memref<64xf16, strided<[1], offset: ?>> to memref<64xf16> loc(#loc5)
          %9 = arith.addi %3, %3 : index loc(#loc2)
          %reinterpret_cast_2 = memref.reinterpret_cast %arg2 to offset: [%6], sizes: [16, 64], strides: [64, 1] : memref<?xf16> to memref<16x64xf16, strided<[64, 1], offset: ?>> loc(#loc6)
          %alloc_3 = memref.alloc() : memref<16x64xf16> loc(#loc6)
          memref.copy %reinterpret_cast_2, %alloc_3 : memref<16x64xf16, strided<[64, 1], offset: ?>> to memref<16x64xf16> loc(#loc6)
          %reinterpret_cast_4 = memref.reinterpret_cast %arg2 to offset: [%9], sizes: [64], strides: [1] : memref<?xf16> to memref<64xf16, strided<[1], offset: ?>> loc(#loc7)
          %alloc_5 = memref.alloc() : memref<64xf16> loc(#loc7)
          memref.copy %reinterpret_cast_4, %alloc_5 : memref<64xf16, strided<[1], offset: ?>> to memref<64xf16> loc(#loc7)
          scf.yield %9 : tensor<64xf32> loc(#loc2)
        } loc(#loc2)
        return
      }
    }
    #loc2 = loc("rows.py":7:4)
    #loc3 = loc("rows.py":8:12)
    #loc4 = loc("rows.py":9:20)
    #loc5 = loc("rows.py":9:15)
    #loc6 = loc("rows.py":10:15)
    #loc7 = loc("rows.py":11:15)
    ''')


def test_scalarize_finds_row_loops_by_following_the_address_to_a_load():
    """Only the one-row copy whose offset comes from a loaded value is a row gather: not the
    [16, 64] tile at the same address, not the row at an address computed from the trip index."""
    (a,) = count_scalar_accesses(IR_ROW_LOOP)
    assert (a["loc"], a["granularity"], a["kind"], a["trips"], a["detected_by"]) == (
        "rows.py:9", "row", "load", 32, "dataflow")
    assert summarize([a]) == ["1 row-by-row access at rows.py:9 (row load f16 x32)"]


def test_scalarize_does_not_count_a_persistent_work_loop_as_a_row_loop():
    """The same copy inside ``for work in range(pid, n_work, n_programs)``: one trip is a tile,
    whose base address may well be read from memory (a varlen sequence start)."""
    work_loop = IR_ROW_LOOP.replace("%arg5: i32)", "%arg5: i32, %arg6: i32)").replace(
        "step %c1_i32 iter_args", "step %arg6 iter_args")
    assert "step %arg6" in work_loop
    assert count_scalar_accesses(work_loop) == []


def test_scalarize_on_clean_ir_is_empty():
    assert count_scalar_accesses("module {\n  func.func @k() {\n    return\n  }\n}\n") == []


# -- upstream Triton: CUDA cubins without a GPU -------------------------------------------------

@needs_upstream
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_attention_plans_compile_to_cubins(arch):
    for name, plan in _attention_plans().items():
        outcomes = compile_plan(plan, arch)
        assert len(outcomes) == len(list(plan.chain()))
        for oc in outcomes:
            assert isinstance(oc, CompileOutcome)
            assert oc.outcome == "pass", f"{name}/{oc.kernel} @ {arch}: {oc.stage}: {oc.message}"
            assert oc.stage is None and oc.last_stage_reached == "cubin" and oc.target == arch
            assert oc.artifacts["cubin_bytes"] > 0
            assert 0 < oc.artifacts["shared_bytes"] <= oc.artifacts["shared_limit"]
    # The chain is compiled in launch order: decode then merge.
    assert [oc.kernel for oc in compile_plan(_attention_plans()["decode"], arch)] == ["_decode_fwd",
                                                                                      "_merge_splits"]


@needs_upstream
def test_specialization_matches_the_launch():
    torch = pytest.importorskip("torch")
    k = _kernels()["scale_rows"]
    x = torch.randn(64)
    oc = compile_plan(_plan(k, (1,), (x, torch.empty_like(x), 1), dict(N=64)), "sm_80")[0]
    assert oc.outcome == "pass", oc.message
    # An int argument equal to 1 becomes a constant, as at launch; pointers keep their dtype.
    assert oc.artifacts["signature"]["X"] == "*fp32" and oc.artifacts["signature"]["n"] == "constexpr"


@needs_upstream
def test_cuda_frontend_error_is_classified():
    torch = pytest.importorskip("torch")
    x = torch.randn(16)
    oc = compile_plan(_plan(_kernels()["broken_kernel"], (1,), (x, torch.empty_like(x)), dict(N=16)), "sm_90")[0]
    assert (oc.outcome, oc.stage, oc.last_stage_reached) == ("fail", "frontend", "none")
    assert "test_compile_core.py:" in oc.message.splitlines()[0] and "not_a_function" in oc.message


@needs_upstream
def test_cuda_shared_memory_overflow_is_classified():
    torch = pytest.importorskip("torch")
    from kernels.prefill import prefill_plan
    q = torch.randn(1, 2, 256, 128, dtype=torch.float16)
    plan = prefill_plan(q, q, q, torch.empty_like(q), None, causal=False, scale=0.25, interpret=False)
    plan.meta.update(BLOCK_M=128, BLOCK_N=128, num_stages=4, num_warps=8)  # ~224 KB of tiles
    oc = compile_plan(plan, "sm_80")[0]
    assert (oc.outcome, oc.stage, oc.last_stage_reached) == ("fail", "smem", "cubin"), oc.brief()
    assert oc.artifacts["shared_bytes"] > oc.artifacts["shared_limit"] == 166912


# -- triton-ascend: Ascend910B2 without an NPU ---------------------------------------------------

@needs_bishengir
def test_npu_clean_kernel_passes_when_only_hivmc_is_missing():
    torch = pytest.importorskip("torch")
    x = torch.randn(64)
    oc = compile_plan(_plan(_kernels()["scale_rows"], (4,), (x, torch.empty_like(x), 64), dict(N=64)),
                      "Ascend910B2")[0]
    assert (oc.outcome, oc.stage, oc.last_stage_reached) == ("pass", None, "bishengir (hivmc missing)"), oc.message
    assert oc.target == "Ascend910B2" and "func.func @scale_rows" in oc.artifacts["ttadapter"]
    assert oc.artifacts["scalar_accesses"] == []


@needs_ascend
def test_npu_frontend_error_is_classified():
    torch = pytest.importorskip("torch")
    x = torch.randn(16)
    oc = compile_plan(_plan(_kernels()["broken_kernel"], (1,), (x, torch.empty_like(x)), dict(N=16)),
                      "Ascend910B2")[0]
    assert (oc.outcome, oc.stage) == ("fail", "frontend")
    assert "test_compile_core.py:" in oc.message.splitlines()[0] and "not_a_function" in oc.message


@needs_bishengir
def test_npu_ub_overflow_is_classified():
    torch = pytest.importorskip("torch")
    x = torch.randn(256, 512)
    oc = compile_plan(_plan(_kernels()["big_tile"], (1,), (x, torch.empty_like(x)), dict(BM=256, BN=512)),
                      "Ascend910B2")[0]
    assert (oc.outcome, oc.stage) == ("fail", "ub_overflow"), oc.message
    assert oc.artifacts["ub_required_bits"] > oc.artifacts["ub_available_bits"] == 1572864
    # bishengir's memory display counts the same bytes as its overflow message
    assert oc.artifacts["memory"]["aiv"]["ub"] * 8 == oc.artifacts["ub_required_bits"]


@needs_bishengir
def test_npu_grid_over_the_limit_fails_a_clean_kernel():
    torch = pytest.importorskip("torch")
    x = torch.randn(64)
    oc = compile_plan(_plan(_kernels()["scale_rows"], (300, 300), (x, torch.empty_like(x), 64), dict(N=64)),
                      "Ascend910B2")[0]
    assert (oc.outcome, oc.stage, oc.last_stage_reached) == ("fail", "grid", "bishengir (hivmc missing)")


@needs_bishengir
def test_npu_transposed_gather_adapter_failure_or_scalarization():
    """rc2's adapter cannot lower a gather on the inner axis; 3.2.0 compiles it into 512 scalar
    loads, reported at the kernel line."""
    torch = pytest.importorskip("torch")
    k = torch.randn(64, 32, dtype=torch.float16)
    idx = torch.randint(0, 64, (16,), dtype=torch.int32)
    plan = _plan(_kernels()["gather_transposed"], (1,), (k, idx, torch.empty(32, 16, dtype=torch.float16), 32),
                 dict(BN=16, D=32))
    oc = compile_plan(plan, "Ascend910B2")[0]
    if oc.stage == "adapter":
        assert "failed to legalize unresolved materialization" in oc.message
        assert oc.message.startswith("[ConvertTritonIRToLinalgIR]")
    else:
        assert oc.outcome == "pass", oc.message
        (access,) = oc.artifacts["scalar_accesses"]
        assert (access["granularity"], access["kind"], access["trips"]) == ("element", "load", 512)
        assert access["loc"].startswith("test_compile_core.py:")


@needs_ascend
def test_npu_attention_plans_yield_one_classified_outcome_per_link():
    for name, plan in _attention_plans().items():
        outcomes = compile_plan(plan, "Ascend910B2")
        assert len(outcomes) == len(list(plan.chain()))
        for oc in outcomes:
            assert oc.outcome in ("pass", "fail") and oc.target == "Ascend910B2"
            assert (oc.stage is None) == (oc.outcome == "pass")
            assert oc.stage is None or oc.stage in NPU_STAGES, oc.stage
            assert oc.message or oc.outcome == "pass"
