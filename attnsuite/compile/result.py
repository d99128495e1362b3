"""The record one compile-only run produces, and the message trimming every backend shares."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

PASS = "pass"
FAIL = "fail"


@dataclass
class CompileOutcome:
    """What compiling one launch (one link of a ``LaunchPlan.chain()``) for one target gave.

    ``stage`` names the stage that failed (None on pass): "frontend", "ttir", "ttgir", "llvm",
    "ptxas", "smem" for CUDA; "frontend", "adapter", "bishengir", "ub_overflow", "grid" for npu;
    "toolchain" when the compiler itself could not be run. ``last_stage_reached`` names the last
    stage whose output exists, e.g. "cubin", "ttadapter", "bishengir (hivmc missing)".
    """
    target: str
    outcome: str
    stage: Optional[str]
    message: str
    last_stage_reached: str
    artifacts: dict = field(default_factory=dict)
    seconds: float = 0.0
    kernel: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == PASS

    def brief(self) -> str:
        """One line for logs and reports."""
        head = f"{self.kernel or '?'} @ {self.target}: {self.outcome}"
        if self.stage:
            first = self.message.strip().splitlines()[0] if self.message.strip() else ""
            head += f" at {self.stage}: {first}"
        return head + f" ({self.seconds:.2f}s, reached {self.last_stage_reached})"


# Lines that never help a reader: symbolized stack frames, crash banners, the wrapper's delimiters.
_NOISE = re.compile(
    r"^\s*(#\d+\s+0x[0-9a-f]+|Stack dump|PLEASE submit a bug report|0\.\s+Program arguments:"
    r"|///-+\[|\[INFO\]: The compiled kernel cache)", re.I)
_ERRORISH = re.compile(r"error|fail|overflow|abort|segmentation|cannot|assert", re.I)


def trim_message(text: str, max_lines: int = 30, max_chars: int = 4000) -> str:
    """Keep the lines that say what went wrong: drop stack dumps and banners, collapse repeats,
    and when still too long keep the error-looking lines (with one line of context each)."""
    lines = []
    for line in (text or "").splitlines():
        line = line.rstrip()
        if not line.strip() or _NOISE.search(line):
            continue
        if lines and lines[-1] == line:
            continue
        lines.append(line)
    if len(lines) > max_lines:
        keep = set()
        for i, line in enumerate(lines):
            if _ERRORISH.search(line):
                keep.update((i - 1, i, i + 1))
        picked = [lines[i] for i in sorted(k for k in keep if 0 <= k < len(lines))]
        lines = (picked or lines)[:max_lines]
    out = "\n".join(lines)
    if len(out) > max_chars:
        out = out[: max_chars - 15] + "\n...[truncated]"
    return out
