"""What a timing produces: the statistics of a set of samples and a device-time result that
names the method behind it. Shared by every timing method (attnsuite.bench.graph_time,
profiler_time, timing), so none of them imports another's module to say what it measured."""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Optional


@dataclass(frozen=True)
class Timing:
    median_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    min_ms: float
    runs: int

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples_ms: list[float]) -> Timing:
    """Median and quartiles (inclusive method: defined for any number of runs >= 1)."""
    if not samples_ms:
        raise ValueError("summarize: no samples")
    xs = sorted(samples_ms)
    if len(xs) == 1:
        q1 = med = q3 = xs[0]
    else:
        q1, med, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return Timing(med, q1, q3, q3 - q1, xs[0], len(xs))


@dataclass(frozen=True)
class DeviceTime:
    """Device time of one callable and how it was taken."""
    timing: Timing
    method: str
    l2: str
    note: Optional[str] = None


class CaptureFailed(RuntimeError):
    """The call cannot be recorded into a device graph (it synchronizes, copies from pageable
    host memory, or the backend has no graphs); the message says why, in one line."""
