"""Device backends by name; ``open_device`` picks the one this (xdist worker) process runs on."""
from __future__ import annotations

from .base import Device, DeviceUnavailable, pick_index, worker_number
from .cpu import CpuDevice
from .cuda import CudaDevice
from .npu import NpuDevice

BACKENDS: dict[str, type[Device]] = {cls.kind: cls for cls in (CpuDevice, CudaDevice, NpuDevice)}


def device_class(kind: str) -> type[Device]:
    try:
        return BACKENDS[kind]
    except KeyError:
        raise DeviceUnavailable(f"--device {kind}: unknown device (choose from {', '.join(BACKENDS)})") from None


class HostDevice(Device):
    """Compile-only runs: records name the device the kernels are compiled for, but tensors stay
    on the host (no accelerator is needed, none is touched)."""

    times_kernels = False

    def __init__(self, kind: str):
        super().__init__(0)
        self.kind = kind

    @property
    def torch_device(self):
        import torch

        return torch.device("cpu")

    def place(self, tensor):
        return tensor

    def l2_flusher(self):
        return None

    def name(self) -> str:
        return f"host (compile-only for {self.kind})"

    def driver(self) -> str:
        return "none"


def host_device(kind: str) -> Device:
    device_class(kind)  # an unknown kind is refused here too
    return HostDevice(kind)


def open_device(kind: str, worker_id: str | None) -> Device:
    """Check the device is usable, pin this process to its share of it, and return it."""
    cls = device_class(kind)
    cls.check_available()
    device = cls(pick_index(worker_id, cls.visible_count()))
    device.activate()
    return device


__all__ = ["BACKENDS", "Device", "DeviceUnavailable", "device_class", "host_device", "open_device", "pick_index",
           "worker_number"]
