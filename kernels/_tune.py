"""Launch configs per device: a shipped, reviewed table first, then the user's cache, then
(with ``--autotune``) the fastest of a few candidates, measured once and cached on disk.

A kernel's planner calls ``pick(kernel, key, candidates, build, device)``. The first candidate
is the hand-picked default (the one the Ascend compile-only tier and the interpreter always
use). On a CUDA device, in this order:

* ``table``: the config shipped in ``kernels/tuned/<device name>.json`` for (kernel, key): what
  a fresh machine gets with no cache and no flags, so published figures are reproducible. The
  tables are written by ``scripts/tune_table.py`` on the GPU they are named after and reviewed
  like code; tuning a new GPU is how one is added;
* ``cache``: the user's cache (``settings.tune_cache``, default ``~/.cache/attnsuite/tune.json``);
* ``tuned``: with ``settings.autotune`` (``--autotune``), every candidate is built, launched and
  timed (device events, L2 flushed), the fastest is written to the cache and used;
* ``default``: otherwise the first candidate.

Table and cache are keyed by ``torch.cuda.get_device_name``, so a config measured on another
GPU model is never used. Cache writers merge under a file lock (xdist workers tune side by
side). Tuning never changes numerics a conformance case can see beyond the tile order of fp32
accumulation.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

from . import settings

_FLUSH_BYTES = 256 * 2**20
TABLE_DIR = Path(__file__).resolve().parent / "tuned"
SOURCES = ("table", "cache", "tuned", "default")

_cache: Optional[dict] = None
_tables: dict = {}
_flush: dict = {}
#: (device, kernel, key) -> (config, source): a decode call must stay far cheaper than its kernel
#: (~10 us), so a repeat call costs one dict lookup, no table/cache file or device query.
_memo: dict = {}
_names: dict = {}
#: Set by ``retuning()``: table and cache are skipped, every key is tuned, results land here.
_retune: Optional[dict] = None


def cache_path() -> Path:
    configured = settings.current().tune_cache
    return Path(configured) if configured else Path.home() / ".cache" / "attnsuite" / "tune.json"


def table_path(device_name: str, directory: Path = TABLE_DIR) -> Path:
    """``NVIDIA H100 80GB HBM3`` -> ``kernels/tuned/NVIDIA_H100_80GB_HBM3.json``."""
    return Path(directory) / (re.sub(r"[^A-Za-z0-9]+", "_", device_name).strip("_") + ".json")


def read_table(device_name: str, directory: Path = TABLE_DIR) -> dict:
    """The shipped table of one GPU model: ``{kernel: {key: {"config": ..., ...}}}`` ({} if none,
    or if the file names another device)."""
    path = table_path(device_name, directory)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if data.get("device") != device_name:
        return {}
    return data.get("kernels", {})


def _table(device_name: str) -> dict:
    if device_name not in _tables:
        _tables[device_name] = read_table(device_name)
    return _tables[device_name]


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
    if _retune is not None:
        _retune.setdefault(kernel, {})[key] = entry
        return
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


@contextlib.contextmanager
def retuning() -> Iterator[dict]:
    """Inside: every kernel shape a CUDA call plans is tuned afresh (shipped table and user
    cache ignored, nothing written to the cache) and collected in the yielded
    ``{kernel: {key: entry}}``; ``scripts/tune_table.py`` writes that as a table."""
    global _retune
    previous, _retune = _retune, {}
    saved_memo = dict(_memo)
    _memo.clear()
    try:
        with settings.using(autotune=True):
            yield _retune
    finally:
        _retune = previous
        _memo.clear()
        _memo.update(saved_memo)


def _time_ms(device: torch.device, run: Callable[[], None], reps: int = 10) -> float:
    """Median device-event milliseconds of ``run`` with L2 flushed before each call. The flush
    is enqueued twice (~0.2 ms of device time on an H100), so the host has enqueued ``run``
    long before the device reaches it: no host time lands between the events."""
    if device not in _flush:
        _flush[device] = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    flush = _flush[device]
    run()  # compile
    torch.cuda.synchronize(device)
    pairs = []
    for _ in range(reps):
        flush.zero_()
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
    """(config, where it came from: "table" | "cache" | "tuned" | "default").

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


def key_text(key: tuple) -> str:
    return "/".join(str(k) for k in key)


def _choose(kernel, key, candidates, build, device) -> tuple[dict, str]:
    if device not in _names:
        _names[device] = torch.cuda.get_device_name(device)
    name = _names[device]
    key_s = key_text(key)
    if _retune is None:
        entry = _table(name).get(kernel, {}).get(key_s)
        if entry is not None:
            return entry["config"], "table"
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
