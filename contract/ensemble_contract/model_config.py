"""The part of Triton's ModelConfig message (`inference.ModelConfig`, common `protobuf/model_config.proto`) that
the operator writes into config.pbtxt, as a protobuf message class, and its text form. Pure.

The runtime parses config.pbtxt with Triton's full message (tritonclient's model_config_pb2); the operator only
needs the fields it renders and must not depend on tritonclient (its package imports grpc). So the subset is
described here in code, with Triton's own names, field numbers, types and enum values, and registered in a pool
of its own: never the default pool, where tritonclient registers the full `inference.ModelConfig` under the
same name. tests/unit/contract/test_model_config.py holds every field and enum value here to Triton's
descriptor, and the text written here to what the runtime parses.

`model_config_text` takes the fields as ModelConfig's constructor does (field names, nested dicts for messages
and maps, enum value names) and returns protobuf's text format, all ASCII (non-ASCII characters as octal escapes
of their UTF-8 bytes). A field name, enum name or value the message cannot hold raises ValueError.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import cache
from typing import Any, TypeAlias

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import Message

PACKAGE = "inference"
# protobuf's upb backend keeps process-wide state behind these messages (the pool, the classes it makes lazily,
# map entry classes among them). The operator renders from several reconcile threads, and once (a CI run of
# 2026-11-25) text_format failed inside a map entry with "ModelDynamicBatching has no "key" field" and the
# process died soon after; rendering one message at a time takes microseconds and keeps them out of each other's
# way.
_RENDERING = threading.Lock()
FILE_NAME = "ensemble_contract/model_config_subset.proto"

_F = descriptor_pb2.FieldDescriptorProto
_Type: TypeAlias = descriptor_pb2.FieldDescriptorProto.Type.ValueType
STRING, INT32, UINT32, INT64, UINT64 = _F.TYPE_STRING, _F.TYPE_INT32, _F.TYPE_UINT32, _F.TYPE_INT64, _F.TYPE_UINT64
ENUM, MESSAGE = _F.TYPE_ENUM, _F.TYPE_MESSAGE

DATA_TYPES = (
    "TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32", "TYPE_UINT64", "TYPE_INT8",
    "TYPE_INT16", "TYPE_INT32", "TYPE_INT64", "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16",
)  # DataType, numbered 0..14 in this order
INSTANCE_KINDS = ("KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL")  # ModelInstanceGroup.Kind, 0..3


def _enum(values: descriptor_pb2.EnumDescriptorProto, name: str, names: tuple[str, ...]) -> None:
    values.name = name
    for number, value in enumerate(names):
        values.value.add(name=value, number=number)


def _field(
    message: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: _Type,
    *,
    repeated: bool = False,
    type_name: str = "",
    oneof: int | None = None,
) -> None:
    field = message.field.add(name=name, number=number, type=kind)
    field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
    if type_name:
        field.type_name = f".{PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof


def _map(
    message: descriptor_pb2.DescriptorProto, scope: str, name: str, number: int, value: _Type, value_type: str = ""
) -> None:
    """A map<string, value> field of `message` (`scope` is its name within the package): a repeated nested
    `<Name>Entry` message marked as a map entry, as protoc writes it."""
    entry_name = "".join(part.capitalize() for part in name.split("_")) + "Entry"
    entry = message.nested_type.add(name=entry_name)
    entry.options.map_entry = True
    _field(entry, "key", 1, STRING)
    _field(entry, "value", 2, value, type_name=value_type)
    _field(message, name, number, MESSAGE, repeated=True, type_name=f"{scope}.{entry_name}")


def _file() -> descriptor_pb2.FileDescriptorProto:
    """Triton's model_config.proto, cut down to the fields the operator renders (numbers as Triton's)."""
    file = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, package=PACKAGE, syntax="proto3")
    _enum(file.enum_type.add(), "DataType", DATA_TYPES)

    group = file.message_type.add(name="ModelInstanceGroup")
    _enum(group.enum_type.add(), "Kind", INSTANCE_KINDS)
    _field(group, "kind", 4, ENUM, type_name="ModelInstanceGroup.Kind")
    _field(group, "count", 2, INT32)
    _field(group, "gpus", 3, INT32, repeated=True)

    tensor_input = file.message_type.add(name="ModelInput")
    _field(tensor_input, "name", 1, STRING)
    _field(tensor_input, "data_type", 2, ENUM, type_name="DataType")
    _field(tensor_input, "dims", 4, INT64, repeated=True)

    tensor_output = file.message_type.add(name="ModelOutput")
    _field(tensor_output, "name", 1, STRING)
    _field(tensor_output, "data_type", 2, ENUM, type_name="DataType")
    _field(tensor_output, "dims", 3, INT64, repeated=True)

    policy = file.message_type.add(name="ModelVersionPolicy")
    _field(policy.nested_type.add(name="Latest"), "num_versions", 1, UINT32)
    policy.nested_type.add(name="All")
    _field(policy.nested_type.add(name="Specific"), "versions", 1, INT64, repeated=True)
    policy.oneof_decl.add(name="policy_choice")
    for number, choice in enumerate(("latest", "all", "specific"), start=1):
        _field(policy, choice, number, MESSAGE, type_name=f"ModelVersionPolicy.{choice.capitalize()}", oneof=0)

    batching = file.message_type.add(name="ModelDynamicBatching")
    _field(batching, "preferred_batch_size", 1, INT32, repeated=True)
    _field(batching, "max_queue_delay_microseconds", 2, UINT64)

    ensembling = file.message_type.add(name="ModelEnsembling")
    step = ensembling.nested_type.add(name="Step")
    _field(step, "model_name", 1, STRING)
    _field(step, "model_version", 2, INT64)
    _map(step, "ModelEnsembling.Step", "input_map", 3, STRING)
    _map(step, "ModelEnsembling.Step", "output_map", 4, STRING)
    _field(ensembling, "step", 1, MESSAGE, repeated=True, type_name="ModelEnsembling.Step")

    parameter = file.message_type.add(name="ModelParameter")
    _field(parameter, "string_value", 1, STRING)

    config = file.message_type.add(name="ModelConfig")
    _field(config, "name", 1, STRING)
    _field(config, "platform", 2, STRING)
    _field(config, "backend", 17, STRING)
    _field(config, "version_policy", 3, MESSAGE, type_name="ModelVersionPolicy")
    _field(config, "max_batch_size", 4, INT32)
    _field(config, "input", 5, MESSAGE, repeated=True, type_name="ModelInput")
    _field(config, "output", 6, MESSAGE, repeated=True, type_name="ModelOutput")
    config.oneof_decl.add(name="scheduling_choice")
    _field(config, "dynamic_batching", 11, MESSAGE, type_name="ModelDynamicBatching", oneof=0)
    _field(config, "ensemble_scheduling", 15, MESSAGE, type_name="ModelEnsembling", oneof=0)
    _field(config, "instance_group", 7, MESSAGE, repeated=True, type_name="ModelInstanceGroup")
    _map(config, "ModelConfig", "parameters", 14, MESSAGE, "ModelParameter")
    return file


@cache
def model_config_descriptor() -> Descriptor:
    """The subset's `inference.ModelConfig`, from a descriptor pool of its own (built once)."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return pool.FindMessageTypeByName(f"{PACKAGE}.ModelConfig")


def model_config_message(fields: Mapping[str, Any]) -> Message:
    """A ModelConfig (the subset) holding `fields`, given as its constructor takes them."""
    return message_factory.GetMessageClass(model_config_descriptor())(**fields)


def model_config_text(fields: Mapping[str, Any]) -> str:
    """config.pbtxt text (protobuf text format, ASCII) for `fields`; see the module docstring."""
    with _RENDERING:
        message = model_config_message(fields)
        return text_format.MessageToString(message, as_utf8=False, use_short_repeated_primitives=True)
