"""Launching an already-compiled Triton kernel without ``JITFunction``'s dispatch.

``kernel[grid](*args, **meta)`` binds the arguments, specializes each one (dtype, 16-byte
alignment of pointers, divisibility of ints), builds a cache key and looks the compiled kernel
up on every call: tens of microseconds of host time, paid again for an identical call. A caller
that already knows the call is identical up to its tensors' addresses (``kernels._callcache``:
same shapes, strides, dtypes, device, pointer alignment and scalar arguments, hence the same
specialization) can keep the ``CompiledKernel`` the first launch returned and call its launcher
directly, with the arguments in the kernel's parameter order, as ``JITFunction.run`` does.

Version guard: Triton 3.3 to 3.9 (``triton.knobs``; the launcher takes every parameter value,
constexprs included, after the hooks). Anything else, the interpreter, a launch hook being set
(a profiler such as proton wants its metadata), or another current device falls back to the
JIT path, which is always correct; so does a replaced ``JITFunction.run`` (a launch capture such
as compile-only's records launches there).
"""
from __future__ import annotations

import inspect
from typing import Any, Optional

import triton

from . import settings


def _version() -> tuple[int, int]:
    try:
        major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    except ValueError:
        return (0, 0)
    return (major, minor)


#: Triton releases whose launch path this module knows (checked against their runtime/jit.py).
SUPPORTED = (3, 3) <= _version() <= (3, 9)

_knobs_runtime = None
_driver = None


class _Driver:
    """The two driver calls a launch makes, looked up once (``driver.active`` is a lazy proxy
    that forwards every attribute access)."""

    def __init__(self, active):
        self.get_current_device = active.get_current_device
        self.get_current_stream = active.get_current_stream


def _runtime():
    global _knobs_runtime, _driver
    if _knobs_runtime is None:
        from triton import knobs
        from triton.runtime import driver

        _knobs_runtime, _driver = knobs.runtime, _Driver(driver.active)
    return _knobs_runtime, _driver


def _hook_set(hook) -> bool:
    # Triton <= 3.8 keeps None when no hook is set; 3.9 an empty HookChain (``calls == []``).
    return hook is not None and bool(getattr(hook, "calls", True))


def direct_allowed() -> bool:
    """The direct path may be used for this call (settings and hooks, read per call); without
    hooks the launcher is given None for the metadata and both hooks, which it skips."""
    if not SUPPORTED or not settings.current().direct_launch:
        return False
    rt, _ = _runtime()
    return not _hook_set(rt.launch_enter_hook) and not _hook_set(rt.launch_exit_hook)


def param_values(kernel, args: tuple, meta: dict) -> Optional[list]:
    """Every parameter value of ``kernel`` in its signature order, as ``JITFunction.run`` binds
    them (positional ``args``, then ``meta`` by name, then defaults); None when ``kernel`` is not
    a plain JITFunction or a parameter has no value."""
    fn = getattr(kernel, "fn", None)
    names = getattr(kernel, "arg_names", None)
    if fn is None or names is None or not inspect.isfunction(fn):
        return None
    params = inspect.signature(fn).parameters
    values = list(args)
    for name in names[len(args):]:
        if name in meta:
            values.append(meta[name])
        elif params[name].default is not inspect.Parameter.empty:
            values.append(params[name].default)
        else:
            return None
    return values


_ASK = object()


def chain_target() -> Optional[tuple]:
    """(current device, its current stream) when the direct path may be used now, else None:
    asked once for the launches of one call, which run back to back on one stream (each ask is
    a settings read, two hook checks and two driver calls)."""
    if not direct_allowed():
        return None
    _, drv = _runtime()
    dev = drv.get_current_device()
    return dev, drv.get_current_stream(dev)


class Launch:
    """One kernel launch whose compiled kernel is known: ``fire(values)`` launches it with the
    full parameter list (``param_values`` order); ``n_args`` leading values are the positional
    arguments of the JIT fallback, ``meta`` the rest."""

    __slots__ = ("kernel", "grid", "meta", "n_args", "compiled", "device", "run", "function",
                 "packed", "grid3", "entry")

    def __init__(self, kernel, grid: tuple, meta: dict, n_args: int, compiled: Any, device: Optional[int]):
        self.kernel, self.grid, self.meta, self.n_args = kernel, grid, meta, n_args
        self.compiled, self.device = compiled, device
        g = tuple(grid) + (1,) * (3 - len(grid))
        self.grid3 = g
        # Triton's launch entry as it was: a tool that replaces it (a launch capture, a
        # profiler) must see every launch, so then the JIT path is taken.
        self.entry = getattr(type(kernel), "run", None)
        self.run = self.function = self.packed = None
        if compiled is not None:
            try:
                self.run, self.function = compiled.run, compiled.function
                self.packed = compiled.packed_metadata
            except Exception:  # noqa: BLE001 - anything unexpected: the JIT path
                self.compiled = None

    def fire(self, values: list, where: Any = _ASK) -> None:
        """``where``: ``chain_target()`` asked once for a chain of launches (the default asks
        now)."""
        if self.compiled is not None and getattr(type(self.kernel), "run", None) is self.entry:
            if where is _ASK:
                where = chain_target()
            if where is not None and where[0] == self.device:
                g = self.grid3
                self.run(g[0], g[1], g[2], where[1], self.function, self.packed, None, None, None, *values)
                return
        self.kernel[self.grid](*values[:self.n_args], **self.meta)


def launch_of(kernel, grid: tuple, args: tuple, meta: dict, compiled: Any, live: bool) -> Launch:
    """A ``Launch`` repeating ``kernel[grid](*args, **meta)``, whose first launch returned
    ``compiled``: direct where allowed (``live``: a real device, not the interpreter)."""
    device = None
    if live and SUPPORTED and compiled is not None and hasattr(compiled, "packed_metadata"):
        _, drv = _runtime()
        device = drv.get_current_device()
    else:
        compiled = None
    return Launch(kernel, grid, meta, len(args), compiled, device)
