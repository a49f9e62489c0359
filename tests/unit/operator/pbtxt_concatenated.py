"""The config.pbtxt renderer as it was before issue 14 (text assembled by concatenation, with its own string
escaping), kept only as the reference for test_pbtxt_parity: the runtime must read what the protobuf-based
renderer writes exactly as it read this. Not product code; nothing else imports it."""

from __future__ import annotations

from collections.abc import Sequence

from ensemble_operator.api.v1alpha1 import EnsembleSpec, ModelSpec, TensorSpec, VersionPolicy, normalize_data_type

_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _str(value: str) -> str:
    """A protobuf text-format string literal, all ASCII: printable ASCII as is, the named escapes, and every
    other character as octal escapes of its UTF-8 bytes (protobuf's own C-style escaping). A non-BMP character
    (an emoji) is one 4-byte sequence, never a surrogate pair as JSON would write it, which parsers reject."""
    out: list[str] = []
    for char in value:
        if char in _NAMED_ESCAPES:
            out.append(_NAMED_ESCAPES[char])
        elif " " <= char <= "~":
            out.append(char)
        else:
            out.extend(f"\\{byte:03o}" for byte in char.encode("utf-8"))
    return '"' + "".join(out) + '"'


def _ints(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _tensors(field: str, tensors: Sequence[TensorSpec]) -> list[str]:
    if not tensors:
        return []
    lines = [f"{field} ["]
    for i, t in enumerate(tensors):
        sep = "," if i < len(tensors) - 1 else ""
        lines.append(
            f"  {{ name: {_str(t.name)} data_type: {normalize_data_type(t.data_type)}"
            f" dims: {_ints(t.dims)} }}{sep}"
        )
    lines.append("]")
    return lines


def version_policy(policy: VersionPolicy) -> str:
    if policy.latest is not None:
        return f"version_policy: {{ latest: {{ num_versions: {policy.latest.num_versions} }} }}"
    if policy.specific is not None:
        return f"version_policy: {{ specific: {{ versions: {_ints(policy.specific.versions)} }} }}"
    return "version_policy: { all: {} }"


def model_config(name: str, spec: ModelSpec) -> str:
    """The config.pbtxt overrides for one Model; fields the CR leaves unset are left to the repository."""
    lines = [f"name: {_str(name)}"]
    if spec.platform:
        lines.append(f"platform: {_str(spec.platform)}")
    if spec.backend:
        lines.append(f"backend: {_str(spec.backend)}")
    if spec.max_batch_size is not None:
        lines.append(f"max_batch_size: {spec.max_batch_size}")
    lines.append(version_policy(spec.version_policy))
    lines += _tensors("input", spec.inputs)
    lines += _tensors("output", spec.outputs)
    for group in spec.instance_groups:
        gpus = f" gpus: {_ints(group.gpus)}" if group.gpus else ""
        lines.append(f"instance_group {{ count: {group.count} kind: {group.kind}{gpus} }}")
    if spec.dynamic_batching is not None:
        db = spec.dynamic_batching
        preferred = (
            f"preferred_batch_size: {_ints(db.preferred_batch_size)} " if db.preferred_batch_size else ""
        )
        lines.append(
            f"dynamic_batching {{ {preferred}"
            f"max_queue_delay_microseconds: {db.max_queue_delay_microseconds} }}"
        )
    for key, value in sorted(spec.parameters.items()):
        lines.append(f"parameters {{ key: {_str(key)} value: {{ string_value: {_str(value)} }} }}")
    return "\n".join(lines) + "\n"


def _map(field: str, mapping: dict[str, str]) -> list[str]:
    return [f"      {field} {{ key: {_str(k)} value: {_str(v)} }}" for k, v in sorted(mapping.items())]


def ensemble_config(name: str, spec: EnsembleSpec) -> str:
    """The Triton ensemble ModelConfig for an Ensemble."""
    lines = [f"name: {_str(name)}", 'platform: "ensemble"', f"max_batch_size: {spec.max_batch_size}"]
    lines += _tensors("input", spec.inputs)
    lines += _tensors("output", spec.outputs)
    lines.append("ensemble_scheduling {")
    lines.append("  step [")
    for i, step in enumerate(spec.steps):
        lines.append("    {")
        lines.append(f"      model_name: {_str(step.model_ref.name)}")
        lines.append(f"      model_version: {step.model_version}")
        lines += _map("input_map", step.input_map)
        lines += _map("output_map", step.output_map)
        lines.append("    }" + ("," if i < len(spec.steps) - 1 else ""))
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"
