"""Triton's model-config JSON (as `initialize` sees it) and `auto_complete_config` support."""

from __future__ import annotations

import copy
import json
from typing import Any

from google.protobuf import descriptor, json_format, message
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError

_INT64_TYPES = frozenset(
    {
        descriptor.FieldDescriptor.TYPE_INT64,
        descriptor.FieldDescriptor.TYPE_UINT64,
        descriptor.FieldDescriptor.TYPE_SINT64,
        descriptor.FieldDescriptor.TYPE_FIXED64,
        descriptor.FieldDescriptor.TYPE_SFIXED64,
    }
)


def triton_config_dict(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton hands it to Python models: every field present, 64-bit ints as numbers."""
    data = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    _numbers_for_int64(config.DESCRIPTOR, data)
    return data


def triton_config_json(config: mc.ModelConfig) -> str:
    return json.dumps(triton_config_dict(config))


def _numbers_for_int64(desc: descriptor.Descriptor, data: dict[str, Any]) -> None:
    for key, value in data.items():
        field = desc.fields_by_name.get(key)
        if field is None:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for map_key, item in value.items():
                value[map_key] = _convert(value_field, item)
        elif isinstance(value, list):
            data[key] = [_convert(field, item) for item in value]
        else:
            data[key] = _convert(field, value)


def _convert(field: descriptor.FieldDescriptor, value: Any) -> Any:
    if field.message_type is not None and isinstance(value, dict):
        _numbers_for_int64(field.message_type, value)
        return value
    if field.type in _INT64_TYPES and isinstance(value, str):
        return int(value)
    return value


class ModelConfig:
    """What `TritonPythonModel.auto_complete_config` receives and returns (Triton's rules for each edit)."""

    def __init__(self, model_config: str | dict[str, Any]) -> None:
        parsed = json.loads(model_config) if isinstance(model_config, str) else copy.deepcopy(model_config)
        parsed.setdefault("name", "")
        parsed.setdefault("max_batch_size", 0)
        parsed.setdefault("input", [])
        parsed.setdefault("output", [])
        self._config: dict[str, Any] = parsed

    def as_dict(self) -> dict[str, Any]:
        return self._config

    def set_max_batch_size(self, max_batch_size: int) -> None:
        current = int(self._config.get("max_batch_size", 0))
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in auto-complete-config function "
                f"for model '{self._config['name']}' specified max_batch_size {max_batch_size}"
            )
        self._config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        for other in ("sequence_batching", "ensemble_scheduling"):
            if self._config.get(other):
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{other}', but auto-complete-config "
                    f"function for model '{self._config['name']}' tries to set it as 'dynamic_batching'"
                )
        if not self._config.get("dynamic_batching"):
            self._config["dynamic_batching"] = {}

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        self._config["model_transaction_policy"] = dict(transaction_policy_dict)

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output, ("name", "data_type", "dims"))

    def _add(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        model = self._config["name"]
        extra = sorted(set(tensor) - set(allowed))
        if extra:
            raise ValueError(
                f"{kind} '{tensor.get('name')}' in auto-complete-config function for model '{model}' "
                f"has properties other than {', '.join(allowed)}: {', '.join(extra)}"
            )
        for required in ("name", "data_type", "dims"):
            if required not in tensor:
                raise ValueError(
                    f"{kind} '{tensor.get('name', '')}' in auto-complete-config function for model '{model}' "
                    f"is missing '{required}' property"
                )
        for current in self._config[kind]:
            if current.get("name") != tensor["name"]:
                continue
            declared_type = current.get("data_type", "TYPE_INVALID")
            if declared_type not in ("TYPE_INVALID", tensor["data_type"]):
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype {declared_type} for "
                    f"{kind} '{tensor['name']}', model provides {tensor['data_type']}"
                )
            declared_dims = [int(d) for d in current.get("dims", [])]
            if declared_dims and declared_dims != [int(d) for d in tensor["dims"]]:
                raise ValueError(
                    f"model '{model}', tensor '{tensor['name']}': the model expects dims {tensor['dims']} "
                    f"but the model configuration specifies dims {declared_dims}"
                )
            current.update(copy.deepcopy(tensor))
            return
        self._config[kind].append(copy.deepcopy(tensor))


def to_model_config(completed: ModelConfig, source: str) -> mc.ModelConfig:
    """Parse what `auto_complete_config` returned back into the protobuf config."""
    config = mc.ModelConfig()
    try:
        json_format.ParseDict(completed.as_dict(), config)
    except (json_format.ParseError, message.Error, TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: auto_complete_config produced an invalid config: {exc}") from None
    return config
