"""What a case produces, shared by the numeric runner and compile-only: the failure a stage
raises and the measurements that travel with the case whatever its outcome."""
from __future__ import annotations

from dataclasses import dataclass, field


class CaseFailure(AssertionError):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


@dataclass
class CaseResult:
    metrics: dict = field(default_factory=dict)
    headroom: float | None = None
    tolerance: dict | None = None
    timings: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    #: compile-only: target -> one summary per compiled launch (see compile_case).
    compile: dict = field(default_factory=dict)
    #: Family.quality's figures (approximation vs a lossless ground truth), reported apart.
    quality: dict | None = None
    #: Benchmarks: attnsuite.bench.run.run_bench's payload.
    bench: dict | None = None

    def as_payload(self) -> dict:
        return {"metrics": self.metrics, "headroom": self.headroom, "tolerance": self.tolerance,
                "timings": self.timings, "memory": self.memory, "compile": self.compile,
                "quality": self.quality, "bench": self.bench}


def classify_exception(exc: BaseException) -> str:
    """The stage an exception raised by an implementation call belongs to."""
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    if module.startswith("triton") and ("Compilation" in name or "OutOfResources" in name):
        return "compile"
    if isinstance(exc, (ValueError, TypeError)):
        return "validate"
    return "launch"
