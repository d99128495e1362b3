"""How a device run's cases reach xdist's workers: ordered so that cases compiling the same
kernel specialization sit next to each other, and handed out in contiguous ranges (xdist's
work-stealing scheduler) rather than one at a time round robin (its default ``load``).

Why: on a fresh machine a case's first call compiles its kernels (about 1 s each on an H100
host) and the Triton cache on disk serves every later process. Round robin sends neighbouring
cases, which mostly share a specialization (a catalog lists a dtype's or a head dim's cases
together), to different workers at the same moment, and each compiles the same kernel. In
contiguous ranges one worker compiles it and its next cases reuse it.

Every run, on any device, also gets ``tolerate_dead_workers``: commands to a worker that died a
moment ago are dropped instead of ending the run."""
from __future__ import annotations

import os
from typing import Mapping

#: Parameters that are sizes: they select a launch grid, not a kernel specialization.
SIZES = frozenset({"B", "H", "Hq", "Hkv", "S", "Sq", "Skv", "L", "lengths", "s", "keep", "seed"})


def specialization_key(family: str, params: Mapping) -> tuple:
    """What a case's compiled kernels most likely depend on: its family, dtype, head dim and
    its categorical parameters (flags and named variants); sizes are left out."""
    flags = tuple(sorted((k, str(v)) for k, v in params.items()
                         if k not in SIZES and isinstance(v, (bool, str)) and k != "dtype"))
    return (family, str(params.get("dtype", "")), str(params.get("D", "")), flags)


def order_for_compiles(items: list, key_of) -> None:
    """Stable sort of ``items`` in place by ``key_of(item)`` (None: keep such items first, in
    their order): families keep their place relative to each other."""
    first_seen: dict = {}
    keys = []
    for item in items:
        key = key_of(item)
        if key is not None:
            first_seen.setdefault(key[0], len(first_seen))
        keys.append(key)
    order = {id(item): (-1, ()) if key is None else (first_seen[key[0]], key) for item, key in zip(items, keys)}
    items.sort(key=lambda item: order[id(item)])


def tolerate_dead_workers(node) -> None:
    """Let the controller's commands to a worker that has just died fail quietly.

    Why: when two workers die at nearly the same time (a kernel that aborts on every call, under
    ``-n 2`` or more), xdist handles the first death by handing that worker's pending cases to
    the others, and sending them to the second, already dead, raises ``OSError`` inside its
    event loop: the run ends in INTERNALERROR and the first worker's crash is never recorded.
    The cases a failed send assigned stay in the dead worker's pending list, and xdist hands them
    on again when it handles that worker's own death, so dropping the send loses nothing."""
    send = node.sendcommand

    def sendcommand(name, **kwargs):
        try:
            send(name, **kwargs)
        except OSError as exc:
            node.log(f"{name} not sent: the worker is gone ({exc})")

    node.sendcommand = sendcommand


def contiguous_scheduler(config, log):
    """xdist's work-stealing scheduler where the run asked for plain ``load`` (what ``-n N``
    gives); None (xdist's own choice) for any other ``--dist``."""
    if getattr(config.option, "dist", "no") != "load":
        return None
    try:
        from xdist.scheduler import WorkStealingScheduling
    except ImportError:  # xdist < 3.2
        return None
    return WorkStealingScheduling(config, log)


#: Most workers ``-n auto`` starts per visible device in a device run. A device run's case time is
#: mostly CPU work (compiles, inputs, references): on one 16-core H100 host the full profile took
#: 69.6 s at 16 workers and 108.3 s at 8.
WORKERS_PER_DEVICE = 16


def auto_workers(cpus: int, devices: int) -> int:
    """``-n auto`` for a device run: one worker per usable core, at most WORKERS_PER_DEVICE per
    device (more would hold a CUDA context and a case's inputs each for no gain)."""
    return max(1, min(cpus, WORKERS_PER_DEVICE * max(1, devices)))


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
