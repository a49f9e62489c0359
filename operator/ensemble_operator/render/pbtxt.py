"""Triton ModelConfig text (config.pbtxt) for Models and Ensembles (pure).

Each CR is turned into ModelConfig's fields and written by protobuf's text format through the message in
ensemble_contract.model_config (Triton's names and numbers), never assembled as text here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ensemble_contract.model_config import model_config_text

from ..api.v1alpha1 import EnsembleSpec, ModelSpec, TensorSpec, VersionPolicy, normalize_data_type


def _tensors(tensors: Sequence[TensorSpec]) -> list[dict[str, Any]]:
    return [{"name": t.name, "data_type": normalize_data_type(t.data_type), "dims": list(t.dims)} for t in tensors]


def _version_policy(policy: VersionPolicy) -> dict[str, Any]:
    if policy.latest is not None:
        return {"latest": {"num_versions": policy.latest.num_versions}}
    if policy.specific is not None:
        return {"specific": {"versions": list(policy.specific.versions)}}
    return {"all": {}}


def version_policy(policy: VersionPolicy) -> str:
    """The `version_policy` field alone, as config.pbtxt text."""
    return model_config_text({"version_policy": _version_policy(policy)})


def model_config(name: str, spec: ModelSpec) -> str:
    """The config.pbtxt overrides for one Model; fields the CR leaves unset are left to the repository."""
    fields: dict[str, Any] = {
        "name": name,
        "version_policy": _version_policy(spec.version_policy),
        "input": _tensors(spec.inputs),
        "output": _tensors(spec.outputs),
        "instance_group": [
            {"count": group.count, "kind": group.kind, "gpus": list(group.gpus)} for group in spec.instance_groups
        ],
        "parameters": {key: {"string_value": value} for key, value in spec.parameters.items()},
    }
    if spec.platform:
        fields["platform"] = spec.platform
    if spec.backend:
        fields["backend"] = spec.backend
    if spec.max_batch_size is not None:
        fields["max_batch_size"] = spec.max_batch_size
    if spec.dynamic_batching is not None:
        fields["dynamic_batching"] = {
            "preferred_batch_size": list(spec.dynamic_batching.preferred_batch_size),
            "max_queue_delay_microseconds": spec.dynamic_batching.max_queue_delay_microseconds,
        }
    return model_config_text(fields)


def ensemble_config(name: str, spec: EnsembleSpec) -> str:
    """The Triton ensemble ModelConfig for an Ensemble."""
    steps = [
        {
            "model_name": step.model_ref.name,
            "model_version": step.model_version,
            "input_map": dict(step.input_map),
            "output_map": dict(step.output_map),
        }
        for step in spec.steps
    ]
    return model_config_text(
        {
            "name": name,
            "platform": "ensemble",
            "max_batch_size": spec.max_batch_size,
            "input": _tensors(spec.inputs),
            "output": _tensors(spec.outputs),
            "ensemble_scheduling": {"step": steps},
        }
    )
