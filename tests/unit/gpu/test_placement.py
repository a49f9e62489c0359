"""Instance groups -> (GPU, instance index) slots, Triton's rules, and refusals that name the group."""

from __future__ import annotations

import pytest
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.gpu.devices import GpuInventory
from ensemble_runtime.gpu.placement import Slot, choose_profile, place_instances
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

TWO_GPUS = GpuInventory(("0", "1"), "2 GPU(s) reported by NVML")
NO_GPU = GpuInventory((), "no GPU visible (NVML is not available)")


def config(groups: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" instance_group [ {groups} ]', mc.ModelConfig())


def test_listed_gpus_get_count_instances_each() -> None:
    placement = place_instances(config('{ name: "g" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] }'), TWO_GPUS,
                                backend="tensorrt", needs_gpu=True)
    assert [(s.device_id, s.index) for s in placement.slots] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert placement.devices == (0, 1) and not placement.notes


def test_gpu_group_without_gpus_uses_every_visible_gpu() -> None:
    placement = place_instances(config("{ kind: KIND_GPU count: 1 }"), TWO_GPUS, backend="tensorrt", needs_gpu=True)
    assert [s.device_id for s in placement.slots] == [0, 1]
    assert placement.slots[0].group == "m_0"


def test_instance_indices_continue_across_groups_on_one_gpu() -> None:
    placement = place_instances(
        config('{ name: "a" kind: KIND_GPU count: 1 gpus: [ 1 ] }, { name: "b" kind: KIND_GPU count: 2 gpus: [ 1 ] }'),
        TWO_GPUS, backend="tensorrt", needs_gpu=True,
    )
    assert [(s.group, s.index) for s in placement.on(1)] == [("a", 0), ("b", 1), ("b", 2)]


def test_a_gpu_that_is_not_visible_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"instance group 'g' lists GPU 3, which this runtime cannot see "
                                          r"\(visible GPUs: 0, 1; 2 GPU\(s\) reported by NVML\)"):
        place_instances(config('{ name: "g" kind: KIND_GPU gpus: [ 0, 3 ] }'), TWO_GPUS, backend="onnxruntime",
                        needs_gpu=False)


def test_gpu_group_without_a_gpu_falls_back_to_cpu_with_a_note() -> None:
    placement = place_instances(config('{ name: "g" kind: KIND_GPU count: 2 }'), NO_GPU, backend="onnxruntime",
                                needs_gpu=False)
    assert [s.device_id for s in placement.slots] == [None, None]
    assert placement.notes == (
        "model 'm' instance group 'g' asks for KIND_GPU but this runtime sees no GPU "
        "(no GPU visible (NVML is not available)); running its 2 instance(s) on CPU",
    )


def test_gpu_only_backend_refuses_without_a_gpu_or_on_cpu() -> None:
    with pytest.raises(ConfigError, match=r"sees no GPU .*the tensorrt backend needs one"):
        place_instances(config('{ name: "g" kind: KIND_GPU }'), NO_GPU, backend="tensorrt", needs_gpu=True)
    with pytest.raises(ConfigError, match="is KIND_CPU, but the tensorrt backend runs on GPUs only"):
        place_instances(config('{ name: "g" kind: KIND_CPU }'), TWO_GPUS, backend="tensorrt", needs_gpu=True)


def test_auto_and_model_kinds() -> None:
    auto = config("{ kind: KIND_AUTO count: 1 }")
    assert [s.device_id for s in place_instances(auto, TWO_GPUS, backend="x", needs_gpu=False).slots] == [0, 1]
    assert [s.device_id for s in place_instances(auto, NO_GPU, backend="x", needs_gpu=False).slots] == [None]
    model = config("{ kind: KIND_MODEL count: 2 }")
    assert [s.device_id for s in place_instances(model, TWO_GPUS, backend="x", needs_gpu=True).slots] == [0, 0]
    assert [s.device_id for s in place_instances(model, TWO_GPUS, backend="x", needs_gpu=False).slots] == [None, None]


def test_cpu_groups_and_a_repeated_gpu() -> None:
    placement = place_instances(config("{ kind: KIND_CPU count: 3 }"), NO_GPU, backend="x", needs_gpu=False)
    assert [(s.device_id, s.index) for s in placement.slots] == [(None, 0), (None, 1), (None, 2)]
    with pytest.raises(ConfigError, match="lists a GPU more than once"):
        place_instances(config("{ kind: KIND_GPU gpus: [ 1, 1 ] }"), TWO_GPUS, backend="x", needs_gpu=True)


def test_profiles_round_robin_or_as_listed() -> None:
    plain = Slot("g", 0, 0)
    assert [choose_profile(plain, i, 2) for i in range(4)] == [0, 1, 0, 1]
    assert [choose_profile(plain, i, 1) for i in range(3)] == [0, 0, 0]
    listed = Slot("g", 0, 0, ("2", "1"))
    assert [choose_profile(listed, i, 3) for i in range(3)] == [2, 1, 2]
    with pytest.raises(ConfigError, match=r"asks for optimization profile '5', but the engine has profiles 0..2"):
        choose_profile(Slot("g", 0, 0, ("5",)), 0, 3)
