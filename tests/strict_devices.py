"""A torch dispatch mode that refuses, as a CUDA build of torch does, an op whose tensors lie on
different devices; the ``meta`` device stands in for the accelerator.

torch's meta kernels are laxer than CUDA's: ``meta[idx] = host_values`` and
``meta.masked_fill_(host_mask, 0)`` pass on meta and fail on a GPU. Under this mode every op is
held to CUDA's rules: all tensor arguments on one device, except a 0-dim host tensor (a CPU
scalar, which CUDA kernels accept), host index tensors of an advanced index (CUDA moves them),
and the copies between devices (``copy_``, ``.to``). A copy out of the device into host memory is
refused too: a helper that builds a host buffer for a device tensor makes the case's inputs on
the host, where they defeat drawing them on the device."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten

#: Ops that move values between devices (the only ones allowed to mix them).
COPIES = {aten.copy_.default, aten._to_copy.default, aten._copy_from.default,
          aten._copy_from_and_resize.default, aten.lift_fresh.default, aten.lift_fresh_copy.default}
#: Advanced indexing: its index tensors may lie on the host whatever the indexed tensor's device.
INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
            aten._index_put_impl_.default, aten._unsafe_index.Tensor, aten._unsafe_index_put.default}
#: Ops that read values (a meta tensor has none): the build stops there, legal on a real device.
READS_VALUES = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
                aten.unique_consecutive.default, aten._unique2.default, aten.equal.default,
                aten.is_nonzero.default, aten.repeat_interleave.Tensor}


class MixedDevices(RuntimeError):
    pass


class NeedsValues(RuntimeError):
    pass


def _tensors(args, kwargs) -> list:
    """The tensor arguments of an aten call (one level of lists: a hand-rolled flatten, since a
    build makes hundreds of calls and pytree's costs more than the op on meta)."""
    found = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            found.extend(x for x in a if isinstance(x, torch.Tensor))
    return found


def _devices(tensors) -> set:
    return {t.device for t in tensors if not (t.device.type == "cpu" and t.dim() == 0)}


class StrictDevices(TorchDispatchMode):
    """Inside ``with StrictDevices():`` an op that mixes the host and the device raises
    MixedDevices, one that reads the values of a meta tensor NeedsValues."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = _tensors(args, kwargs)
        if func in COPIES:
            src, dst = (args[1], args[0]) if func is aten.copy_.default else (args[0], None)
            target = dst.device if dst is not None else kwargs.get("device", src.device)
            if src.device.type == "meta" and torch.device(target).type == "cpu":
                raise MixedDevices(f"{func}: a device tensor copied into host memory")
        elif func in READS_VALUES and any(t.device.type == "meta" for t in tensors):
            raise NeedsValues(f"{func} reads the values of a device tensor")
        else:
            checked = tensors
            if func in INDEXING:
                indexed, indices = args[0], args[1]
                host = {id(i) for i in indices if isinstance(i, torch.Tensor) and i.device.type == "cpu"}
                checked = [t for t in tensors if id(t) not in host] if indexed.device.type != "cpu" else tensors
            if len(checked) > 1 and len(_devices(checked)) > 1:
                shapes = ", ".join(f"{tuple(t.shape)} on {t.device}" for t in checked)
                raise MixedDevices(f"{func} mixes devices: {shapes}")
        return func(*args, **kwargs)
