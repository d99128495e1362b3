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


def open_device(kind: str, worker_id: str | None) -> Device:
    """Check the device is usable, pin this process to its share of it, and return it."""
    cls = device_class(kind)
    cls.check_available()
    device = cls(pick_index(worker_id, cls.visible_count()))
    device.activate()
    return device


__all__ = ["BACKENDS", "Device", "DeviceUnavailable", "device_class", "open_device", "pick_index", "worker_number"]
