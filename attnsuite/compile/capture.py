"""Capture every Triton kernel launch an implementation makes, at Triton's own launch path, without
launching anything: what compile-only compiles, whoever wrote the implementation.

    from attnsuite.compile.capture import capture
    with capture() as launches:
        my_attention(q, k, v)                 # host tensors are fine: nothing runs
    for launch in launches:                   # kernel, grid, args, meta: what compile_link takes
        print(launch.name, launch.grid, launch.origin)

For the duration of the block the ``run`` method of Triton's kernel classes is replaced by one that
records the launch and returns ``None`` (no compile, no driver, no device):

* ``triton.runtime.jit.JITFunction`` (upstream Triton 3.6 - 3.9 and triton-ascend 3.2.x share the
  ``run(self, *args, grid, warmup, **kwargs)`` entry that ``kernel[grid](...)`` goes through);
  ``warmup=True`` calls are not launches and are ignored;
* ``triton.runtime.autotuner.Autotuner``: a tuner would time every config on the device and
  launch the fastest, so each config that survives the tuner's ``early_config_prune`` is captured
  as its own launch (``origin`` names it). Config pre-hooks are not run: they touch tensor
  contents, which compile-only never needs. The ``perf_model`` ranking is skipped too: it
  estimates device time. A subclass with its own ``run`` (triton-ascend's auto-tiling tuner,
  ``hints={"enable_ascend_autotune": True}``, which derives its configs at launch time) is left
  alone: it tries to time its candidates, and compile-only reports that it needs a device;
* ``Heuristics`` needs nothing: it computes its values and calls the wrapped kernel's ``run``;
* the interpreter's ``InterpretedFunction`` (when ``TRITON_INTERPRET=1`` was set at import).

A callable grid is resolved as Triton does at launch: called with the kernel's arguments bound to
its parameters (defaults applied), which includes an autotune config's constexprs.

Not thread-safe: a launch from another thread during the block is captured too.
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

from .jitfn import kernel_name


@dataclass
class Launch:
    """One captured launch, ``kernel[grid](*args, **meta)``; compile_link compiles it as it is."""
    kernel: Any
    grid: tuple
    args: tuple
    meta: dict = field(default_factory=dict)
    #: "jit", or "autotune config 2/4 (BLOCK_N=64, num_warps=4)" for a tuner's candidate.
    origin: str = "jit"

    @property
    def name(self) -> str:
        return kernel_name(self.kernel)

    def chain(self) -> Iterator["Launch"]:
        yield self


class NeedsDevice(RuntimeError):
    """The implementation needed a device (or its driver) before it launched what compile-only
    can capture; the message says what it asked for."""


_active: list[list[Launch]] = []      # capture blocks, innermost last
_origin: list[str] = []
_saved: list[tuple[type, str, Any]] = []
_INHERITED = object()  # the class had no attribute of its own: delete ours afterwards


def _bound_arguments(kernel: Any, args: tuple, kwargs: dict) -> dict:
    """Parameter name -> value, defaults applied, as Triton's binder hands them to a grid
    function (launch options such as ``num_warps`` are not parameters and are left out)."""
    fn = getattr(kernel, "fn", kernel)
    while not inspect.isfunction(fn) and getattr(fn, "fn", None) is not None and fn.fn is not fn:
        fn = fn.fn
    params = inspect.signature(fn).parameters
    bound = inspect.signature(fn).bind(*args, **{k: v for k, v in kwargs.items() if k in params})
    bound.apply_defaults()
    return dict(bound.arguments)


def resolve_grid(kernel: Any, grid: Any, args: tuple, kwargs: dict) -> tuple:
    """The launch grid as a tuple of ints, calling ``grid`` with the bound arguments if callable."""
    if callable(grid):
        grid = grid(_bound_arguments(kernel, args, kwargs))
    dims = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    return tuple(int(d) for d in dims)


def _record(kernel: Any, grid: Any, args: tuple, kwargs: dict) -> None:
    meta = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    launch = Launch(kernel=kernel, grid=resolve_grid(kernel, grid, args, meta), args=tuple(args),
                    meta=meta, origin=_origin[-1] if _origin else "jit")
    _active[-1].append(launch)


def _jit_run(self, *args, grid=None, warmup=False, **kwargs):
    if not warmup:
        _record(self, grid, args, kwargs)
    return None


def _interpreted_getitem(self, grid):
    return lambda *args, **kwargs: _jit_run(self, *args, grid=grid, **kwargs)


def _config_label(config: Any) -> str:
    kwargs = config.all_kwargs() if hasattr(config, "all_kwargs") else dict(getattr(config, "kwargs", {}))
    return ", ".join(f"{k}={v}" for k, v in kwargs.items() if v is not None)


def _autotune_run(self, *args, **kwargs):
    configs = list(self.configs)
    prune = getattr(self, "early_config_prune", None)
    if prune and len(configs) > 1:
        self.nargs = dict(zip(self.arg_names, args))
        try:
            configs = list(prune(configs, self.nargs, **kwargs))
        finally:
            self.nargs = None
    for i, config in enumerate(configs):
        _origin.append(f"autotune config {i + 1}/{len(configs)} ({_config_label(config)})")
        try:
            self.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            _origin.pop()
    return None


def _subclasses(cls: type) -> list[type]:
    found, todo = [], [cls]
    while todo:
        c = todo.pop()
        found.append(c)
        todo.extend(c.__subclasses__())
    return found


def _patches() -> list[tuple[type, str, Callable]]:
    from triton.runtime import autotuner, jit

    out = []
    for cls in _subclasses(jit.JITFunction):
        if "run" in vars(cls):
            out.append((cls, "run", _jit_run))
    # Only Triton's own Autotuner: a subclass with its own run (triton-ascend's auto-tiling
    # tuner makes its configs up at launch time) keeps it, and whatever it asks of the device is
    # reported as such (``needs_device``).
    out.append((autotuner.Autotuner, "run", _autotune_run))
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - every supported Triton has one
        InterpretedFunction = None
    if InterpretedFunction is not None:
        out.append((InterpretedFunction, "__getitem__", _interpreted_getitem))
        if "run" in vars(InterpretedFunction):
            out.append((InterpretedFunction, "run", _jit_run))
    return out


@contextlib.contextmanager
def capture() -> Iterator[list[Launch]]:
    """Record, instead of running, every Triton launch made inside the block (see module doc)."""
    outermost = not _active
    if outermost:
        for cls, attr, replacement in _patches():
            _saved.append((cls, attr, vars(cls).get(attr, _INHERITED)))
            setattr(cls, attr, replacement)
    launches: list[Launch] = []
    _active.append(launches)
    try:
        yield launches
    finally:
        _active.pop()
        if outermost:
            while _saved:
                cls, attr, original = _saved.pop()
                if original is _INHERITED:
                    delattr(cls, attr)
                else:
                    setattr(cls, attr, original)


# -- a host without a device ---------------------------------------------------------------------

class _HostDriver:
    """Stands in for Triton's active driver where none is active (compile-only on a host). Triton
    3.2 (triton-ascend) asks the driver for a benchmarker when ``@triton.autotune`` decorates a
    kernel, so a module with an autotuned kernel cannot even be imported without one. Nothing is
    timed or launched in compile-only: anything beyond that question is refused with a reason."""

    def get_benchmarker(self):
        def refuse(*args, **kwargs):
            raise RuntimeError("compile-only: nothing is timed on the host (no device)")
        return refuse

    def is_active(self) -> bool:
        return False

    def __getattr__(self, name):
        raise RuntimeError(f"compile-only: Triton's driver.{name} needs a device; this host has none")


def _driver_config():
    # ``triton.runtime.driver`` is the module on 3.9 but the DriverConfig object on 3.2.
    return importlib.import_module("triton.runtime.driver").driver


def _no_active_driver() -> bool:
    from triton.backends import backends

    # triton-ascend's driver asks CANN's compiler for its targets (``ccec -print-targets``) and,
    # where CANN is not installed, warns in red "No such file or directory: 'ccec'". On a
    # compile-only host that is the expected answer (nothing here runs on an NPU; bishengir,
    # which compile-only uses, ships with ascendnpu-ir), so that one warning is not shown.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*No such file or directory: 'ccec'")
        return not any(b.driver.is_active() for b in backends.values())


def use_host_driver() -> Optional[dict]:
    """Make Triton's active driver the host stand-in when no real driver is active (a CPU-only
    machine), so that kernel modules import. Returns the driver config's previous state when it
    installed the stand-in (for ``host_driver`` to put back), else None. Call once per
    compile-only process, before implementations are imported."""
    config = _driver_config()
    # Read the state without touching ``active``: on 3.9 reading it creates (and fails to create)
    # the default driver.
    state = dict(vars(config))
    if any(isinstance(v, _HostDriver) for v in state.values()) or not _no_active_driver():
        return None
    config.set_active(_HostDriver())
    return state


@contextlib.contextmanager
def host_driver() -> Iterator[None]:
    """``use_host_driver`` for the duration of a block."""
    previous = use_host_driver()
    try:
        yield
    finally:
        if previous is not None:
            config = _driver_config()
            vars(config).clear()
            vars(config).update(previous)


# -- what an implementation that needs a device looks like on a host-only machine ---------------

_DEVICE_WORDS = re.compile(
    r"not compiled with (?:cuda|npu)|no nvidia driver|no cuda gpus|cuda driver|active drivers"
    r"|torch_npu|\bcann\b|\b(?:cuda|gpu|npu|ascend|device)\b|\bis_cuda\b|\bon (?:the )?cpu\b", re.I)
_DEVICE_ERRORS = (AssertionError, RuntimeError, ValueError, TypeError, ImportError, AttributeError,
                  NotImplementedError)


def needs_device(exc: BaseException) -> Optional[str]:
    """When ``exc`` (raised by an implementation called on host tensors) says it wanted a device,
    a driver or a device library, the reason to report; otherwise None (a real failure)."""
    if not isinstance(exc, _DEVICE_ERRORS):
        return None
    text = f"{type(exc).__name__}: {exc}".strip()
    if not _DEVICE_WORDS.search(text):
        return None
    return text.splitlines()[0][:300]


def capture_call(call: Callable[[], Any]) -> list[Launch]:
    """The launches ``call()`` makes. Raises ``NeedsDevice`` when it stopped because it wanted a
    device (a launch list cut short would compile only part of what a device runs); any other
    exception propagates unchanged."""
    with capture() as launches:
        try:
            call()
        except Exception as exc:
            reason = needs_device(exc)
            if reason is None:
                raise
            done = f" after {len(launches)} captured launch(es)" if launches else " before any launch"
            raise NeedsDevice(f"the implementation needs device tensors or a device runtime{done} "
                              f"(compile-only keeps the inputs on the host): {reason}") from exc
    return launches


def launch_configs(call: Callable[[], Any]) -> Optional[dict]:
    """``{kernel name: {meta name: int or str}}`` of the launches ``call()`` makes (tile sizes,
    warps), captured without running; None when the call fails or launches nothing. For reports
    that show which config a kernel chose (the benchmarks' ``config``)."""
    try:
        launches = capture_call(call)
    except Exception:  # noqa: BLE001 - a config that cannot be captured is just not shown
        return None
    return {ln.name.lstrip("_"): {k: v for k, v in ln.meta.items() if isinstance(v, (int, str))}
            for ln in launches} or None
