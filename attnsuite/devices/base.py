"""The one interface every device backend implements.

Only this package knows how to place tensors, wait for a device, or read its memory: the rest
of the harness talks to a ``Device``. A new backend is a new module registered in
``attnsuite.devices``.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional


#: Cached device memory a worker may keep between cases (see ``Device.trim_cache``).
TRIM_BYTES = 4 << 30

class DeviceUnavailable(RuntimeError):
    """The requested device cannot run here; the message says what is missing, in one line."""


class Device:
    kind: str = ""
    #: Environment variable that restricts which devices this process sees (None for cpu).
    visibility_env: str | None = None
    #: Seconds before a hung case is stopped (pytest-timeout), unless --case-timeout says otherwise.
    case_timeout_s: float = 300.0
    #: Bytes overwritten to evict the last-level cache before a cold timing (4x an H100's 50 MB L2).
    flush_bytes: int = 256 * 2**20
    #: Whether kernel timings mean anything here (the interpreter's do not).
    times_kernels: bool = True
    #: Which Triton compile-only needs: "upstream" or "ascend" (None: this device never compiles).
    compile_toolchain: str | None = None

    # -- run policy (class level: read before any device is opened) -------------------------
    @classmethod
    def default_profile(cls, compile_only: bool) -> str:
        """Devices run the full sweep; compile-only runs default to the small shapes."""
        return "quick" if compile_only else "full"

    @classmethod
    def compile_targets(cls, cuda_arch: str, soc: str) -> list[str]:
        """The targets ``--compile-only`` compiles every case for (ValueError: none here)."""
        raise ValueError(f"--compile-only needs --device cuda or --device npu ({cls.kind} never compiles)")

    @classmethod
    def compile_target_options(cls, targets) -> str:
        """The command-line options that name ``targets`` again (for repro commands)."""
        return ""

    def __init__(self, index: int = 0):
        self.index = index

    # -- process set-up (class level: runs before torch or triton is imported) -------------
    @classmethod
    def prepare_environment(cls, environ=os.environ) -> None:
        """Set the variables that must be in place before anything imports triton.

        Accelerators run compiled kernels: an inherited ``TRITON_INTERPRET=1`` would silently
        run their cases in the interpreter on the host, so it is dropped.
        """
        if environ.get("TRITON_INTERPRET") == "1":
            environ.pop("TRITON_INTERPRET")

    @classmethod
    def check_available(cls) -> None:
        """Raise DeviceUnavailable with a one-line reason when this device cannot be used."""

    @classmethod
    def visible_count(cls) -> int:
        return 1

    # -- per-process use ---------------------------------------------------------------------
    def activate(self) -> None:
        """Make this device current for the process (pinning an xdist worker to it)."""

    @property
    def torch_device(self):
        import torch

        return torch.device(self.kind, self.index) if self.kind != "cpu" else torch.device("cpu")

    def place(self, tensor):
        """``tensor`` on this device, strides and storage offset kept: a view of a larger buffer
        (K/V sliced from a longer cache, q/k/v of one fused QKV tensor) arrives as the same view,
        with whatever the buffer holds between its elements, not as a contiguous copy."""
        import torch

        target = self.torch_device
        if not isinstance(tensor, torch.Tensor) or tensor.is_contiguous() or tensor.device == target:
            return tensor.to(target)
        storage = tensor.untyped_storage()
        flat = torch.empty(0, dtype=tensor.dtype).set_(storage, 0, (storage.nbytes() // tensor.element_size(),))
        return flat.to(target).as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())

    def synchronize(self) -> None:
        pass

    def memory_stats(self) -> dict:
        return {}

    def reset_peak_memory(self) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def reserved_bytes(self) -> int:
        """What this process's caching allocator holds on the device (0 where there is none)."""
        return 0

    def trim_cache(self) -> None:
        """Give cached device memory back when this process holds more than ``TRIM_BYTES``:
        the allocator keeps what a large case freed, and eight workers each keeping one large
        case's worth left a later large case nothing to run in, even alone (an OOM on an 80 GB
        H100 in the full profile)."""
        if self.reserved_bytes() > TRIM_BYTES:
            self.empty_cache()

    def name(self) -> str:
        return self.kind

    def driver(self) -> str:
        return ""

    def uuid(self) -> str | None:
        """The device's UUID, which tells two cards of one host apart across runs (an index
        does not: it follows the visible-devices variable); None where there is none."""
        return None

    def label(self) -> str:
        return self.kind if self.kind == "cpu" else f"{self.kind}:{self.index}"

    # -- sharing one device between xdist workers ---------------------------------------------
    def lock_path(self, what: str) -> Path:
        return Path(tempfile.gettempdir()) / f"attnsuite-{what}-{self.kind}{self.index}.lock"

    @contextlib.contextmanager
    def use(self, exclusive: bool = False) -> Iterator[None]:
        """Hold the device for one case: shared with the other workers on it, or exclusive (a
        retry after running out of memory waits until their cases finish and holds off new
        ones). Advisory file locks per device; the host (cpu) needs none. The gate lets a
        waiting exclusive holder in: new shared holders queue behind it instead of starving it."""
        if self.kind == "cpu":
            yield
            return
        mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        with open(self.lock_path("gate"), "a+") as gate, open(self.lock_path("use"), "a+") as use:
            fcntl.flock(gate, mode)
            try:
                fcntl.flock(use, mode)
            finally:
                if not exclusive:
                    fcntl.flock(gate, fcntl.LOCK_UN)
            try:
                yield
            finally:
                self.trim_cache()
                fcntl.flock(use, fcntl.LOCK_UN)
                if exclusive:
                    fcntl.flock(gate, fcntl.LOCK_UN)

    # -- benchmarks ----------------------------------------------------------------------------
    def l2_flusher(self) -> Optional[Callable[[], object]]:
        """A callable that evicts the device's last-level cache (None where timings are not
        benchmarks: the interpreter)."""
        import torch

        scratch = torch.empty(self.flush_bytes // 4, dtype=torch.int32, device=self.torch_device)
        return scratch.zero_

    def vendor_baselines(self, problem: dict) -> dict[str, tuple]:
        """The vendor's attention over a dense problem: name -> (callable, note) or (None, why)."""
        return {}

    # -- timing ------------------------------------------------------------------------------
    def _torch_module(self):
        """The torch device namespace with ``Event``/``synchronize`` (``torch.cuda``, ``torch.npu``);
        None where there is none (cpu, compile-only hosts), which makes ``time_events`` use the
        wall clock."""
        return None

    def time_events(self, fn: Callable[[], object], *, warmup: int = 3, repeat: int = 10,
                    before: Optional[Callable[[], object]] = None) -> list[float]:
        """Milliseconds of each of ``repeat`` calls of ``fn()``, after ``warmup`` untimed calls.
        ``before`` (e.g. an L2 flush) runs ahead of every timed call, outside its events.

        Accelerators bracket every call with a pair of timing events and read them all after one
        final synchronize, so the device queue is not drained between calls. Without a device
        namespace the times are ``time.perf_counter`` wall clock: on cpu that times the Triton
        interpreter, which says nothing about a kernel's speed.
        """
        if warmup < 0 or repeat < 1:
            raise ValueError(f"time_events: need warmup >= 0 and repeat >= 1, got {warmup} and {repeat}")
        for _ in range(warmup):  # first calls compile: keep them out of the timed region
            fn()
        mod = self._torch_module()
        if mod is None:
            times = []
            for _ in range(repeat):
                if before is not None:
                    before()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            return times
        self.synchronize()
        pairs = []
        for _ in range(repeat):
            start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
            if before is not None:
                before()
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        self.synchronize()  # elapsed_time needs both events completed
        return [start.elapsed_time(end) for start, end in pairs]


def worker_number(worker_id: str | None) -> int:
    """'gw3' -> 3; no xdist (None or 'master') -> 0."""
    if not worker_id or not worker_id.startswith("gw"):
        return 0
    return int(worker_id[2:])


def pick_index(worker_id: str | None, visible: int) -> int:
    """xdist worker gwN runs on visible device N mod visible (device 0 without xdist)."""
    if visible < 1:
        raise DeviceUnavailable("no device visible")
    return worker_number(worker_id) % visible
