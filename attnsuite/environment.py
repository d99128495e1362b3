"""The environment fingerprint every record carries."""
from __future__ import annotations

import platform
import socket

from .ledger import installed_versions


def fingerprint(device) -> dict:
    import torch

    versions = installed_versions()
    backend = "triton-ascend" if "triton-ascend" in versions else "triton"
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "triton": versions.get(backend, "not installed"),
        "triton_backend": backend,
        "device_kind": device.kind,
        "device_name": device.name(),
        "driver": device.driver(),
        "host": socket.gethostname(),
        "platform": platform.platform(terse=True),
    }
