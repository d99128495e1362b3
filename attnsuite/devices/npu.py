"""npu: Huawei Ascend NPUs through torch_npu + triton-ascend.

Never run on hardware by this project (no NPU is available to it); written against the
torch_npu API described in ../shared/spec/ascend.md.
"""
from __future__ import annotations

import os

from .base import Device, DeviceUnavailable


class NpuDevice(Device):
    kind = "npu"
    visibility_env = "ASCEND_RT_VISIBLE_DEVICES"

    @classmethod
    def check_available(cls) -> None:
        try:
            import torch
            import torch_npu  # noqa: F401  (registers torch.npu)
        except ImportError as exc:
            raise DeviceUnavailable(
                f"--device npu: torch_npu is not importable ({exc}); it needs CANN and an Ascend driver"
            ) from None
        except OSError as exc:  # CANN shared libraries missing
            raise DeviceUnavailable(f"--device npu: torch_npu failed to load CANN libraries ({exc})") from None
        if not torch.npu.is_available() or torch.npu.device_count() < 1:
            vis = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
            extra = f" (ASCEND_RT_VISIBLE_DEVICES={vis!r})" if vis is not None else ""
            raise DeviceUnavailable(f"--device npu: torch_npu is installed but sees no NPU{extra}")

    @classmethod
    def visible_count(cls) -> int:
        import torch

        return torch.npu.device_count()

    def activate(self) -> None:
        import torch

        torch.npu.set_device(self.index)

    def synchronize(self) -> None:
        import torch

        torch.npu.synchronize(self.index)

    def memory_stats(self) -> dict:
        import torch

        return {
            "allocated_bytes": torch.npu.memory_allocated(self.index),
            "peak_allocated_bytes": torch.npu.max_memory_allocated(self.index),
        }

    def reset_peak_memory(self) -> None:
        import torch

        torch.npu.reset_peak_memory_stats(self.index)

    def empty_cache(self) -> None:
        import torch

        torch.npu.empty_cache()

    def name(self) -> str:
        import torch

        return torch.npu.get_device_name(self.index)

    def driver(self) -> str:
        try:
            import torch_npu

            return f"torch_npu {torch_npu.__version__}"
        except ImportError:
            return "unknown"
