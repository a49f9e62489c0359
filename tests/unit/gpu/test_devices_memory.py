"""Visible GPUs from the environment and NVML, and the free-memory callable for the memory budget."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from ensemble_runtime.gpu.devices import parse_device_list, visible_gpus
from ensemble_runtime.gpu.memory import NvmlDeviceFree, make_device_free, no_device_free
from ensemble_runtime.gpu.nvml import detect_gpus, open_nvml


def test_device_list_is_read_as_cuda_reads_it() -> None:
    assert parse_device_list("0,2") == ["0", "2"]
    assert parse_device_list(" 1 , 3 ") == ["1", "3"]
    assert parse_device_list("0,-1,2") == ["0"]  # stops at the first invalid entry
    assert parse_device_list("GPU-8a1b,MIG-77") == ["GPU-8a1b", "MIG-77"]
    assert parse_device_list("") == []
    assert parse_device_list("-1") == []
    assert parse_device_list("nope,0") == []


def test_visible_gpus_without_cuda_visible_devices_is_everything_nvml_sees() -> None:
    inventory = visible_gpus({}, 4)
    assert inventory.ids == (0, 1, 2, 3)
    assert inventory.physical == ("0", "1", "2", "3")


def test_cuda_visible_devices_renumbers_and_stops_at_missing_ordinals() -> None:
    inventory = visible_gpus({"CUDA_VISIBLE_DEVICES": "2,0"}, 4)
    assert inventory.ids == (0, 1) and inventory.physical == ("2", "0")
    assert "selects 2 of 4" in inventory.detail
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,7,2"}, 4).physical == ("1",)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "1,1"}, 4).physical == ("1",)
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 4).count == 0
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-abc"}, 1).physical == ("GPU-abc",)


def test_nvidia_visible_devices_none_or_void_means_no_gpu() -> None:
    for value in ("void", "none", ""):
        inventory = visible_gpus({"NVIDIA_VISIBLE_DEVICES": value}, 2)
        assert inventory.count == 0 and "mounts no GPU" in inventory.detail
    assert visible_gpus({"NVIDIA_VISIBLE_DEVICES": "all"}, 2).count == 2


def test_no_nvml_means_no_gpu_with_the_reason() -> None:
    inventory = visible_gpus({"CUDA_VISIBLE_DEVICES": "0"}, None, "driver not loaded")
    assert inventory.count == 0 and "driver not loaded" in inventory.detail


class NvmlFailure(Exception):
    pass


@dataclass
class FakeNvml:
    """The pynvml functions the runtime calls; free memory per physical id."""

    free: dict[str, int] = field(default_factory=dict)
    init_error: str = ""
    fail_queries: bool = False
    shutdowns: int = 0

    def nvmlInit(self) -> None:
        if self.init_error:
            raise NvmlFailure(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return sum(1 for k in self.free if k.isdigit())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return str(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        return uuid

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> MemoryInfo:
        if self.fail_queries:
            raise NvmlFailure("GPU is lost")
        return MemoryInfo(self.free[handle])


@dataclass
class MemoryInfo:
    free: int


def test_nvml_absent_returns_none_with_a_reason() -> None:
    nvml, reason = open_nvml()  # the unit-test image has no pynvml, or pynvml but no driver
    if nvml is not None:
        nvml.close()
        pytest.skip("NVML works on this machine")
    assert "nvidia-ml-py" in reason or "NVML could not start" in reason
    device_free = make_device_free({})
    assert device_free is no_device_free and device_free() is None


def test_nvml_without_driver_returns_none(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(init_error="Driver Not Loaded")
    with caplog.at_level(logging.INFO, logger="ensemble_runtime.gpu.memory"):
        device_free = make_device_free({}, fake)
    assert device_free() is None
    assert "Driver Not Loaded" in caplog.text and "byte limit only" in caplog.text


def test_free_memory_is_the_smallest_among_visible_gpus() -> None:
    fake = FakeNvml(free={"0": 10 << 30, "1": 3 << 30, "2": 7 << 30})
    assert make_device_free({}, fake)() == 3 << 30
    device_free = make_device_free({"CUDA_VISIBLE_DEVICES": "2,0"}, fake)
    assert isinstance(device_free, NvmlDeviceFree)
    assert device_free() == 7 << 30
    assert device_free.per_device() == {0: 7 << 30, 1: 10 << 30}


def test_hidden_gpus_close_nvml_and_answer_none() -> None:
    fake = FakeNvml(free={"0": 1 << 30})
    inventory, nvml = detect_gpus({"NVIDIA_VISIBLE_DEVICES": "void"}, fake)
    assert nvml is None and inventory.count == 0 and fake.shutdowns == 1


def test_a_failing_query_answers_none_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(free={"0": 1 << 30}, fail_queries=True)
    device_free = make_device_free({}, fake)
    with caplog.at_level(logging.WARNING, logger="ensemble_runtime.gpu.memory"):
        assert device_free() is None
    assert "GPU is lost" in caplog.text
