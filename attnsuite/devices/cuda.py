"""cuda: NVIDIA GPUs through torch.cuda; each xdist worker is pinned to one visible GPU."""
from __future__ import annotations

import functools
import os
import subprocess

from .base import Device, DeviceUnavailable


class CudaDevice(Device):
    kind = "cuda"
    visibility_env = "CUDA_VISIBLE_DEVICES"
    compile_toolchain = "upstream"

    @classmethod
    def compile_targets(cls, cuda_arch: str, soc: str) -> list[str]:
        archs = [a.strip() for a in cuda_arch.split(",") if a.strip()]
        if not archs or not all(a.isdigit() for a in archs):
            raise ValueError(f"--cuda-arch: expected numbers like 80,90, got {cuda_arch!r}")
        return [f"sm_{a}" for a in archs]

    @classmethod
    def compile_target_options(cls, targets) -> str:
        return "--cuda-arch " + ",".join(t.removeprefix("sm_") for t in targets)

    def vendor_baselines(self, problem: dict) -> dict[str, tuple]:
        from ..bench.vendor import sdpa_baselines

        return sdpa_baselines(problem)

    @classmethod
    def check_available(cls) -> None:
        import torch

        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            vis = os.environ.get("CUDA_VISIBLE_DEVICES")
            extra = f", CUDA_VISIBLE_DEVICES={vis!r}" if vis is not None else ""
            raise DeviceUnavailable(
                f"--device cuda: no usable CUDA GPU (torch {torch.__version__}, {build}{extra}); "
                f"to compile every case for NVIDIA targets without a GPU, add --compile-only"
            )
        try:
            import triton  # noqa: F401
        except ImportError as exc:
            raise DeviceUnavailable(f"--device cuda: triton is not importable ({exc})") from None

    @classmethod
    def visible_count(cls) -> int:
        import torch

        return torch.cuda.device_count()

    def activate(self) -> None:
        import torch

        torch.cuda.set_device(self.index)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize(self.index)

    def _torch_module(self):
        import torch

        return torch.cuda

    def memory_stats(self) -> dict:
        import torch

        return {
            "allocated_bytes": torch.cuda.memory_allocated(self.index),
            "peak_allocated_bytes": torch.cuda.max_memory_allocated(self.index),
        }

    def reset_peak_memory(self) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(self.index)

    def empty_cache(self) -> None:
        import torch

        torch.cuda.empty_cache()

    def reserved_bytes(self) -> int:
        import torch

        return torch.cuda.memory_reserved(self.index)

    def name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.index)

    def uuid(self) -> str | None:
        import torch

        value = getattr(torch.cuda.get_device_properties(self.index), "uuid", None)
        return str(value) if value is not None else None  # older torch builds lack the field

    def driver(self) -> str:
        import torch

        return f"driver {_nvidia_driver()}, CUDA runtime {torch.version.cuda}"


@functools.lru_cache(maxsize=1)
def _nvidia_driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.split()
        return out[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"
