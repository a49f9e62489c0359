"""The JSON documents of the KServe v2 / Triton HTTP API besides inference: model metadata, model config,
statistics, the repository index and the load request. Pure; bodies are parsed with `http_codec.parse_json`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import descriptor as pbd
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.names import load_failed
from ensemble_runtime.errors import ErrorCode, InferenceError, internal, invalid
from ensemble_runtime.protocol.http_codec import parse_json
from ensemble_runtime.repository_index import IndexEntry
from ensemble_runtime.stats import Duration, ModelStats
from ensemble_runtime.validation import ModelSignature

_INT64 = frozenset({pbd.FieldDescriptor.CPPTYPE_INT64, pbd.FieldDescriptor.CPPTYPE_UINT64})
_INFER_STATS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit",
                "cache_miss")
_BATCH_STATS = ("compute_input", "compute_infer", "compute_output")


def model_metadata(sig: ModelSignature, config: mc.ModelConfig, versions: Iterable[int]) -> dict[str, Any]:
    def tensors(specs: Iterable[Any]) -> list[dict[str, Any]]:
        return [{"name": s.name, "datatype": s.wire_type, "shape": sig.full_dims(s)} for s in specs]

    return {
        "name": config.name,
        "versions": [str(v) for v in versions],
        "platform": config.platform or config.backend,
        "inputs": tensors(sig.inputs.values()),
        "outputs": tensors(sig.outputs.values()),
    }


def _int64_as_numbers(value: dict[str, Any], descriptor: pbd.Descriptor) -> None:
    """In place: protobuf's JSON writes 64-bit integers as strings; Triton's config JSON writes numbers."""
    for key, item in value.items():
        fd = descriptor.fields_by_name.get(key)
        if fd is None:
            continue
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            inner = fd.message_type.fields_by_name["value"].message_type
            if inner is not None:
                for entry in item.values():
                    _int64_as_numbers(entry, inner)
        elif fd.message_type is not None:
            for entry in item if isinstance(item, list) else [item]:
                _int64_as_numbers(entry, fd.message_type)
        elif fd.cpp_type in _INT64:
            value[key] = [int(v) for v in item] if isinstance(item, list) else int(item)


def model_config_json(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's HTTP API gives it: proto field names, defaults printed, int64 as numbers."""
    raw = json_format.MessageToDict(config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    _int64_as_numbers(raw, mc.ModelConfig.DESCRIPTOR)
    return raw


def _durations(source: object, names: Iterable[str]) -> dict[str, dict[str, int]]:
    """{name: {count, ns}} for the Duration fields `names` of `source` (zeros where it has none)."""
    durations: dict[str, Duration] = {n: getattr(source, n, Duration()) for n in names}
    return {n: {"count": d.count, "ns": d.ns} for n, d in durations.items()}


def model_statistics(versions: Iterable[tuple[str, int, ModelStats]]) -> dict[str, Any]:
    """Triton's statistics JSON for (model, version, stats) triples."""
    return {
        "model_stats": [
            {
                "name": name,
                "version": str(version),
                "last_inference": s.last_inference_ms,
                "inference_count": s.inference_count,
                "execution_count": s.execution_count,
                "inference_stats": _durations(s, _INFER_STATS),
                "response_stats": {},  # per-response statistics: decoupled models only in Triton
                "batch_stats": [
                    {"batch_size": size, **_durations(b, _BATCH_STATS)} for size, b in sorted(s.batches.items())
                ],
                "memory_usage": [],
            }
            for name, version, s in versions
        ]
    }


def repository_index(entries: Iterable[IndexEntry]) -> list[dict[str, str]]:
    """Triton's index: `name` always; `version`, `state`, `reason` where known."""
    fields = ("name", "version", "state", "reason")
    return [{k: getattr(e, k) for k in fields if k == "name" or getattr(e, k)} for e in entries]


def index_ready_only(body: bytes) -> bool:
    ready = parse_json(body, "the repository index request").get("ready", False)
    if not isinstance(ready, bool):
        raise invalid("'ready' of the repository index request must be a boolean")
    return ready


def load_config_override(body: bytes, model: str) -> str | None:
    """The `parameters.config` JSON model config of a load request, as config.pbtxt text (None if absent)."""
    request = parse_json(body, f"the load request for '{model}'")
    params = request.get("parameters") or {}
    if not isinstance(params, dict):
        raise invalid(f"'parameters' of the load request for '{model}' must be a JSON object")
    if any(key.startswith("file:") for key in params):
        raise InferenceError(
            ErrorCode.UNIMPLEMENTED,
            f"load request for '{model}': model files in the request ('file:' parameters) are not supported",
        )
    raw = params.get("config")
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise invalid(f"load request for '{model}': 'config' must be a JSON model config in a string")
    config = mc.ModelConfig()
    try:
        json_format.Parse(raw, config)
    except (json_format.ParseError, RecursionError) as exc:
        # Triton answers 500 "failed to load '<model>', ..." (clients check for "failed to load")
        raise internal(load_failed(model, f"'config' is not a valid JSON model config: {exc}")) from None
    return text_format.MessageToString(config)
