"""Compile one launch for an Ascend NPU with triton-ascend (3.2.0rc2 ... 3.2.0), no NPU or CANN.

Stages, as the backend (``triton/backends/ascend`` in 3.2.0, ``.../huawei`` in rc2) runs them
inside ``triton.compile``:

| stage (triton's name) | tool | failure class here |
|---|---|---|
| AST -> TTIR (``make_ir``, then ``ttir``) | Triton's own passes | ``frontend`` |
| ``ttadapter`` | ``triton-adapter-opt`` (in the wheel) | ``adapter`` ("[ConvertTritonIRToLinalgIR]") |
| ``npubin`` | ``bishengir-compile`` (``ascendnpuir/bin``), then ``hivmc`` (CANN only) | ``ub_overflow`` / ``bishengir`` ("[ConvertLinalgRToBinary]") |

Without CANN the last stage ends with "Cannot find hivmc under $PATH" / "External hivmc run
fails" after the whole BiShengIR pipeline ran: that counts as a pass, reported as
``last_stage_reached="bishengir (hivmc missing)"``.

To compile without a device, for the duration of one compile:
- the backend module's ``NPUUtils`` (whose ``get_arch()`` builds a CANN extension to ask the
  device for its SoC) is replaced by a stub returning the requested SoC (3.2.0 passes it as
  ``bishengir-compile --target=``; rc2 passes no target at all);
- the backend module's ``subprocess`` is wrapped to record each tool's command, exit status,
  output and time, to apply a timeout, and to add ``--mlir-print-debuginfo`` to
  ``triton-adapter-opt`` so the linalg IR carries ``loc(file:line)`` for ``scalarize``, and
  ``--mlir-disable-threading`` to both MLIR tools that list it (see ``_single_threaded``);
- ``ascendnpuir/bin`` is put on ``PATH`` when ``bishengir-compile`` is not already there.

This module imports nothing from triton at import time (the harness imports it under upstream
Triton too); ``check_grid`` is pure Python.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import re
import shutil
import signal
import subprocess as _real_subprocess
import tempfile
import time
from typing import Any, Iterator, Optional

from . import memory, toolchain
from .frontend import frontend_message, is_frontend_error
from .jitfn import as_jit_function, compiling, kernel_name
from .result import FAIL, PASS, CompileOutcome, trim_message
from .scalarize import count_scalar_accesses, summarize

DEFAULT_SOC = "Ascend910B2"
MAX_PROGRAMS = 65535  # coreDim is a uint16 on the launch path
TOOL_TIMEOUT_S = 600.0
HIVMC_MISSING = "bishengir (hivmc missing)"

_HIVMC = re.compile(r"hivmc", re.I)
_UB = re.compile(r"ub overflow", re.I)
_MIX_MODE = re.compile(r'\bmix_mode\s*=\s*"(\w+)"')
_UB_BITS = re.compile(r"requires\s+(\d+)\s+bits\s+while\s+(\d+)\s+bits\s+available", re.I)


def parse_target(target: str) -> str:
    """"Ascend910B2" or "npu:Ascend910B2" -> "Ascend910B2"."""
    soc = target.strip()
    if soc.lower().startswith("npu:"):
        soc = soc[4:]
    if not re.fullmatch(r"Ascend\w+", soc):
        raise ValueError(f"not an Ascend target: {target!r} (expected e.g. 'Ascend910B2')")
    return soc


def is_npu_target(target: str) -> bool:
    try:
        parse_target(target)
        return True
    except ValueError:
        return False


def check_grid(grid: Any) -> Optional[str]:
    """Ascend launches at most 65535 programs (the product of the grid dims): triton-ascend
    3.2.0 refuses with "grid should be less than 65536!", the runtime with "coreDim ... can't be
    greater than UINT16_MAX". Returns that message for a grid over the limit, else None."""
    dims = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    n = math.prod(int(d) for d in dims)
    if n > MAX_PROGRAMS:
        return (f"grid {tuple(int(d) for d in dims)} launches {n} programs; Ascend allows at most "
                f"{MAX_PROGRAMS} (coreDim is a uint16): launch about as many programs as cores "
                f"and loop inside the kernel")
    return None


def bishengir_bin_dir() -> Optional[str]:
    """``.../ascendnpuir/bin`` of the installed ascendnpu-ir wheel, or None."""
    spec = importlib.util.find_spec("ascendnpuir")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "bin")
    return path if os.path.isdir(path) else None


@functools.lru_cache(maxsize=None)
def _lists_option(tool_path: str, option: str) -> bool:
    try:
        out = _real_subprocess.run([tool_path, "--help"], capture_output=True, timeout=60)
    except (OSError, _real_subprocess.SubprocessError):
        return False
    return option.encode() in out.stdout + out.stderr


#: A CI run on a 2-core machine failed four causal varlen compiles that pass in every run here
#: (30 runs, 3.2.0 and rc2, same wheels): "operand #2 does not dominate this use" and an i64
#: ``arith.constant``, never the same cases twice. MLIR sizes its thread pool by the CPUs the
#: process may run on, not by its CPU quota, so a container can run dozens of pass threads on two
#: cores; a compile-only tier wants the same IR on every machine, so the tools run one thread.
_SINGLE_THREADED_TOOLS = ("triton-adapter-opt", "bishengir-compile")
_NO_THREADS = "--mlir-disable-threading"


def _single_threaded(cmd: list[str]) -> list[str]:
    tool = os.path.basename(cmd[0])
    if (tool in _SINGLE_THREADED_TOOLS and _NO_THREADS not in cmd
            and _lists_option(shutil.which(cmd[0]) or cmd[0], _NO_THREADS)):
        return cmd + [_NO_THREADS]
    return cmd


def _libc_personality():
    """libc's ``personality`` (resolved here, not in a forked child), or None."""
    try:
        import ctypes
        personality = ctypes.CDLL(None, use_errno=True).personality
        personality.argtypes, personality.restype = [ctypes.c_ulong], ctypes.c_int
        return personality
    except (OSError, AttributeError):
        return None


_PERSONALITY = _libc_personality()
_ADDR_NO_RANDOMIZE = 0x0040000


def _no_address_randomization() -> None:
    """In the child before exec: the tool's addresses are the same on every run. Where the
    container forbids it (Docker's default seccomp profile does), the tool runs as it would."""
    if _PERSONALITY is not None:
        current = _PERSONALITY(0xFFFFFFFF)
        if current != -1:
            _PERSONALITY(current | _ADDR_NO_RANDOMIZE)


class _ToolLog:
    """Stands in for the backend module's ``subprocess``: same API, records every ``run``.

    ``fixed_layout``: run the adapter with address randomization off, a memory layout that
    differs from the randomized tries by construction (porting_notes.md,
    "adapter_use_after_free": whether a read of freed memory crashes depends on the layout)."""

    def __init__(self, timeout: float, debuginfo: bool = True, memory_display: bool = True,
                 fixed_layout: bool = False):
        self.calls: list[dict] = []
        self._timeout = timeout
        self._debuginfo = debuginfo
        self._memory_display = memory_display
        self._fixed_layout = fixed_layout

    def __getattr__(self, name):
        return getattr(_real_subprocess, name)

    def run(self, cmd, *args, **kwargs):
        cmd = _single_threaded([str(c) for c in cmd])
        tool = os.path.basename(cmd[0])
        if self._debuginfo and tool == "triton-adapter-opt" and "--mlir-print-debuginfo" not in cmd:
            cmd.append("--mlir-print-debuginfo")
        kwargs.setdefault("timeout", self._timeout)
        entry = {"tool": tool, "cmd": cmd}
        if tool == "triton-adapter-opt":
            # A crash's stack dump without symbolization: one crash under MALLOC_PERTURB_ took
            # 28 s with it and 15 s without.
            kwargs["env"] = {**(kwargs.get("env") or os.environ), "LLVM_DISABLE_SYMBOLIZATION": "1"}
            if self._fixed_layout:
                kwargs["preexec_fn"] = _no_address_randomization
                entry["fixed_layout"] = True
        self.calls.append(entry)
        display_dir = None
        if self._memory_display and tool == "bishengir-compile" and "cwd" not in kwargs:
            # The memory display is written to the working directory, not next to the output.
            display_dir = tempfile.mkdtemp(prefix="attnsuite-ubdisplay-")
            cmd.append("--enable-memory-display")
            kwargs["cwd"] = display_dir
        t0 = time.perf_counter()
        try:
            ret = _real_subprocess.run(cmd, *args, **kwargs)
            entry.update(rc=ret.returncode, stdout=_text(ret.stdout), stderr=_text(ret.stderr))
            return ret
        except _real_subprocess.CalledProcessError as exc:
            entry.update(rc=exc.returncode, stdout=_text(exc.stdout), stderr=_text(exc.stderr))
            raise
        except _real_subprocess.TimeoutExpired as exc:
            entry.update(rc=None, timeout=True, stdout=_text(exc.stdout), stderr=_text(exc.stderr))
            raise
        finally:
            entry["seconds"] = time.perf_counter() - t0
            if display_dir is not None:
                entry["memory"] = memory.read_display(display_dir)
                shutil.rmtree(display_dir, ignore_errors=True)

    def last(self, tool: str) -> Optional[dict]:
        for entry in reversed(self.calls):
            if entry["tool"] == tool:
                return entry
        return None


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


class _FixedSoc:
    """Replaces ``NPUUtils`` during a compile: the SoC comes from the caller, not the device."""

    def __init__(self, soc: str):
        self._soc = soc

    def get_arch(self) -> str:
        return self._soc

    def __getattr__(self, name):
        raise RuntimeError(f"compile-only: NPUUtils.{name} needs an NPU and CANN")


@contextlib.contextmanager
def _compile_only(backend_globals: dict, soc: str, log: _ToolLog) -> Iterator[None]:
    saved = {k: backend_globals[k] for k in ("NPUUtils", "subprocess") if k in backend_globals}
    old_path = os.environ.get("PATH", "")
    if "NPUUtils" in backend_globals:
        backend_globals["NPUUtils"] = lambda: _FixedSoc(soc)
    backend_globals["subprocess"] = log
    bin_dir = bishengir_bin_dir()
    if shutil.which("bishengir-compile") is None and bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + old_path
    try:
        yield
    finally:
        backend_globals.update(saved)
        os.environ["PATH"] = old_path


def _signal_note(rc: Optional[int]) -> str:
    if rc is not None and rc < 0:
        try:
            return f" (killed by {signal.Signals(-rc).name})"
        except ValueError:
            return f" (killed by signal {-rc})"
    return ""


def classify_bishengir(output: str) -> tuple[str, Optional[str]]:
    """From bishengir-compile's output: ("pass", None) when the only problem is the missing
    hivmc, ("fail", "ub_overflow") or ("fail", "bishengir") otherwise."""
    if _UB.search(output):
        return FAIL, "ub_overflow"
    errors = [line for line in output.splitlines()
              if re.search(r"error", line, re.I) and not _HIVMC.search(line)
              and "Failed to run BiShengIR pipeline" not in line]
    if _HIVMC.search(output) and not errors:
        return PASS, None
    return FAIL, "bishengir"


_HIVMC_NOISE = re.compile(r"Cannot find hivmc|Failed to run `hivmc --version`|Failed to detect hivmc "
                          r"version|^\s*(loc\([^)]*\):\s*)+$")


def bishengir_message(output: str) -> str:
    """The error lines first (where the kernel went wrong), then the notes, without the
    missing-hivmc noise every CPU-only run prints."""
    lines = [ln for ln in output.splitlines() if ln.strip() and not _HIVMC_NOISE.search(ln)]
    errors = [ln for ln in lines if re.search(r"error", ln, re.I)
              and "Failed to run BiShengIR pipeline" not in ln]
    rest = [ln for ln in lines if ln not in errors]
    errors.sort(key=lambda ln: bool(re.search(r"Failed to run", ln)))  # specific errors first
    return trim_message("\n".join(errors + rest))


#: Tries per compile where a failure may be the compiler's nondeterminism rather than the
#: kernel's: bishengir's flaky passes (porting_notes.md, "bishengir_flaky") and a tool killed by a
#: signal (porting_notes.md, "adapter_use_after_free": triton-adapter-opt reads freed memory and
#: crashed in 0-3 runs of a hundred here, but on all three compiles of one kernel in a CI run).
#: A deterministic crash fails every try and is recorded as the first failure, so strict xfails
#: keep failing.
FLAKY_TRIES = {"bishengir": 2, "signal": 4}


def _tries(outcome: CompileOutcome) -> int:
    if outcome.outcome != FAIL or "timed out" in outcome.message:
        return 1
    if outcome.stage == "bishengir":
        return FLAKY_TRIES["bishengir"]
    if outcome.stage == "adapter" and (outcome.artifacts.get("tool_rc") or 0) < 0:
        return FLAKY_TRIES["signal"]
    return 1


def compile_link(plan: Any, target: str = DEFAULT_SOC, **options) -> CompileOutcome:
    """Compile one LaunchPlan link for an Ascend SoC ("Ascend910B2"); options as ``compile_once``.

    A failure that may be the compiler's nondeterminism (a ``bishengir`` failure that is not a UB
    overflow or a timeout; the adapter killed by a signal) is compiled again, up to
    ``FLAKY_TRIES``: should a later try pass, the outcome is that pass with
    ``artifacts["flaky"]`` holding the first failure's message, so a nondeterministic compiler
    shows in the records instead of failing a case on one machine and passing it on the next.
    """
    first = compile_once(plan, target, **options)
    seconds = first.seconds
    crashed = first.stage == "adapter"
    for attempt in range(2, _tries(first) + 1):
        # The second try after a crash runs the adapter without address randomization: a
        # layout of its own, in case this machine's randomized ones all crash.
        again = compile_once(plan, target, **options, fixed_layout=crashed and attempt == 2)
        seconds += again.seconds
        if again.outcome != FAIL:
            again.artifacts["flaky"] = first.message
            again.message = (f"compiled on try {attempt}; the first failed: {first.message}\n"
                             f"{again.message}")
            again.seconds = seconds
            return again
    first.seconds = seconds
    return first


def compile_once(plan: Any, target: str = DEFAULT_SOC, *, timeout: float = TOOL_TIMEOUT_S,
                 keep_ir: bool = True, debuginfo: bool = True, memory_display: bool = True,
                 grid_check: bool = True, fixed_layout: bool = False) -> CompileOutcome:
    """Compile one LaunchPlan link for an Ascend SoC ("Ascend910B2"), one try.

    ``timeout``: seconds per external tool run. ``keep_ir``: keep the TTIR and linalg IR text in
    ``artifacts`` ("ttir", "ttadapter"). ``debuginfo``: run the adapter with
    ``--mlir-print-debuginfo`` (source lines in the IR and in bishengir's messages).
    ``memory_display``: run bishengir with ``--enable-memory-display`` (``artifacts["memory"]``,
    see ``memory``). ``grid_check``: fail a launch of more programs than Ascend allows (off when
    the caller checks grids itself, e.g. to reuse one compile for several launches).
    ``fixed_layout``: run the adapter without address randomization (``compile_link``'s second
    try after an adapter crash).
    """
    t0 = time.perf_counter()
    name = kernel_name(plan.kernel)
    soc = parse_target(target)
    version = toolchain.require("ascend", target)
    arts: dict = {"toolchain": f"triton-ascend {version}", "soc": soc, "grid": tuple(plan.grid)}

    def done(outcome, stage, message, reached):
        return CompileOutcome(target=soc, outcome=outcome, stage=stage, message=message,
                              last_stage_reached=reached, artifacts=arts,
                              seconds=time.perf_counter() - t0, kernel=name)

    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    from .specialize import specialize
    from .stages import compile_tracked

    npu_target = GPUTarget("npu", soc, 0)
    backend = make_backend(npu_target)
    backend_globals = type(backend).add_stages.__globals__
    arts["backend"] = os.path.basename(os.path.dirname(backend_globals.get("__file__", "")))
    log = _ToolLog(timeout, debuginfo, memory_display, fixed_layout)
    keep = (lambda s: s in ("ttir", "ttadapter")) if keep_ir else (lambda s: s == "ttadapter")
    with compiling():
        jf = as_jit_function(plan.kernel)
        try:
            spec = specialize(jf, backend, tuple(plan.args), dict(plan.meta))
        except (TypeError, KeyError, ValueError) as exc:
            return done(FAIL, "frontend", f"binding the launch arguments: {type(exc).__name__}: "
                        f"{exc}", "none")
        arts["signature"] = dict(spec.signature)
        with _compile_only(backend_globals, soc, log):
            arts["bishengir_compile"] = shutil.which("bishengir-compile")
            kernel, exc, tracker = compile_tracked(spec.src, npu_target, spec.options, keep=keep)
    arts["stage_seconds"] = dict(tracker.seconds)
    arts["commands"] = [" ".join(c["cmd"]) for c in log.calls]
    shown = (log.last("bishengir-compile") or {}).get("memory")
    if shown:
        arts["memory"] = shown
    for stage_name, text in tracker.outputs.items():
        arts[stage_name] = text
    if "ttadapter" in tracker.outputs:
        mode = _MIX_MODE.search(tracker.outputs["ttadapter"])
        if mode:
            arts["mix_mode"] = mode.group(1)
        accesses = count_scalar_accesses(tracker.outputs["ttadapter"])
        arts["scalar_accesses"] = accesses
        arts["scalar_summary"] = summarize(accesses)
    if not keep_ir:
        arts.pop("ttadapter", None)

    reached = tracker.last_finished or "none"
    if exc is None:
        outcome = done(PASS, None, "", "npubin")
    elif tracker.current is None or tracker.current == "ttir":
        msg = (frontend_message(exc, jf) if is_frontend_error(exc) or tracker.current is None
               else trim_message(str(exc)))
        return done(FAIL, "frontend", msg, reached)
    elif tracker.current == "ttadapter":
        call = log.last("triton-adapter-opt") or {}
        detail = call.get("stderr") or str(exc)
        if call.get("timeout"):
            detail = f"triton-adapter-opt timed out after {timeout:.0f}s\n" + detail
        detail = trim_message(detail)
        first = next((ln.strip() for ln in detail.splitlines() if "error" in ln.lower()), "")
        status = f"triton-adapter-opt exit {call.get('rc')}{_signal_note(call.get('rc'))}"
        arts["tool_rc"] = call.get("rc")
        return done(FAIL, "adapter", f"[ConvertTritonIRToLinalgIR] {first or status}\n{status}\n"
                    f"{detail}", reached)
    elif tracker.current == "npubin":
        call = log.last("bishengir-compile")
        if call is None:  # the stage failed before running the tool (e.g. not installed)
            return done(FAIL, "bishengir", trim_message(str(exc)), reached)
        output = (call.get("stdout") or "") + "\n" + (call.get("stderr") or "")
        arts["tool_rc"] = call.get("rc")
        if call.get("timeout"):
            return done(FAIL, "bishengir", f"bishengir-compile timed out after {timeout:.0f}s",
                        reached)
        verdict, stage = classify_bishengir(output)
        if verdict == PASS:
            hivmc = [ln.strip() for ln in output.splitlines() if "External hivmc run fails" in ln]
            outcome = done(PASS, None, (hivmc or ["Cannot find hivmc under $PATH"])[0], HIVMC_MISSING)
        else:
            bits = _UB_BITS.search(output)
            if bits:
                arts["ub_required_bits"], arts["ub_available_bits"] = map(int, bits.groups())
            return done(FAIL, stage, "[ConvertLinalgRToBinary] " + bishengir_message(output), reached)
    else:
        return done(FAIL, tracker.current, trim_message(str(exc)), reached)

    grid_problem = check_grid(plan.grid) if grid_check else None
    if grid_problem:
        outcome.outcome, outcome.stage, outcome.message = FAIL, "grid", grid_problem
    return outcome
