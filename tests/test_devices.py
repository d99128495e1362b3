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
