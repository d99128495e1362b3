"""Device selection: worker pinning and environment preparation (no accelerator needed)."""
import pytest

from attnsuite.devices import BACKENDS, DeviceUnavailable, device_class, pick_index, worker_number


@pytest.mark.parametrize("worker,visible,index", [
    (None, 4, 0), ("master", 4, 0), ("gw0", 4, 0), ("gw3", 4, 3), ("gw5", 4, 1), ("gw7", 8, 7), ("gw9", 1, 0),
])
def test_worker_n_runs_on_device_n_mod_visible(worker, visible, index):
    assert pick_index(worker, visible) == index


def test_worker_number_parsing():
    assert worker_number("gw12") == 12 and worker_number(None) == 0


def test_no_visible_device_is_an_error():
    with pytest.raises(DeviceUnavailable):
        pick_index("gw0", 0)


def test_backends_are_cpu_cuda_npu_and_unknown_is_refused():
    assert set(BACKENDS) == {"cpu", "cuda", "npu"}
    with pytest.raises(DeviceUnavailable, match="unknown device"):
        device_class("tpu")


def test_cpu_turns_the_interpreter_on_and_accelerators_turn_it_off():
    env = {}
    device_class("cpu").prepare_environment(env)
    assert env == {"TRITON_INTERPRET": "1"}
    for kind in ("cuda", "npu"):
        env = {"TRITON_INTERPRET": "1", "OTHER": "x"}
        device_class(kind).prepare_environment(env)
        assert env == {"OTHER": "x"}


def test_visibility_variables():
    assert device_class("cuda").visibility_env == "CUDA_VISIBLE_DEVICES"
    assert device_class("npu").visibility_env == "ASCEND_RT_VISIBLE_DEVICES"


def test_cuda_and_npu_report_what_is_missing_here():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceUnavailable, match=r"^--device cuda: no usable CUDA GPU"):
        device_class("cuda").check_available()
    with pytest.raises(DeviceUnavailable, match=r"^--device npu: .*torch_npu"):
        device_class("npu").check_available()


@pytest.mark.parametrize("reserved, trimmed", [(5 << 30, True), (1 << 30, False)])
def test_a_worker_gives_back_a_large_cache_when_it_releases_the_device(tmp_path, monkeypatch,
                                                                      reserved, trimmed):
    """Cached memory a large case left behind goes back to the device after the case, so a
    later large case on another worker has room; a small cache is kept (reallocating is slow)."""
    import tempfile

    from attnsuite.devices.base import Device

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    emptied = []

    class Fake(Device):
        kind = "fake"

        def reserved_bytes(self):
            return reserved

        def empty_cache(self):
            emptied.append(True)

    with Fake(0).use():
        assert not emptied
    assert emptied == ([True] if trimmed else [])


def test_an_exclusive_hold_waits_for_shared_holders_and_holds_off_new_ones(tmp_path, monkeypatch):
    """The OOM retry takes the device exclusively: it waits for the cases other workers are
    running, and cases that start meanwhile queue behind it instead of starving it."""
    import fcntl
    import tempfile
    import threading
    import time

    from attnsuite.devices.base import Device

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    class Fake(Device):
        kind = "fake"

    dev, events = Fake(0), []
    first_in, release_first = threading.Event(), threading.Event()

    def shared(name, started=None, hold=None):
        with dev.use():
            events.append(f"{name} in")
            if started:
                started.set()
            if hold:
                hold.wait(10)
            events.append(f"{name} out")  # still holding: the next holder's "in" comes after

    def exclusive():
        with dev.use(exclusive=True):
            events.append("retry in")
            time.sleep(0.2)
            events.append("retry out")

    def gate_taken_exclusively() -> bool:
        with open(dev.lock_path("gate"), "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
            return False

    a = threading.Thread(target=shared, args=("a", first_in, release_first))
    a.start()
    first_in.wait(10)
    b = threading.Thread(target=exclusive)
    b.start()
    deadline = time.monotonic() + 10
    while not gate_taken_exclusively() and time.monotonic() < deadline:  # the retry queues up
        time.sleep(0.01)
    c = threading.Thread(target=shared, args=("c",))
    c.start()
    time.sleep(0.3)
    assert events == ["a in"]  # neither the retry nor the newcomer got in while a holds it
    release_first.set()
    for t in (a, b, c):
        t.join(10)
    assert events.index("retry in") > events.index("a out")
    assert events.index("c in") > events.index("retry out")


def test_records_name_the_device_by_uuid_where_the_backend_has_one(monkeypatch):
    import sys
    import types

    import torch

    from attnsuite.devices.cpu import CpuDevice
    from attnsuite.devices.cuda import CudaDevice
    from attnsuite.devices.npu import NpuDevice

    seen = []

    def properties(index):
        seen.append(index)
        return types.SimpleNamespace(uuid=f"GPU-{index}-uuid")

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert CudaDevice(1).uuid() == "GPU-1-uuid" and seen == [1]
    # NPU: CANN's pyACL; absent here (None), and present as the API documents it.
    monkeypatch.setitem(sys.modules, "acl", None)
    assert NpuDevice(0).uuid() is None
    acl = types.SimpleNamespace(rt=types.SimpleNamespace(device_get_uuid=lambda i: ({"bytes": bytes([i] * 16)}, 0)))
    monkeypatch.setitem(sys.modules, "acl", acl)
    assert NpuDevice(2).uuid() == "02" * 16
    acl.rt.device_get_uuid = lambda i: (None, 107000)  # an error code: no UUID, no failure
    assert NpuDevice(2).uuid() is None
    assert CpuDevice(0).uuid() is None
