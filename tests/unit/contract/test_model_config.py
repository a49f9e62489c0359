"""ensemble_contract.model_config is Triton's ModelConfig, cut down: every message, field and enum value in the
subset matches tritonclient's model_config_pb2 (the message the runtime parses config.pbtxt with), so a drift on
either side fails here; and what the subset writes, Triton's full message reads back (text and wire)."""

from __future__ import annotations

import pytest
from ensemble_contract.model_config import model_config_descriptor, model_config_message, model_config_text
from google.protobuf import descriptor_pb2, descriptor_pool, text_format
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from tritonclient.grpc import model_config_pb2 as mc

TRITON = mc.ModelConfig.DESCRIPTOR


def _field_shape(field: FieldDescriptor) -> dict[str, object]:
    return {
        "number": field.number,
        "type": field.type,
        "repeated": field.is_repeated,
        "required": field.is_required,
        "presence": field.has_presence,
        "oneof": field.containing_oneof.name if field.containing_oneof else None,
        "message": field.message_type.full_name if field.message_type else None,
        "map": bool(field.message_type and field.message_type.GetOptions().map_entry),
        "enum": field.enum_type.full_name if field.enum_type else None,
    }


def _enum_values(enum: EnumDescriptor) -> list[tuple[str, int]]:
    return [(value.name, value.number) for value in enum.values]


def drift(ours: Descriptor, theirs: Descriptor) -> list[str]:
    """Every way `ours` (and the messages and enums its fields use) differs from Triton's message of that name."""
    problems: list[str] = []
    if ours.full_name != theirs.full_name:
        problems.append(f"{ours.full_name}: Triton's is {theirs.full_name}")
    for field in ours.fields:
        where = f"{ours.full_name}.{field.name}"
        triton = theirs.fields_by_name.get(field.name)
        if triton is None:
            problems.append(f"{where}: no such field in Triton's {theirs.full_name}")
            continue
        mine, its = _field_shape(field), _field_shape(triton)
        problems += [f"{where}: {key} {mine[key]!r}, Triton's {its[key]!r}" for key in mine if mine[key] != its[key]]
        if field.enum_type is not None and triton.enum_type is not None:
            mine_values, its_values = _enum_values(field.enum_type), _enum_values(triton.enum_type)
            if mine_values != its_values:
                problems.append(f"{where}: enum values {mine_values}, Triton's {its_values}")
        if field.message_type is not None and triton.message_type is not None:
            problems += drift(field.message_type, triton.message_type)
    return problems


def test_every_field_and_enum_value_is_tritons() -> None:
    assert drift(model_config_descriptor(), TRITON) == []


def test_the_subset_holds_the_fields_the_operator_renders() -> None:
    """What render/pbtxt.py writes: a field dropped from the subset would fail the render, and this test."""
    ours = model_config_descriptor()
    assert sorted(ours.fields_by_name) == sorted([
        "name", "platform", "backend", "version_policy", "max_batch_size", "input", "output", "instance_group",
        "dynamic_batching", "ensemble_scheduling", "parameters",
    ])
    scheduling = ours.fields_by_name["ensemble_scheduling"].message_type
    assert scheduling is not None
    step = scheduling.fields_by_name["step"].message_type
    assert step is not None
    assert sorted(step.fields_by_name) == ["input_map", "model_name", "model_version", "output_map"]


def _tampered(edit: str) -> Descriptor:
    """The subset with one deliberate drift, in a pool of its own."""
    file = descriptor_pb2.FileDescriptorProto()
    model_config_descriptor().file.CopyToProto(file)
    config = next(m for m in file.message_type if m.name == "ModelConfig")
    if edit == "number":
        next(f for f in config.field if f.name == "max_batch_size").number = 40
    elif edit == "type":
        next(f for f in config.field if f.name == "max_batch_size").type = descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    elif edit == "enum":
        data_type = next(e for e in file.enum_type if e.name == "DataType")
        data_type.value[-1].number = 99
    elif edit == "oneof":
        next(f for f in config.field if f.name == "dynamic_batching").ClearField("oneof_index")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return pool.FindMessageTypeByName("inference.ModelConfig")


def test_a_drift_is_caught() -> None:
    """The comparison can fail: a wrong number, type, enum value or oneof each shows."""
    assert drift(_tampered("number"), TRITON) == ["inference.ModelConfig.max_batch_size: number 40, Triton's 4"]
    assert drift(_tampered("type"), TRITON) == [
        f"inference.ModelConfig.max_batch_size: type {FieldDescriptor.TYPE_INT64}, Triton's {FieldDescriptor.TYPE_INT32}"
    ]
    assert any("TYPE_BF16', 99" in p for p in drift(_tampered("enum"), TRITON))
    assert any("dynamic_batching: oneof None, Triton's 'scheduling_choice'" in p for p in drift(_tampered("oneof"), TRITON))


def test_the_subset_lives_in_its_own_pool() -> None:
    """tritonclient registers the full inference.ModelConfig in the default pool; the subset never clashes."""
    ours = model_config_descriptor()
    assert ours.file.pool is not descriptor_pool.Default()
    assert descriptor_pool.Default().FindMessageTypeByName("inference.ModelConfig") is TRITON
    assert ours.full_name == TRITON.full_name


FULL = {
    "name": 'm "\\ é \U0001f600',
    "platform": "onnxruntime_onnx",
    "backend": "onnxruntime",
    "version_policy": {"specific": {"versions": [1, 3]}},
    "max_batch_size": 8,
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1, 3]}],
    "output": [{"name": "y", "data_type": "TYPE_STRING", "dims": [1]}],
    "instance_group": [{"count": 2, "kind": "KIND_GPU", "gpus": [0, 1]}],
    "dynamic_batching": {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 500},
    "parameters": {"k\n": {"string_value": "v'"}},
}


def test_tritons_message_reads_the_text_and_the_wire_alike() -> None:
    text = model_config_text(FULL)
    assert text.isascii()
    parsed = text_format.Parse(text, mc.ModelConfig())
    assert parsed == mc.ModelConfig.FromString(model_config_message(FULL).SerializeToString())
    assert parsed.name == FULL["name"] and parsed.parameters["k\n"].string_value == "v'"
    assert parsed.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert list(parsed.version_policy.specific.versions) == [1, 3]


@pytest.mark.parametrize(
    "fields", [{"max_batch_size": 2**31}, {"input": [{"data_type": "TYPE_NONE"}]}, {"runtime": "x"}]
)
def test_a_value_the_field_cannot_hold_is_refused(fields: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        model_config_text(fields)
