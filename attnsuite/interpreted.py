"""Whether an implementation ran a Triton kernel in the interpreter (``TRITON_INTERPRET=1``).

Known failures of the interpreter itself (the ledger's ``interp_bf16_dot``: bf16 ``tl.dot``
multiplies raw bit patterns) can only explain the failure of a case in which some Triton kernel
was interpreted: a torch or vendor implementation's bf16 path is judged like any other. The
runner counts the interpreter's launches around the implementation's calls; the ledger entry
says it needs one (``only_after_interpreted_launch``).

Counting wraps ``InterpretedFunction.run``, the entry every ``kernel[grid](...)`` goes through
under the interpreter (``attnsuite/compile/capture.py`` replaces the same method, without
running anything, for compile-only). Outside the interpreter there is nothing to count: the
count is None.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterator, Optional

_counts: list[list[int]] = []      # one counter per active block, innermost last
_original = None


def _interpreted_class():
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # no triton, or one without an interpreter
        return None
    return InterpretedFunction


def _install() -> bool:
    """Wrap ``InterpretedFunction.run`` once per process; False when there is none."""
    global _original
    cls = _interpreted_class()
    if cls is None or "run" not in vars(cls):
        return False
    as_in_a_run()
    if _original is None:
        _original = vars(cls)["run"]

        @functools.wraps(_original)
        def run(self, *args, **kwargs):
            if not kwargs.get("warmup", False):
                for counter in _counts:
                    counter[0] += 1
            return _original(self, *args, **kwargs)

        cls.run = run
    return True


@contextlib.contextmanager
def counting(active: bool = True) -> Iterator[list[Optional[int]]]:
    """``with counting() as n:`` ... ``n[0]``: how many kernels the interpreter launched inside
    the block (None when ``active`` is False or there is no interpreter to count)."""
    counter: list[Optional[int]] = [None]
    if not active or not _install():
        yield counter
        return
    counter[0] = 0
    _counts.append(counter)
    try:
        yield counter
    finally:
        _counts.remove(counter)


def _interpreter_function(name: str):
    """(``triton.language``, the interpreter module, its function ``name``), or None where
    Triton, its interpreter or that function is missing."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        return None
    original = getattr(interpreter, name, None)
    return None if original is None else (tl, interpreter, original)


def as_in_a_run() -> None:
    """The interpreter as a suite run has it (the helper-patching skip and the speed-ups), for a
    script that interprets kernels outside a run."""
    skip_repeated_patching()
    speed_up()


def speed_up() -> None:
    """The interpreter changes below that compute the same objects faster: the dtype memo, the
    shared type layouts and the equal-shape broadcasts (each a no-op where Triton lacks what it
    changes). The helper-patching skip is apart: it changes what the interpreter does."""
    memoize_np_dtypes()
    share_type_layouts()
    skip_equal_broadcasts()
    skip_unasserted_overflow_checks()


# -- the interpreter's per-call re-patching ------------------------------------------------------

_patch_lang_original = None


def skip_repeated_patching() -> bool:
    """Make the interpreter skip re-patching ``triton.language`` for a @jit helper called while
    its modules are patched already (by the kernel that calls it). Triton 3.6-3.9 patch every
    builtin of ``tl``, ``tl.core``, ``tl.math`` and the tensor class on *each* helper call,
    scanning the modules with ``inspect.getmembers``: a third of the interpreter's time in the
    quick profile's kernels, for a patch that changes nothing (a patched builtin is no longer a
    builtin, so the scan patches nothing again). The helper-level patch is also never undone, so
    skipping it removes that leak too. A helper whose modules are not all patched yet (a kernel
    that does not see ``tl.core`` calling one that does) still gets the interpreter's own patch.
    Results are the same bits (tests/test_interpreter_patching.py). False where the interpreter
    has no ``_patch_lang`` to wrap."""
    global _patch_lang_original
    found = _interpreter_function("_patch_lang")
    if found is None:
        return False
    tl, interpreter, original = found
    if _patch_lang_original is not None:
        return True
    _patch_lang_original = original
    empty_scope = getattr(interpreter, "_LangPatchScope", None)

    def patched(lang) -> bool:
        probes = [getattr(lang, "load", None), getattr(getattr(lang, "tensor", None), "__add__", None)]
        if lang is tl:
            probes.append(getattr(tl.math, "exp", None))
        return all(p is not None and not tl.core.is_builtin(p) for p in probes)

    @functools.wraps(original)
    def _patch_lang(fn):
        langs = [v for v in getattr(fn, "__globals__", {}).values() if v is tl or v is tl.core]
        if langs and all(patched(lang) for lang in langs):
            return empty_scope() if empty_scope is not None else None
        return original(fn)

    interpreter._patch_lang = _patch_lang
    return True



# -- the interpreter's dtype lookup -----------------------------------------------------------------

def memoize_np_dtypes() -> bool:
    """Make the interpreter's ``_get_np_dtype`` (Triton 3.6-3.9) a lookup in a dict it fills as it
    goes. The original builds a 19-entry dict of dtypes on every call, hashing each key, and it is
    called for every load, store, cast and splat: 7% of the quick profile's time under cProfile;
    ``pytest cases/mustafar.py cases/magicpig_decode.py --device cpu`` took 21.6 s of CPU without
    this and 20.1 s with it (means of three runs). Its answer
    depends on the element type alone, so a block type is looked up by its element type. Same
    result (tests/test_interpreter_patching.py). False where the interpreter has no such function."""
    found = _interpreter_function("_get_np_dtype")
    if found is None:
        return False
    tl, interpreter, original = found
    if getattr(original, "memoized", False):
        return True
    known: dict = {}

    @functools.wraps(original)
    def _get_np_dtype(tt_dtype):
        element = tt_dtype.element_ty if isinstance(tt_dtype, tl.block_type) else tt_dtype
        try:
            return known[element]
        except KeyError:
            known[element] = found = original(element)
            return found
        except TypeError:  # not hashable: not a dtype the interpreter knows either
            return original(tt_dtype)

    _get_np_dtype.memoized = True
    interpreter._get_np_dtype = _get_np_dtype
    return True


# -- the interpreter's type objects ------------------------------------------------------------------

#: What ``block_type`` and ``tensor`` objects hold in the Triton versions this was measured on:
#: anything else, and the constructors are left alone.
_BLOCK_FIELDS = {"element_ty", "shape", "numel", "name"}
_TENSOR_FIELDS = {"handle", "shape", "numel", "type", "dtype"}


def share_type_layouts() -> bool:
    """Make ``tl.block_type`` and ``tl.tensor`` copy their shape fields from the last object made
    with the same shape, instead of computing them again. Under the interpreter every operation
    of every program makes several of both, and each one unwraps its shape, validates it, formats
    its name and wraps each dimension in a ``constexpr`` inside a ``tl.tuple``. The quick profile
    (``pytest -n 2 --device cpu``) took 75.5 s of CPU with the interpreter's constructors and 65.6 s
    with these (means of two alternating runs each), the same numbers in every record.

    What is computed per object stays per object: the handle, the type and its scalar, the
    element type. The shared fields (a ``tl.tuple`` of ``constexpr``, a ``constexpr``, a string)
    are never modified in place by Triton. A shape that is not a list of plain ints, and a
    type that is not a ``block_type`` or a scalar, goes through the original constructor, which
    also raises where it should. Each class is patched on its own (a test may restore one).
    False where the classes hold other fields than the ones above, or keep a shape in a list
    (triton-ascend 3.2)."""
    try:
        import triton.language as tl
    except ImportError:
        return False
    core = tl.core
    block_cls, tensor_cls = core.block_type, core.tensor
    if getattr(block_cls.__init__, "shared", False) and getattr(tensor_cls.__init__, "shared", False):
        return True
    block_init = getattr(block_cls.__init__, "__wrapped__", block_cls.__init__)
    tensor_init = getattr(tensor_cls.__init__, "__wrapped__", tensor_cls.__init__)
    try:
        probe_block = block_cls.__new__(block_cls)
        block_init(probe_block, tl.float16, [2, 4])
        probes = [tensor_cls.__new__(tensor_cls) for _ in range(2)]
        tensor_init(probes[0], None, probe_block)
        tensor_init(probes[1], None, tl.float16)
        fits = (set(vars(probe_block)) == _BLOCK_FIELDS and all(set(vars(p)) == _TENSOR_FIELDS for p in probes)
                # Shared only where the fields cannot be changed through a list (Triton 3.2 keeps a
                # tensor's shape in one) and the shape class is the one measured.
                and hasattr(core, "tuple") and not any(isinstance(p.shape, list) for p in probes)
                and not isinstance(probe_block.shape, list))
    except Exception:  # constructors of another signature
        fits = False
    if not fits:
        return False
    if not getattr(block_cls.__init__, "shared", False):
        block_cls.__init__ = _shared_block_init(block_init, core)
    if not getattr(tensor_cls.__init__, "shared", False):
        tensor_cls.__init__ = _shared_tensor_init(tensor_init, core)
    return True


def _shared_block_init(block_init, core):
    constexpr, tl_tuple = core.constexpr, core.tuple
    layouts: dict = {}

    @functools.wraps(block_init)
    def __init__(self, element_ty, shape):
        name = getattr(element_ty, "name", None)
        if type(name) is not str or (type(shape) is not list and not isinstance(shape, tl_tuple)):
            return block_init(self, element_ty, shape)
        dims = tuple(d.value if type(d) is constexpr else d for d in shape)
        if not all(type(d) is int for d in dims):  # (a numpy int equals an int as a key, and is refused)
            return block_init(self, element_ty, shape)
        key = (name, dims)
        layout = layouts.get(key)
        if layout is None:
            block_init(self, element_ty, shape)
            layouts[key] = {k: v for k, v in vars(self).items() if k != "element_ty"}
            return
        self.element_ty = element_ty
        self.__dict__.update(layout)

    __init__.shared = True
    return __init__


def _shared_tensor_init(tensor_init, core):
    block_cls, scalar_classes = core.block_type, (core.dtype, core.pointer_type)
    layouts: dict = {}

    @functools.wraps(tensor_init)
    def __init__(self, handle, type):
        kind = type.__class__
        # A block type's name spells out its shape; every scalar type has the empty shape.
        key = type.name if kind is block_cls else (None if kind in scalar_classes else False)
        layout = layouts.get(key) if key is not False else None
        if layout is None:
            tensor_init(self, handle, type)
            if key is not False:
                layouts[key] = {"shape": self.shape, "numel": self.numel}
            return
        self.handle = handle
        self.type = type
        self.dtype = type.scalar
        self.__dict__.update(layout)

    __init__.shared = True
    return __init__


# -- the interpreter's broadcasting of equal shapes ----------------------------------------------

def skip_equal_broadcasts() -> bool:
    """Make ``TritonSemantic.broadcast_impl_value`` return two block operands of the same shape
    as they are, as it does after comparing their shapes dimension by dimension (each comparison
    of ``tl.tuple`` shapes unwraps and rewraps them). Nearly every binary operation of a kernel
    body has equal shapes: the original runs for every other pair. Interpreted decode, prefill and
    block-sparse kernels (12 quick cases each, in one process, alternating): 1.39 s of CPU with this,
    1.61 s without (best of four). False where Triton has no such method."""
    try:
        from triton.language.semantic import TritonSemantic
    except ImportError:
        return False
    original = vars(TritonSemantic).get("broadcast_impl_value")
    if original is None:
        return False
    if getattr(original, "skips_equal", False):
        return True

    @functools.wraps(original)
    def broadcast_impl_value(self, lhs, rhs):
        lhs_ty, rhs_ty = lhs.type, rhs.type
        if lhs_ty.__class__ is rhs_ty.__class__ and lhs_ty.is_block():
            lhs_shape, rhs_shape = lhs_ty.shape, rhs_ty.shape
            if lhs_shape is rhs_shape or list(lhs_shape) == list(rhs_shape):
                return lhs, rhs
        return original(self, lhs, rhs)

    broadcast_impl_value.skips_equal = True
    TritonSemantic.broadcast_impl_value = broadcast_impl_value
    return True


# -- the interpreter's integer overflow checks ------------------------------------------------------

def skip_unasserted_overflow_checks() -> bool:
    """Make the interpreter skip ``TritonSemantic.binary_op_sanitize_overflow_impl`` where its
    only product could have no effect. For every 32-bit (and narrower) integer ``+``, ``-`` and
    ``*`` of a kernel body it recomputes the operation in int64 and compares the result with the
    type's range (two casts, the operation, two constants, two comparisons, an ``and``: eight
    interpreted operations besides the one asked for), then hands the condition to
    ``device_assert``, which drops it unless the builder's options have ``debug`` set, and the
    interpreter's never do (``InterpreterOptions()``). Index arithmetic is most of a kernel's
    operations: ``pytest cases/mustafar.py`` spent 30% of its interpreted time there, for nothing.

    Skipped only under the interpreter's own builder with ``debug`` off, read at each call (a
    debugging run that sets it gets the check again); compiling for a device is untouched. The
    original's type assertions are kept. False where Triton has no such method."""
    try:
        from triton.language.semantic import TritonSemantic
        from triton.runtime.interpreter import InterpreterBuilder
    except ImportError:
        return False
    original = vars(TritonSemantic).get("binary_op_sanitize_overflow_impl")
    if original is None:
        return False
    if getattr(original, "skips_unasserted", False):
        return True
    if not _asserts_dropped_without_debug(TritonSemantic, InterpreterBuilder):
        return False

    @functools.wraps(original)
    def binary_op_sanitize_overflow_impl(self, lhs, rhs, binary_op):
        builder = self.builder
        if type(builder) is InterpreterBuilder and getattr(builder.options, "debug", True) is False:
            lhs_ty, rhs_ty = lhs.type.scalar, rhs.type.scalar
            if lhs_ty.int_bitwidth >= 64 or not builder.options.sanitize_overflow:
                return None
            assert lhs_ty == rhs_ty, f"expected matching operand types, got {lhs_ty} and {rhs_ty}"
            assert lhs_ty.is_int(), f"expected integer type, got {lhs_ty}"
            return None
        return original(self, lhs, rhs, binary_op)

    binary_op_sanitize_overflow_impl.skips_unasserted = True
    TritonSemantic.binary_op_sanitize_overflow_impl = binary_op_sanitize_overflow_impl
    return True


def _asserts_dropped_without_debug(semantic_cls, builder_cls) -> bool:
    """Whether this Triton's interpreter drops a failing ``device_assert`` when ``debug`` is off
    (as 3.6-3.9 do): asked once, of a fresh builder, with a condition that is False."""
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        builder = builder_cls()
        if getattr(builder.options, "debug", True) is not False:
            return False
        cond = tl.core.tensor(TensorHandle(np.array([False]), tl.int1), tl.int1)
        semantic_cls(builder).device_assert(cond, "probe", None)
    except Exception:  # an assertion that fired, or a builder of another signature
        return False
    return True


# -- the order in which a launch's programs run ---------------------------------------------------

#: ``grid``: the interpreter's own order (x, then y, then z, one program at a time);
#: ``reversed``: the last program first; ``shuffled:SEED``: a permutation drawn from SEED and the
#: grid's shape. On a GPU programs run concurrently in no set order; under the interpreter a
#: store that lands in another program's rows is overwritten by that program (grid order) or
#: overwrites it (another order): the orders other than ``grid`` make such a store show on cpu.
PROGRAM_ORDERS = ("grid", "reversed", "shuffled")
_program_order = "grid"
_builder_methods = None


def parse_program_order(spec: str) -> str:
    """``spec`` checked and normalised (``shuffled`` alone takes seed 0); ValueError otherwise."""
    kind, _, seed = spec.partition(":")
    if kind not in PROGRAM_ORDERS or (seed and kind != "shuffled"):
        raise ValueError(f"--program-order {spec}: expected grid, reversed or shuffled[:SEED]")
    if kind == "shuffled":
        try:
            return f"shuffled:{int(seed or 0)}"
        except ValueError:
            raise ValueError(f"--program-order {spec}: the seed must be an integer") from None
    return kind


def program_order() -> str:
    return _program_order


def _order(spec: str, grid: tuple) -> list:
    """The programs of ``grid`` (x, y, z) in the order ``spec`` runs them."""
    import itertools
    import random

    programs = list(itertools.product(*(range(n) for n in grid)))
    if spec == "reversed":
        programs.reverse()
    elif spec.startswith("shuffled:"):
        random.Random(f"{spec}/{grid}").shuffle(programs)
    return programs


def set_program_order(spec: str) -> bool:
    """Run every interpreted launch's programs in the order ``spec`` names (see PROGRAM_ORDERS).
    The interpreter loops over the grid in order and tells its builder each program's index
    (``set_grid_idx``); the builder here hands out the index of the program the order puts at
    that position instead, so the loop, and whatever else the interpreter does per launch, stay
    the interpreter's own. False where the interpreter has no such builder."""
    global _program_order, _builder_methods
    spec = parse_program_order(spec)
    if spec == "grid" and _builder_methods is None:
        return True  # nothing patched: nothing to undo (and no need to import the interpreter)
    try:
        from triton.runtime import interpreter
    except ImportError:
        return spec == "grid"
    builder = getattr(interpreter, "interpreter_builder", None)
    if builder is None or not hasattr(builder, "set_grid_idx") or not hasattr(builder, "set_grid_dim"):
        return spec == "grid"
    if _builder_methods is None:
        _builder_methods = (builder.set_grid_dim, builder.set_grid_idx)
    set_dim, set_idx = _builder_methods
    _program_order = spec
    if spec == "grid":
        builder.__dict__.pop("set_grid_dim", None)
        builder.__dict__.pop("set_grid_idx", None)
        return True
    launch = {"order": [], "grid": (1, 1, 1)}

    def set_grid_dim(nx, ny, nz):
        launch["grid"] = (nx, ny, nz)
        launch["order"] = _order(spec, (nx, ny, nz))
        return set_dim(nx, ny, nz)

    def set_grid_idx(x, y, z):
        _, ny, nz = launch["grid"]
        return set_idx(*launch["order"][(x * ny + y) * nz + z])

    builder.set_grid_dim, builder.set_grid_idx = set_grid_dim, set_grid_idx
    return True
