"""Performance hazards of one compiled Ascend launch, readable on a CPU: predictions of a slow
kernel, never failures (``porting_notes.md#performance-hazards`` explains each and its rewrite).

* ``grid``: programs launched against the SoC's cores. On Ascend every program is bound to a
  physical core and a core runs its programs one after another, so a grid many times the core
  count pays per-program start-up again and again where a GPU would overlap it; flagged past
  ``GRID_FLAG_RATIO`` times the cores the kernel runs on (vector cores for a vector-only kernel,
  AI cores otherwise).
* ``accesses``: memory accesses moved one element (``scalar``) or one row (``row_gather``) at a
  time, per site of the kernel's source (``attnsuite.compile.scalarize``).
* ``ub``: unified-buffer bytes the vector core's tiles take (bishengir's memory display, see
  ``attnsuite.compile.memory``), flagged at ``UB_FLAG_PERCENT`` or more: no headroom left for a
  larger head dim, a longer tile, or the next compiler's buffers.

``hazards(...)`` builds the record's ``hazards`` dict; ``describe(entry)`` turns a record's compile
entry into short display strings for the report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Soc:
    ai_cores: int
    vector_cores: int
    ub_bytes: int
    source: str


_PLATFORM_FILE = ("CANN's platform file data/platform_config/{}.ini, [SoCInfo] ai_core_cnt / "
                  "vector_core_cnt, as quoted in Ascend's public documentation")
_UB_MEASURED = ("ub_size: bishengir-compile --target={} reports '1572864 bits available' (ascendnpu-ir "
                "1.2.0, measured here)")

#: Per SoC: cores and unified buffer. Read the real counts from the device on hardware
#: (``get_device_properties(dev)["num_aicore"]`` / ``["num_vectorcore"]``).
SOCS = {
    "Ascend910B2": Soc(24, 48, 196608, _PLATFORM_FILE.format("Ascend910B2") + "; "
                       + _UB_MEASURED.format("Ascend910B2")),
    "Ascend910B2C": Soc(24, 48, 196608, "CANN's platform file for Ascend910B2C: ai_core_cnt=24, "
                        "vector_core_cnt=48, ub_size=196608"),
}

#: A grid is flagged when it launches more than this many programs per core it runs on.
GRID_FLAG_RATIO = 2.0
#: UB use at or above this share of the buffer is flagged.
UB_FLAG_PERCENT = 90.0


def grid_hazard(grid: Any, soc: str, mix_mode: Optional[str]) -> Optional[dict]:
    """``{"programs", "ai_cores", "vector_cores", "bound_to", "ratio", "flagged"}`` or None for a
    SoC missing from ``SOCS``. ``mix_mode`` is the kernel's ("aiv": vector cores only)."""
    spec = SOCS.get(soc)
    if spec is None:
        return None
    dims = tuple(grid) if isinstance(grid, (tuple, list)) else (grid,)
    programs = math.prod(int(d) for d in dims)
    vector_only = mix_mode == "aiv"
    cores = spec.vector_cores if vector_only else spec.ai_cores
    ratio = programs / cores
    return {"programs": programs, "ai_cores": spec.ai_cores, "vector_cores": spec.vector_cores,
            "bound_to": "vector_cores" if vector_only else "ai_cores", "ratio": round(ratio, 2),
            "flagged": ratio > GRID_FLAG_RATIO}


def access_hazard(accesses: list[dict]) -> dict:
    """Counts per kind and one site per (kind, source line) with how many accesses it holds and
    how many single moves they make per program (``moves``; None when a loop bound is dynamic)."""
    sites: dict[tuple, dict] = {}
    totals = {"scalar": 0, "row_gather": 0}
    for a in accesses:
        kind = "scalar" if a.get("granularity") == "element" else "row_gather"
        totals[kind] += 1
        site = sites.setdefault((kind, a.get("loc") or "?"), {
            "kind": kind, "line": a.get("loc") or "?", "count": 0, "moves": 0})
        site["count"] += 1
        trips = a.get("trips")
        site["moves"] = None if site["moves"] is None or trips is None else site["moves"] + trips
    return {**totals, "sites": list(sites.values())}


def ub_hazard(memory: dict, soc: str) -> Optional[dict]:
    """``{"bytes", "capacity", "percent", "flagged"}`` from a memory display, None when it shows
    no vector-core buffer (a cube-only kernel, or bishengir stopped before planning memory)."""
    used = (memory or {}).get("aiv", {}).get("ub")
    spec = SOCS.get(soc)
    if used is None or spec is None:
        return None
    percent = 100.0 * used / spec.ub_bytes
    return {"bytes": int(used), "capacity": spec.ub_bytes, "percent": round(percent, 1),
            "flagged": percent >= UB_FLAG_PERCENT}


def hazards(grid: Any, soc: str, *, mix_mode: Optional[str] = None,
            accesses: Optional[list] = None, memory: Optional[dict] = None) -> dict:
    """The record's ``hazards`` for one launch; a part that could not be measured is absent."""
    out = {}
    g = grid_hazard(grid, soc, mix_mode)
    if g is not None:
        out["grid"] = g
    if accesses is not None:
        out["accesses"] = access_hazard(accesses)
    ub = ub_hazard(memory or {}, soc)
    if ub is not None:
        out["ub"] = ub
    return out


def describe(entry: dict) -> list[str]:
    """Short display strings for a record's compile entry, flagged hazards first marked "!":
    e.g. ``["! grid 8192 programs = 341x the 24 AI cores", "UB 62.5% (122880 B)",
    "2 row gathers (sparse_decode.py:78, sparse_decode.py:84)"]``. Empty when there is none."""
    hz = (entry or {}).get("hazards") or {}
    lines: list[tuple[bool, str]] = []
    g = hz.get("grid")
    if g:
        cores = g.get("vector_cores") if g.get("bound_to") == "vector_cores" else g.get("ai_cores")
        what = "vector cores" if g.get("bound_to") == "vector_cores" else "AI cores"
        lines.append((bool(g.get("flagged")),
                      f"grid {g.get('programs')} programs = {g.get('ratio')}x the {cores} {what}"))
    ub = hz.get("ub")
    if ub:
        lines.append((bool(ub.get("flagged")), f"UB {ub.get('percent')}% ({ub.get('bytes')} B)"))
    acc = hz.get("accesses") or {}
    for kind, noun in (("scalar", "scalarized access"), ("row_gather", "row gather")):
        n = int(acc.get(kind) or 0)
        if n:
            where = sorted({s.get("line", "?") for s in acc.get("sites") or [] if s.get("kind") == kind})
            lines.append((kind == "scalar", f"{n} {noun}{'s' if n > 1 else ''} ({', '.join(where)})"))
    return [("! " if flagged else "") + text for flagged, text in sorted(lines, key=lambda x: not x[0])]
