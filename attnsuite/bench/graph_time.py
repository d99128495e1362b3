"""Device time by graph replay: the call is captured once in a CUDA graph (torch_npu's NPUGraph
on NPU) and replayed, so no host time (Python, validation, launch) can land between the timing
events: the events measure only what the device does.

Cold L2 (the default, the same for every line of a table): each timed replay runs ``k`` rounds
of ``flush, call`` captured together, and a second graph of ``k`` flushes alone is replayed
right after; a call's device time is the difference divided by ``k``. Why this and not a flush
before one replayed call: graph launch has a device-side cost of a few microseconds, which
would sit inside the events of every sample, a visible bias on a 10 us decode kernel; inside
one graph it is paid once per ``k`` calls and cancels in the difference. ``k`` is chosen so a
replay lasts about ``TARGET_MS`` (at most ``MAX_CALLS``): long enough that the host, which
enqueues every replay far ahead of the device, never leaves the device idle inside the events.

Warm L2: ``k`` calls back to back in one graph, the replay time divided by ``k``.

A call that synchronizes, reads device values on the host or copies from pageable host memory
cannot be captured: it is first run once with the backend's sync debug mode set to "error"
(a failed capture can leave torch's RNG in capture state, so such calls never get that far),
and any capture error becomes ``CaptureFailed``; ``timing.device_time`` then falls back to the
profiler.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Optional

from .stats import CaptureFailed, DeviceTime, summarize

TARGET_MS = 2.0
MAX_CALLS = 16
#: Captured flush-only graphs by (flush callable, rounds): the same for every call timed cold on
#: a device (the kernel, each baseline, every case of the worker), so captured once and replayed
#: from then on. The flush's scratch buffer stays alive with its key.
_FLUSH_GRAPHS: dict = {}


class GraphBackend:
    """The graph API of one torch device module (``torch.cuda``, or ``torch.npu`` with
    torch_npu); tests substitute a fake with the same methods."""

    def __init__(self, mod, kind: str):
        self.mod, self.kind = mod, kind
        self.graph_cls = getattr(mod, "CUDAGraph", None) or getattr(mod, "NPUGraph", None)
        if self.graph_cls is None or not hasattr(mod, "graph"):
            raise CaptureFailed(f"{kind}: this torch has no device graphs")
        self.method = "cudagraph" if kind == "cuda" else f"{kind}-graph"

    def synchronize(self) -> None:
        self.mod.synchronize()

    def event(self):
        return self.mod.Event(enable_timing=True)

    @contextlib.contextmanager
    def side_stream(self):
        """Warm-up on a side stream, as graph capture wants (lazy inits happen off the capture)."""
        s = self.mod.Stream()
        s.wait_stream(self.mod.current_stream())
        with self.mod.stream(s):
            yield
        self.mod.current_stream().wait_stream(s)

    @contextlib.contextmanager
    def strict_syncs(self):
        """Synchronizing calls raise instead of passing silently (torch's sync debug mode)."""
        setter = getattr(self.mod, "set_sync_debug_mode", None)
        getter = getattr(self.mod, "get_sync_debug_mode", None)
        if setter is None or getter is None:
            yield
            return
        previous = getter()
        setter("error")
        try:
            yield
        finally:
            setter(previous)

    def capture(self, body: Callable[[], None]):
        g = self.graph_cls()
        with self.mod.graph(g):
            body()
        return g


def backend_for(device) -> GraphBackend:
    mod = device._torch_module() if device.kind != "cpu" else None
    if mod is None:
        raise CaptureFailed(f"{device.kind}: no device graphs")
    return GraphBackend(mod, device.kind)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:200]


def capture(backend: GraphBackend, body: Callable[[], None]):
    try:
        return backend.capture(body)
    except Exception as exc:  # noqa: BLE001 - any capture error means "not capturable"
        raise CaptureFailed(_first_line(exc)) from None


def check_capturable(backend: GraphBackend, fn: Callable[[], object]) -> None:
    """Run ``fn`` once with synchronizing calls turned into errors."""
    try:
        with backend.side_stream(), backend.strict_syncs():
            fn()
        backend.synchronize()
    except Exception as exc:  # noqa: BLE001
        raise CaptureFailed(f"synchronizes ({_first_line(exc)})") from None


def replay_ms(backend: GraphBackend, graphs: list, runs: int) -> list[list[float]]:
    """Milliseconds of ``runs`` replays of each graph, replays of the graphs interleaved, all
    enqueued before one final synchronize."""
    pairs = []
    for _ in range(runs):
        row = []
        for g in graphs:
            a, b = backend.event(), backend.event()
            a.record()
            g.replay()
            b.record()
            row.append((a, b))
        pairs.append(row)
    backend.synchronize()
    return [[a.elapsed_time(b) for a, b in row] for row in pairs]


def calls_per_replay(call_ms: float, flush_ms: float) -> int:
    per = max(call_ms, 0.0) + max(flush_ms, 0.0)
    if per <= 0:
        return MAX_CALLS
    return max(1, min(MAX_CALLS, int(TARGET_MS / per)))


def cold_samples(g_calls_ms: list[float], g_flush_ms: list[float], k: int) -> list[float]:
    """Per-call device time of each replay pair: (flush+call rounds - flush rounds) / k."""
    return [(a - b) / k for a, b in zip(g_calls_ms, g_flush_ms)]


def _flush_graph(backend: GraphBackend, flush: Callable[[], None], k: int):
    key = (flush, k)
    if key not in _FLUSH_GRAPHS:
        def body():
            for _ in range(k):
                flush()
        _FLUSH_GRAPHS[key] = capture(backend, body)
    return _FLUSH_GRAPHS[key]


def graph_time(device, fn: Callable[[], object], *, flush: Optional[Callable[[], None]],
               runs: int = 30, backend: Optional[GraphBackend] = None) -> DeviceTime:
    """Device time of ``fn`` by graph replay; cold L2 when ``flush`` is given, else warm.
    Raises CaptureFailed when ``fn`` cannot be captured."""
    backend = backend or backend_for(device)
    check_capturable(backend, fn)
    with backend.side_stream():
        fn()
        if flush is not None:
            flush()
    backend.synchronize()

    def rounds(k: int, with_call: bool):
        def body():
            for _ in range(k):
                if flush is not None:
                    flush()
                if with_call:
                    fn()
        return body

    # One round first, to choose k (one replay settles it for a call longer than a replay's
    # target: k is 1 whatever the others would say).
    g1 = capture(backend, rounds(1, True))
    graphs = [g1] + ([_flush_graph(backend, flush, 1)] if flush is not None else [])
    est = replay_ms(backend, graphs, 1)
    if est[0][0] < TARGET_MS:
        est += replay_ms(backend, graphs, 2)
    if flush is not None:
        call_ms = min(a - b for a, b in est)
        flush_ms = min(b for _, b in est)
    else:
        call_ms, flush_ms = min(a for (a,) in est), 0.0
    k = calls_per_replay(call_ms, flush_ms)
    if k > 1:
        if hasattr(g1, "reset"):
            g1.reset()
        graphs = [capture(backend, rounds(k, True))]
        if flush is not None:
            graphs.append(_flush_graph(backend, flush, k))
    times = replay_ms(backend, graphs, runs)
    if flush is not None:
        samples = cold_samples([t[0] for t in times], [t[1] for t in times], k)
    else:
        samples = [t[0] / k for t in times]
    reset = getattr(graphs[0], "reset", None)  # the call's graph; the flush graph is kept for the next call
    if reset is not None:
        reset()
    note = f"{k} calls per replay"
    return DeviceTime(summarize(samples), backend.method, "cold" if flush is not None else "warm", note)
