"""Launch configs per device: the fastest of a few candidates, measured once and cached on disk.

A kernel's planner calls ``pick(kernel, key, candidates, build, device)``. The first candidate
is the hand-picked default (the one the Ascend compile-only tier and the interpreter always
use). On a CUDA device:

* a config cached for (device name, kernel, key) is used as is;
* with ``settings.autotune`` (``--autotune``), a missing key is tuned: every
  candidate is built, launched and timed (device events, L2 flushed), the fastest is written
  to the cache and used;
* otherwise the default is used.

The cache is JSON at ``ATTNSUITE_TUNE_CACHE`` (default ``~/.cache/attnsuite/tune.json``),
keyed by ``torch.cuda.get_device_name``, so a cache carried to another GPU model is ignored.
Writers merge under a file lock (xdist workers tune side by side). Tuning never changes
numerics a conformance case can see beyond the tile order of fp32 accumulation.
"""
from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Callable, Optional

import torch

from . import settings

CACHE_ENV = "ATTNSUITE_TUNE_CACHE"
_FLUSH_BYTES = 256 * 2**20

_cache: Optional[dict] = None
_flush: dict = {}
#: (device, kernel, key) -> (config, source): a decode call must stay far cheaper than its kernel
#: (~15 us), so a repeat call costs one dict lookup, no cache file or device query.
_memo: dict = {}
_names: dict = {}


def cache_path() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "attnsuite" / "tune.json")


def autotune_enabled() -> bool:
    return settings.current().autotune


def _load() -> dict:
    global _cache
    if _cache is None:
        try:
            _cache = json.loads(cache_path().read_text())
        except (OSError, ValueError):
            _cache = {}
    return _cache


def _store(device_name: str, kernel: str, key: str, entry: dict) -> None:
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            try:
                disk = json.loads(path.read_text())
            except (OSError, ValueError):
                disk = {}
            disk.setdefault(device_name, {}).setdefault(kernel, {})[key] = entry
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(disk, indent=1, sort_keys=True))
            tmp.replace(path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _load().setdefault(device_name, {}).setdefault(kernel, {})[key] = entry


def _time_ms(device: torch.device, run: Callable[[], None], reps: int = 10) -> float:
    """Median device-event milliseconds of ``run`` with L2 flushed before each call."""
    if device not in _flush:
        _flush[device] = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    flush = _flush[device]
    run()  # compile
    torch.cuda.synchronize(device)
    pairs = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run()
        b.record()
        pairs.append((a, b))
    torch.cuda.synchronize(device)
    times = sorted(a.elapsed_time(b) for a, b in pairs)
    return times[len(times) // 2]


def pick(kernel: str, key: tuple, candidates: Callable[[], list[dict]],
         build: Callable[[dict], object], device: torch.device, *, live: bool) -> tuple[dict, str]:
    """(config, where it came from: "default" | "cache" | "tuned").

    ``candidates()`` lists the configs, the default first. ``live`` is False under the
    interpreter and for compile-only's CPU tensors: the default is used. ``build(cfg)`` returns
    the LaunchPlan of one candidate, which the tuner launches and times.
    """
    if not live or device.type != "cuda":
        return dict(candidates()[0]), "default"
    memo_key = (device, kernel, key)
    hit = _memo.get(memo_key)
    if hit is None:
        hit = _memo[memo_key] = _choose(kernel, key, candidates, build, device)
    return dict(hit[0]), hit[1]


def _choose(kernel, key, candidates, build, device) -> tuple[dict, str]:
    if device not in _names:
        _names[device] = torch.cuda.get_device_name(device)
    name = _names[device]
    key_s = "/".join(str(k) for k in key)
    entry = _load().get(name, {}).get(kernel, {}).get(key_s)
    if entry is not None:
        return entry["config"], "cache"
    options = candidates()
    if not autotune_enabled() or len(options) == 1:
        return options[0], "default"
    from ._checks import run_plan

    timings = []
    for cfg in options:
        try:
            plan = build(dict(cfg))
            timings.append((_time_ms(device, lambda: run_plan(plan)), cfg))
        except Exception as exc:  # noqa: BLE001 - a candidate that does not fit (shared memory) is skipped
            timings.append((float("inf"), {**cfg, "error": type(exc).__name__}))
    best = min(timings, key=lambda t: t[0])[1]
    if "error" in best:
        return options[0], "default"
    _store(name, kernel, key_s, {"config": best, "candidates_ms": [
        [round(ms, 5) if ms != float("inf") else None, cfg] for ms, cfg in timings]})
    return best, "tuned"
