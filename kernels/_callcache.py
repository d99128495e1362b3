"""The lean call path: what a wrapper remembers about a call it has already validated and
planned, so an identical repeat call (a decode step in a serving loop, a benchmark iteration)
costs a key lookup and the launches.

A call's key is everything validation and planning look at except data: each tensor's shape,
strides, dtype, device and whether its address is 16-byte aligned (what Triton specializes a
pointer on), the scalar arguments with their types, also inside tuples and lists (``True``,
``1`` and ``1.0`` differ, as do ``(64, 64)`` and ``(64.0, 64)``: equal values that validation
tells apart by type), and the
settings the planners read. Validation is pure in those, so a key seen before was valid; only
what depends on addresses (an output aliasing an input) is checked again on every call, with
the same messages. A bad input therefore never reaches a cached entry: it has a key no valid
call had, and takes the full path, which raises as it always did.

An entry (``Bound``) is the plan's launch chain with every tensor argument turned into a slot:
the call's tensors (by position, in the order the wrapper passes them), or workspace the plan
allocated (split-KV partials, zeroed merge tickets). Workspace is kept per CUDA stream, so
calls on different streams never share it; during graph capture it is allocated fresh (the
graph owns it). Every other argument is fixed by the key. The launches go through
``kernels._launcher``: the compiled kernel directly on CUDA, the JIT elsewhere.

Bypassed while compile-only captures launches or plans for host tensors
(``settings.host_compile``): those must see every plan.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import torch

from . import _checks, settings
from ._launcher import _ASK, chain_target, launch_of, param_values

#: Entries per wrapper; the oldest goes first beyond it (shapes of a serving loop are few).
LIMIT = 256


_ENV = getattr(os.environ, "_data", None)
_INTERPRET = os.environ.encodekey("TRITON_INTERPRET") if _ENV is not None else None


def interpret_flag():
    """``TRITON_INTERPRET`` as it is now (compile-only unsets it for a while): read from the
    environment's own dict, since ``os.environ.get`` of a missing name costs microseconds."""
    if _ENV is not None:
        return _ENV.get(_INTERPRET)
    return os.environ.get("TRITON_INTERPRET")


def active() -> bool:
    return _checks._captured is None and not settings.current().host_compile


def tensor_key(t: torch.Tensor) -> tuple:
    return (t.shape, t.stride(), t.dtype, t.device, not t.data_ptr() & 15)


_SEQUENCES = (tuple, list)


def typed(value):
    """A scalar argument as a key: its type beside its value, recursively through tuples and
    lists (Python's ``==`` makes ``1``, ``1.0`` and ``True`` one dict key)."""
    if isinstance(value, _SEQUENCES):
        # Leaves inline: a shape or block shape is one call, not one per entry.
        return (type(value), tuple([typed(v) if isinstance(v, _SEQUENCES) else (type(v), v)
                                    for v in value]))
    return (type(value), value)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream_of(device: torch.device):
    """The current raw stream of a CUDA device, None elsewhere (no per-stream workspace)."""
    if device.type == "cpu":
        return 0
    if device.type != "cuda":
        return None
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


#: int32 merge tickets per device, zeroed once outside any capture, that calls captured into a
#: graph take their tickets from: a ticket allocated while capturing is a memset node the graph
#: runs before every replay (~1.2 us of device time on the H100, a tenth of a short decode).
#: Each captured call gets its own slice, never handed out again (the graph keeps using it, and
#: the kernels leave it at zero); when the pool is spent, tickets are allocated as before. 4 MB:
#: a benchmark line captures a call ~17 times, with up to B * Hq tickets each.
CAPTURE_TICKETS = 1 << 20
_tickets: dict = {}  # device -> [pool, next free offset]


def reserve_tickets(device: torch.device) -> None:
    """Allocate the device's ticket pool (outside a capture; no-op off CUDA or when it exists)."""
    if device.type == "cuda" and device not in _tickets and not _capturing(device):
        _tickets[device] = [torch.zeros(CAPTURE_TICKETS, dtype=torch.int32, device=device), 0]


def captured_tickets(device: torch.device, shape: tuple) -> Optional[torch.Tensor]:
    """A zeroed int32 slice of ``shape`` from the pool, 16-byte aligned like a fresh allocation
    (kernels are specialized on pointer alignment), or None (no pool, or spent)."""
    pool = _tickets.get(device)
    n = 1
    for d in shape:
        n *= int(d)
    if pool is None or pool[1] + n > CAPTURE_TICKETS:
        return None
    start = pool[1]
    pool[1] = start + -(-max(n, 1) // 4) * 4
    return pool[0][start:start + n].view(shape)


class Bound:
    """A launch chain with its tensors as slots; see the module docstring."""

    __slots__ = ("launches", "spec", "owned", "direct_chain")

    def __init__(self, launches: list, spec: tuple):
        self.launches = launches       # [(Launch, template values, ((position, source), ...))]
        self.spec = spec               # workspace: ((shape, dtype, zero), ...)
        self.owned: dict = {}          # stream -> workspace tensors
        # Several compiled launches: the device and stream are asked once for all of them.
        self.direct_chain = len(launches) > 1 and any(step.compiled is not None for step, _, _ in launches)

    def _workspace(self, device: torch.device) -> tuple:
        stream = _stream_of(device)
        capturing = _capturing(device)
        if stream is not None and not capturing:
            ws = self.owned.get(stream)
            if ws is not None:
                return ws
        ws = tuple(self._fresh(device, shape, dtype, zero, capturing) for shape, dtype, zero in self.spec)
        if stream is not None and not capturing:
            self.owned[stream] = ws
        return ws

    @staticmethod
    def _fresh(device, shape, dtype, zero, capturing) -> torch.Tensor:
        if zero and capturing and dtype == torch.int32:
            t = captured_tickets(device, shape)
            if t is not None:
                return t
        return (torch.zeros if zero else torch.empty)(shape, dtype=dtype, device=device)

    def adopt(self, device: torch.device, tensors: tuple) -> None:
        """The first call's workspace serves later calls on its stream (not if it belongs to a
        graph being captured). A plan with tickets reserves the device's capture pool."""
        stream = _stream_of(device)
        if stream is not None and not _capturing(device):
            self.owned[stream] = tensors
            if any(zero for _, _, zero in self.spec):
                reserve_tickets(device)

    def launch(self, tensors: tuple, launcher=_checks.DEFAULT_LAUNCH) -> None:
        """Launch again with this call's ``tensors``. ``launcher`` is the wrapper module's
        ``launch``: when it (or ``_checks.launch``) has been replaced, e.g. by a test that
        refuses launches, the rebuilt plan goes through the replacement instead."""
        sources = tensors + self._workspace(tensors[0].device) if self.spec else tensors
        if launcher is not _checks.DEFAULT_LAUNCH or _checks.launch is not _checks.DEFAULT_LAUNCH:
            replaced = launcher if launcher is not _checks.DEFAULT_LAUNCH else _checks.launch
            replaced(self._plan(sources))
            return
        where = chain_target() if self.direct_chain else _ASK
        for step, template, slots in self.launches:
            values = template.copy()
            for pos, src in slots:
                values[pos] = sources[src]
            step.fire(values, where)

    def _plan(self, sources: tuple) -> _checks.LaunchPlan:
        plan = None
        for step, template, slots in reversed(self.launches):
            values = template.copy()
            for pos, src in slots:
                values[pos] = sources[src]
            plan = _checks.LaunchPlan(kernel=step.kernel, grid=step.grid, args=tuple(values[:step.n_args]),
                                      meta=dict(step.meta), then=plan)
        return plan


def _bind(plan: _checks.LaunchPlan, tensors: tuple, live: bool, launcher) -> Optional[Bound]:
    """Launch ``plan`` through ``launcher`` and return it as a ``Bound``, or None when one of
    its tensor arguments cannot be told apart by position (the same tensor passed as two
    arguments, or a tensor the wrapper did not name and the plan does not list among its
    ``constants``) or the launcher said nothing."""
    workspace: list = []
    for p in plan.chain():
        for t, zero in p.workspace:
            if not any(t is w for w, _ in workspace):
                workspace.append((t, zero))
    sources = tensors + tuple(w for w, _ in workspace)
    compiled = launcher(plan)
    steps = list(plan.chain())
    if not isinstance(compiled, list) or len(compiled) != len(steps):
        return None
    if live and any(c is None for c in compiled):  # recorded by a launch capture, not launched
        return None
    launches, ok = [], True
    for p, c in zip(steps, compiled):
        values = param_values(p.kernel, p.args, p.meta)
        step = launch_of(p.kernel, p.grid, p.args, p.meta, c, live)
        if values is None:
            step.compiled, values = None, list(p.args)
        template, slots = [], []
        for pos, value in enumerate(values):
            if isinstance(value, torch.Tensor) and any(value is c for c in p.constants):
                template.append(value)
            elif isinstance(value, torch.Tensor):
                hits = [i for i, s in enumerate(sources) if s is value]
                ok = ok and len(hits) == 1
                slots.append((pos, hits[0] if hits else -1))
                template.append(None)
            else:
                template.append(value)
        launches.append((step, template, tuple(slots)))
    if not ok or any(not w.is_contiguous() for w, _ in workspace):
        return None
    bound = Bound(launches, tuple((tuple(w.shape), w.dtype, zero) for w, zero in workspace))
    if workspace:
        bound.adopt(tensors[0].device, tuple(w for w, _ in workspace))
    return bound


class CallCache:
    """One wrapper's validated keys, each with its bound plans by ``extra`` (values read from
    the data that change the plan, e.g. the longest sequence; ``()`` for most wrappers)."""

    def __init__(self, name: str, limit: int = LIMIT):
        self.name, self.limit = name, limit
        self.entries: dict = {}

    def key(self, tensors: Sequence, optional: Sequence = (), scalars: Sequence = ()) -> Optional[tuple]:
        """The call's key, or None (full path, nothing remembered) when caching is off or an
        argument is not what a valid call passes (validation then says what is wrong)."""
        if not active():
            return None
        try:
            return (settings.current(), interpret_flag(),
                    tuple([tensor_key(t) for t in tensors]),
                    tuple([None if t is None else tensor_key(t) for t in optional]),
                    tuple([typed(s) if isinstance(s, _SEQUENCES) else (type(s), s) for s in scalars]))
        except Exception:  # noqa: BLE001 - not a tensor: the full path raises
            return None

    def lookup(self, key: Optional[tuple]) -> Optional[dict]:
        """The bound plans of a key that passed validation before, else None (also for an
        unhashable scalar, which validation then rejects)."""
        if key is None:
            return None
        try:
            return self.entries.get(key)
        except TypeError:
            return None

    def validated(self, key: Optional[tuple]) -> Optional[dict]:
        """Remember that ``key`` passed validation; returns its (empty) plans (None: no key)."""
        if key is None:
            return None
        slot: dict = {}
        try:
            _put(self.entries, key, slot, self.limit)
        except TypeError:
            return None
        return slot

    def run(self, slot: Optional[dict], extra, plan: _checks.LaunchPlan, tensors: tuple,
            live: bool, launcher=_checks.DEFAULT_LAUNCH) -> None:
        """Launch ``plan`` (through the wrapper module's ``launch``, or ``_checks.launch`` if
        that was replaced) and remember it for the next identical call. Under a launch capture
        (compile-only) the plan is only recorded, as before."""
        if launcher is _checks.DEFAULT_LAUNCH:
            launcher = _checks.launch
        if slot is None or not active():
            launcher(plan)
            return
        bound = _bind(plan, tensors, live, launcher)
        if bound is not None:
            _put(slot, extra, bound, self.limit)

    def clear(self) -> None:
        self.entries.clear()


def _put(d: dict, key, value, limit: int) -> None:
    if key not in d and len(d) >= limit:
        d.pop(next(iter(d)))
    d[key] = value
