"""Run ``triton.compile`` while recording which backend stage is running and what each stage
produced, so a failure can be pinned to a stage instead of guessed from its message.

``triton.compile`` builds its backend with the module-level ``make_backend`` of
``triton.compiler.compiler`` and asks it for its stages (``add_stages``). For the duration of one
call that function is replaced by one that wraps every stage; nothing else changes, and the
original is restored afterwards. (Not thread-safe: compile from one thread per process.)
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator, Optional


class StageTracker:
    def __init__(self, keep: Callable[[str], bool] = lambda name: False):
        self.started: list[str] = []       # stage names in the order they began
        self.finished: list[str] = []      # stage names that returned
        self.outputs: dict[str, str] = {}  # text of the stages ``keep`` selects
        self.seconds: dict[str, float] = {}
        self._keep = keep

    @property
    def current(self) -> Optional[str]:
        """The stage that began last (the failing one after an exception), None before any."""
        return self.started[-1] if self.started else None

    @property
    def last_finished(self) -> Optional[str]:
        return self.finished[-1] if self.finished else None

    def wrap(self, name: str, fn: Callable) -> Callable:
        def stage(src, metadata):
            self.started.append(name)
            t0 = time.perf_counter()
            try:
                out = fn(src, metadata)
            finally:
                self.seconds[name] = time.perf_counter() - t0
            self.finished.append(name)
            if self._keep(name):
                self.outputs[name] = out if isinstance(out, str) else str(out)
            return out
        return stage


@contextlib.contextmanager
def tracked(keep: Callable[[str], bool] = lambda name: False) -> Iterator[StageTracker]:
    from triton.compiler import compiler as compiler_module

    tracker = StageTracker(keep)
    original = compiler_module.make_backend

    def make_backend(target):
        backend = original(target)
        add_stages = backend.add_stages

        def tracking_add_stages(stages, options, *rest, **kw):
            add_stages(stages, options, *rest, **kw)
            for name, fn in list(stages.items()):
                stages[name] = tracker.wrap(name, fn)

        backend.add_stages = tracking_add_stages
        return backend

    compiler_module.make_backend = make_backend
    try:
        yield tracker
    finally:
        compiler_module.make_backend = original


def compile_tracked(src: Any, target: Any, options: dict,
                    keep: Callable[[str], bool] = lambda name: False):
    """``triton.compile(src, target=target, options=options)`` with stage tracking.

    Returns ``(compiled_kernel_or_None, exception_or_None, tracker)``; never raises for a
    compile failure.
    """
    import triton

    with tracked(keep) as tracker:
        try:
            return triton.compile(src, target=target, options=options), None, tracker
        except Exception as exc:  # noqa: BLE001 - every compile failure is a result here
            return None, exc, tracker
