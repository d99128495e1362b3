"""Get a compilable ``JITFunction`` for a kernel object, whatever ``triton.jit`` returned.

With ``TRITON_INTERPRET=1`` set when the kernel module was imported (the cpu device does this),
``@triton.jit`` returns an ``InterpretedFunction``, which cannot be compiled. It keeps the plain
Python function (``.fn``) and the decorator's keyword arguments (``.kwargs`` on upstream Triton,
``.rewriter.kwargs`` on triton-ascend 3.2), so an equivalent ``JITFunction`` can be rebuilt.
Helper ``@triton.jit`` functions the kernel calls are InterpretedFunctions too: they are rebuilt
the same way and the kernel gets a copy of its globals that points at the rebuilt helpers.
Neither the kernel module nor the environment variable is touched.

That is not enough on its own: Triton's own language helpers are ``@triton.jit`` functions too
(``tl.minimum``, ``tl.maximum``, ``tl.sum``, ``tl.max``, ``tl.cdiv``, ...), so with the flag set at
import they are InterpretedFunctions, and calling one while generating IR patches
``triton.language`` with the interpreter's builder for the rest of the process. ``compiling()``
therefore, for the duration of a compile, unsets ``TRITON_INTERPRET`` (read again at call time by
Triton's knobs) and swaps every InterpretedFunction exposed by ``triton.language.*`` (module
attributes and ``tensor`` member functions) for its JITFunction, restoring all of it afterwards.
Not thread-safe: do not run interpreted kernels in another thread while compiling.
"""
from __future__ import annotations

import contextlib
import inspect
import os
import sys
import types
from typing import Any, Iterator

_rebuilt: dict[int, tuple] = {}      # id(InterpretedFunction) -> (it, its JITFunction)
_shadows: dict[int, tuple] = {}      # id(module globals) -> (them, copy with JITFunctions)


def _is_interpreted(obj: Any) -> bool:
    return type(obj).__name__ == "InterpretedFunction" and callable(getattr(obj, "fn", None))


def _decorator_kwargs(obj: Any, jit_cls: type) -> dict:
    kwargs = getattr(obj, "kwargs", None)
    if kwargs is None:
        kwargs = getattr(getattr(obj, "rewriter", None), "kwargs", None) or {}
    accepted = inspect.signature(jit_cls.__init__).parameters
    return {k: v for k, v in kwargs.items() if k in accepted and k != "fn"}


def _shadow_globals(g: dict) -> dict:
    """A copy of a module's globals in which every InterpretedFunction is its JITFunction.
    Registered before it is filled, so kernels and helpers that refer to each other (they share
    one module dict) resolve to the same copy."""
    if id(g) in _shadows:
        return _shadows[id(g)][1]
    shadow = dict(g)
    _shadows[id(g)] = (g, shadow)
    for name, val in g.items():
        if _is_interpreted(val):
            shadow[name] = as_jit_function(val)
    return shadow


def _rebind(fn: types.FunctionType, g: dict) -> types.FunctionType:
    clone = types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    clone.__dict__.update(fn.__dict__)
    clone.__qualname__ = fn.__qualname__
    clone.__module__ = fn.__module__
    clone.__annotations__ = fn.__annotations__
    clone.__doc__ = fn.__doc__
    return clone


def as_jit_function(kernel: Any) -> Any:
    """The ``triton.runtime.jit.JITFunction`` for ``kernel`` (returned as is when it is one)."""
    from triton.runtime.jit import JITFunction

    if isinstance(kernel, JITFunction):
        return kernel
    if _is_interpreted(kernel):
        if id(kernel) in _rebuilt:
            return _rebuilt[id(kernel)][1]
        fn = kernel.fn
        if any(_is_interpreted(v) and v is not kernel for v in fn.__globals__.values()):
            fn = _rebind(fn, _shadow_globals(fn.__globals__))
            if id(kernel) in _rebuilt:  # built while its module's globals were shadowed
                return _rebuilt[id(kernel)][1]
        jf = JITFunction(fn, **_decorator_kwargs(kernel, JITFunction))
        _rebuilt[id(kernel)] = (kernel, jf)
        return jf
    # Autotuner / Heuristics wrap the JITFunction in .fn.
    inner = getattr(kernel, "fn", None)
    if inner is not None and inner is not kernel:
        return as_jit_function(inner)
    raise TypeError(f"not a Triton kernel: {kernel!r} ({type(kernel).__name__})")


def _language_modules() -> list:
    return [m for name, m in list(sys.modules.items())
            if m is not None and (name == "triton.language" or name.startswith("triton.language.")
                                  or name.startswith("triton.triton_patch.language"))]


def _interpreted_in_closure(fn: Any) -> Any:
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            val = cell.cell_contents
        except ValueError:
            continue
        if _is_interpreted(val):
            return val
    return None


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """Make the Triton frontend see JITFunctions, not InterpretedFunctions (see module doc)."""
    saved_env = os.environ.pop("TRITON_INTERPRET", None)
    swaps: list[tuple[Any, str, Any]] = []
    try:
        for mod in _language_modules():
            for attr, val in list(vars(mod).items()):
                if _is_interpreted(val):
                    swaps.append((mod, attr, val))
            tensor_cls = vars(mod).get("tensor")
            if isinstance(tensor_cls, type) and mod.__name__.endswith("core"):
                for attr, val in list(vars(tensor_cls).items()):
                    if _is_interpreted(val) or _interpreted_in_closure(val) is not None:
                        swaps.append((tensor_cls, attr, val))
        for obj, attr, val in swaps:
            target = val if _is_interpreted(val) else _interpreted_in_closure(val)
            setattr(obj, attr, as_jit_function(target))
        yield
    finally:
        for obj, attr, val in reversed(swaps):
            setattr(obj, attr, val)
        if saved_env is not None:
            os.environ["TRITON_INTERPRET"] = saved_env


def kernel_name(kernel: Any) -> str:
    fn = getattr(kernel, "fn", kernel)
    while hasattr(fn, "fn") and fn.fn is not fn:
        fn = fn.fn
    return getattr(fn, "__name__", type(kernel).__name__)
