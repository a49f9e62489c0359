"""instance_slots: the config's own view of its instances (the Python backend's names, the instance cap)."""

from __future__ import annotations

from ensemble_runtime.backends.base import InstanceSlot, instance_slots
from ensemble_runtime.config.model_config import apply_defaults, parse_config_text


def _slots(text: str) -> list[InstanceSlot]:
    return instance_slots(apply_defaults(parse_config_text(text), "m"))


def test_gpu_groups_count_per_listed_gpu_and_other_groups_count_once() -> None:
    slots = _slots(
        'name: "m" backend: "python" instance_group [ { name: "g" kind: KIND_GPU count: 2 gpus: [0, 1] },'
        ' { name: "c" kind: KIND_CPU count: 3 } ]'
    )
    assert [(s.kind, s.name, s.device_id) for s in slots] == [
        ("GPU", "g_0", 0), ("GPU", "g_1", 0), ("GPU", "g_2", 1), ("GPU", "g_3", 1),
        ("CPU", "c_0", 0), ("CPU", "c_1", 0), ("CPU", "c_2", 0),
    ]  # fmt: skip


def test_a_config_without_groups_gets_one_instance() -> None:
    assert len(_slots('name: "m" backend: "python"')) == 1
