"""The environment fingerprint every record carries."""
from __future__ import annotations

import platform
import socket

from .ledger import installed_versions


def fingerprint(device, kind: str | None = None) -> dict:
    """Versions, host and device of this process (``device`` None in xdist's controller, which
    opens no device: its records still carry everything else)."""
    import torch

    versions = installed_versions()
    backend = "triton-ascend" if "triton-ascend" in versions else "triton"
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "triton": versions.get(backend, "not installed"),
        "triton_backend": backend,
        "device_kind": device.kind if device is not None else kind,
        "device_name": device.name() if device is not None else "(controller: not opened)",
        "driver": device.driver() if device is not None else "",
        "host": socket.gethostname(),
        "platform": platform.platform(terse=True),
    }
