"""cpu: the Triton interpreter on CPU tensors. Works anywhere; timings there mean nothing."""
from __future__ import annotations

import os
import platform

from .base import Device


class CpuDevice(Device):
    kind = "cpu"
    # The interpreter is slow: a large quick case takes minutes, not seconds.
    case_timeout_s = 900.0
    times_kernels = False

    @classmethod
    def default_profile(cls, compile_only: bool) -> str:
        return "quick"

    def l2_flusher(self):
        return None

    @classmethod
    def prepare_environment(cls, environ=os.environ) -> None:
        # triton.jit decides at decoration time whether to interpret, so this must be set
        # before any kernel module is imported (the plugin calls this from pytest_configure).
        environ["TRITON_INTERPRET"] = "1"

    def name(self) -> str:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("model name"):
                        return line.split(":", 1)[1].strip()
        except OSError:
            pass
        return platform.processor() or platform.machine()

    def driver(self) -> str:
        return "triton-interpreter"
