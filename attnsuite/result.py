"""What a case produces, shared by the numeric runner, compile-only and the benchmarks: the
failure a stage raises, the measurements gathered while the case runs (``CaseResult``), and the
frozen ``CaseOutcome`` the runner returns once it is over, from which the record is built."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

#: What a run of a case can come to, before pytest's own verdict (skip, xfail, timeout...).
STATUSES = ("pass", "fail", "unsupported", "oom")


class CaseFailure(AssertionError):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


class DeviceOutOfMemory(Exception):
    """The device ran out of memory in a stage: a fact about the run, not about the kernel."""

    def __init__(self, stage: str, message: str, memory: dict):
        super().__init__(message)
        self.stage = stage
        self.memory = memory


_OOM_TEXT = re.compile(r"out of memory", re.I)


def is_out_of_memory(exc: BaseException) -> bool:
    """torch's OutOfMemoryError (CUDA), the NPU's "NPU out of memory" RuntimeError, MemoryError."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return isinstance(exc, RuntimeError) and bool(_OOM_TEXT.search(str(exc).split("\n", 1)[0]))


@dataclass
class CaseResult:
    """The measurements a case accumulates while it runs (mutable until ``freeze``)."""
    metrics: dict = field(default_factory=dict)
    headroom: float | None = None
    tolerance: dict | None = None
    #: Seconds per phase: inputs, first_call, impl, reference, compare.
    phases: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)
    #: compile-only: target -> one summary per compiled launch (see compile_case).
    compile: dict = field(default_factory=dict)
    #: Family.quality's figures (approximation vs a lossless ground truth), reported apart.
    quality: dict | None = None
    #: Benchmarks: attnsuite.bench.run.run_bench's payload.
    bench: dict | None = None
    #: Triton kernels the interpreter ran in the implementation's calls (None: no interpreter);
    #: a ledger entry about the interpreter explains no failure of a case that ran none.
    interpreted_launches: int | None = None
    #: What an ecosystem adapter did to the case on the way to its library (copies, transposes,
    #: base conversions: attnsuite.ecosystem.note), in the order first said.
    adapter_notes: list = field(default_factory=list)
    #: Outputs the case checks that the implementation declares it cannot return (an LSE-less
    #: kernel: attnsuite/optional_keywords.py): not judged, and no failure.
    not_provided: list = field(default_factory=list)

    def freeze(self, status: str, stage: str | None = None, message: str = "") -> "CaseOutcome":
        fields = asdict(self)
        fields["adapter_notes"] = tuple(self.adapter_notes)
        fields["not_provided"] = tuple(self.not_provided)
        return CaseOutcome(status=status, stage=stage, message=message, **fields)


@dataclass(frozen=True)
class CaseOutcome:
    """How one case ended and what it measured; never changed once the runner returns it."""
    status: str
    stage: str | None = None
    message: str = ""
    metrics: Mapping[str, Any] = field(default_factory=dict)
    headroom: float | None = None
    tolerance: Mapping[str, Any] | None = None
    phases: Mapping[str, float] = field(default_factory=dict)
    memory: Mapping[str, Any] = field(default_factory=dict)
    compile: Mapping[str, Any] = field(default_factory=dict)
    quality: Mapping[str, Any] | None = None
    bench: Mapping[str, Any] | None = None
    interpreted_launches: int | None = None
    adapter_notes: tuple = ()
    not_provided: tuple = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"CaseOutcome.status must be one of {STATUSES}, got {self.status!r}")


def classify_exception(exc: BaseException) -> str:
    """The stage an exception raised by an implementation call belongs to."""
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    if module.startswith("triton") and ("Compilation" in name or "OutOfResources" in name):
        return "compile"
    if isinstance(exc, (ValueError, TypeError)):
        return "validate"
    return "launch"
