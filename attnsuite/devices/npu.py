"""npu: Huawei Ascend NPUs through torch_npu + triton-ascend.

Never run on hardware by this project (no NPU is available to it): written against the torch_npu
2.x API (``torch.npu`` mirrors ``torch.cuda``) and unit-tested with a fake ``torch.npu``
(tests/test_npu_backend.py). ``import torch_npu`` needs CANN's shared libraries, and is what
registers ``torch.npu`` and the ``npu`` device type.
"""
from __future__ import annotations

import os

from .base import Device, DeviceUnavailable


def _npu():
    """``torch.npu``, importing torch_npu first if nothing has registered it yet."""
    import torch

    if not hasattr(torch, "npu"):
        import torch_npu  # noqa: F401
    return torch.npu


class NpuDevice(Device):
    kind = "npu"
    visibility_env = "ASCEND_RT_VISIBLE_DEVICES"
    compile_toolchain = "ascend"

    @classmethod
    def compile_targets(cls, cuda_arch: str, soc: str) -> list[str]:
        return [soc]

    @classmethod
    def compile_target_options(cls, targets) -> str:
        return f"--soc {targets[0]}"

    def vendor_baselines(self, problem: dict) -> dict[str, tuple]:
        from ..bench.vendor import npu_baselines

        return npu_baselines(problem)

    @classmethod
    def check_available(cls) -> None:
        try:
            import torch
            import torch_npu  # noqa: F401  (registers torch.npu)
        except ImportError as exc:
            raise DeviceUnavailable(
                f"--device npu: torch_npu is not importable ({exc}); it needs CANN and an Ascend driver; "
                f"to compile every case for Ascend without an NPU, add --compile-only (needs triton-ascend)"
            ) from None
        except OSError as exc:  # CANN shared libraries missing
            raise DeviceUnavailable(f"--device npu: torch_npu failed to load CANN libraries ({exc})") from None
        if not torch.npu.is_available() or torch.npu.device_count() < 1:
            # Always name the variable: the runtime reads it once, before torch is imported, so a
            # value set later (or inherited by mistake) is the usual cause.
            vis = os.environ.get(cls.visibility_env)
            state = "unset" if vis is None else repr(vis)
            raise DeviceUnavailable(
                f"--device npu: torch_npu is installed but sees no NPU ({cls.visibility_env} {state})"
            )

    @classmethod
    def visible_count(cls) -> int:
        return _npu().device_count()

    def activate(self) -> None:
        # Indices are relative to ASCEND_RT_VISIBLE_DEVICES, like CUDA's.
        _npu().set_device(self.index)

    def synchronize(self) -> None:
        _npu().synchronize(self.index)

    def _torch_module(self):
        return _npu()

    def memory_stats(self) -> dict:
        npu = _npu()
        return {
            "allocated_bytes": npu.memory_allocated(self.index),
            "peak_allocated_bytes": npu.max_memory_allocated(self.index),
        }

    def reset_peak_memory(self) -> None:
        _npu().reset_peak_memory_stats(self.index)

    def empty_cache(self) -> None:
        _npu().empty_cache()

    def reserved_bytes(self) -> int:
        return _npu().memory_reserved(self.index)

    def name(self) -> str:
        return _npu().get_device_name(self.index)  # the SoC name, e.g. "Ascend910B2"

    def uuid(self) -> str | None:
        # torch_npu's device properties carry no UUID; CANN's pyACL documents
        # ``acl.rt.device_get_uuid(device_id) -> (uuid, ret)`` (aclrtDeviceGetUuid, Atlas A2/A3
        # and later). Never run on an NPU: any failure (an older CANN without it, no pyACL)
        # leaves the record without a UUID rather than failing the run.
        try:
            import acl

            value, ret = acl.rt.device_get_uuid(self.index)
        except Exception:  # noqa: BLE001 - a UUID is not worth failing a run for
            return None
        if ret != 0 or value is None:
            return None
        raw = value.get("bytes", value) if isinstance(value, dict) else value
        return bytes(raw).hex() if isinstance(raw, (bytes, bytearray, list)) else str(raw)

    def driver(self) -> str:
        try:
            import torch_npu
        except ImportError:
            return "unknown"
        return f"torch_npu {torch_npu.__version__}, CANN {_cann_version(torch_npu)}"


def _cann_version(torch_npu) -> str:
    # torch_npu.npu.utils.get_cann_version() is documented from Ascend Extension 7.x; older
    # releases lack it, and it reads version files that a container may not map.
    try:
        return str(torch_npu.npu.utils.get_cann_version())
    except Exception:  # noqa: BLE001 - a version string is not worth failing a run for
        return "unknown"
