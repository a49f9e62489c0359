"""Ensemble graphs: validate `ensemble_scheduling` against the step models' configs and plan executions. Pure.

The graph rules themselves (maps, producers, types and shapes, batching, cycles) are ensemble_contract.graph,
the same ones the operator's webhook applies at admission; this module adds what only a loaded repository
knows (the step models exist, pinned versions are available) and builds the execution plan.
Nested ensembles (a step whose model is itself an ensemble) are refused. A decoupled step model makes the
ensemble decoupled: each of its responses runs the steps downstream of it (ensemble/streaming.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ensemble_contract.graph import Graph, GraphStep, StepModel, Tensor, check_graph
from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError, ModelConfig, is_ensemble
from ensemble_runtime.ensemble.steps import ExecutionPlan, Step, frozen_map, make_plan
from ensemble_runtime.errors import invalid

__all__ = ["EnsembleGraph", "ExecutionPlan", "Step", "build_graph"]

_PLAN_CACHE_LIMIT = 256  # distinct requested-output sets cached per graph


@dataclass(frozen=True, eq=False, slots=True)
class EnsembleGraph:
    """A validated ensemble. Tensor names are ensemble tensor names."""

    name: str
    steps: tuple[Step, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    producer: Mapping[str, int]  # step-produced tensor -> step index (ensemble inputs are not here)
    consumers: Mapping[str, tuple[int, ...]]  # tensor -> indices of steps reading it
    topological_order: tuple[int, ...]
    optional_inputs: frozenset[str] = frozenset()
    decoupled: bool = False  # a step answers with zero or many responses, so the ensemble does too (stream only)
    _plans: dict[frozenset[str], ExecutionPlan] = field(default_factory=dict, repr=False)

    def step_models(self) -> set[str]:
        """Names of the models the steps call (what must be ready before the ensemble is)."""
        return {step.model_name for step in self.steps}

    def plan(self, requested_outputs: Collection[str]) -> ExecutionPlan:
        """The steps needed for `requested_outputs` (empty: all outputs); cached per requested set."""
        key = frozenset(requested_outputs)
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        for name in sorted(key):
            if name not in self.outputs:
                raise invalid(
                    f"ensemble '{self.name}' has no output '{name}' (outputs: {', '.join(self.outputs)})"
                )
        outputs = tuple(o for o in self.outputs if o in key) if key else self.outputs
        plan = make_plan(
            self.name,
            self.steps,
            self.topological_order,
            self.producer,
            {name: name in self.optional_inputs for name in self.inputs},
            outputs,
        )
        if len(self._plans) < _PLAN_CACHE_LIMIT:
            self._plans[key] = plan
        return plan


def build_graph(
    ensemble_config: ModelConfig,
    step_configs: Mapping[str, ModelConfig],
    available_versions: Mapping[str, Collection[int]],
) -> EnsembleGraph:
    """Validate an ensemble config against its step models; raise ConfigError naming step and tensor."""
    name = ensemble_config.name
    where = f"ensemble '{name}'"
    if not is_ensemble(ensemble_config):
        raise ConfigError(f"model '{name}' is not an ensemble (platform '{ensemble_config.platform}')")
    if not ensemble_config.ensemble_scheduling.step:
        raise ConfigError(f"{where}: ensemble_scheduling has no step")
    steps = [
        _check_step(where, index, raw, step_configs, available_versions)
        for index, raw in enumerate(ensemble_config.ensemble_scheduling.step)
    ]
    graph = Graph(
        max_batch_size=ensemble_config.max_batch_size,
        inputs=tuple(_tensor(t) for t in ensemble_config.input),
        outputs=tuple(_tensor(t) for t in ensemble_config.output),
        steps=tuple(
            GraphStep(step.label, step.model_name, step.input_map, step.output_map) for step in steps
        ),
    )
    problems = check_graph(graph, {s.model_name: _step_model(step_configs[s.model_name]) for s in steps})
    if problems:
        raise ConfigError(f"{where}: {problems[0].message}")
    producer = {tensor: step.index for step in steps for tensor in step.output_map.values()}
    consumers: dict[str, list[int]] = {}
    for step in steps:
        for tensor in step.input_map.values():
            consumers.setdefault(tensor, []).append(step.index)
    order = _topological_order(steps, producer)
    outputs = tuple(t.name for t in ensemble_config.output)
    return EnsembleGraph(
        name=name,
        steps=tuple(steps),
        inputs=tuple(t.name for t in ensemble_config.input),
        outputs=outputs,
        producer=MappingProxyType(producer),
        consumers=MappingProxyType({tensor: tuple(indices) for tensor, indices in consumers.items()}),
        topological_order=order,
        optional_inputs=frozenset(t.name for t in ensemble_config.input if t.optional),
        decoupled=any(step.decoupled for step in steps),
    )


def _check_step(
    where: str,
    index: int,
    raw: Any,
    step_configs: Mapping[str, ModelConfig],
    available_versions: Mapping[str, Collection[int]],
) -> Step:
    model_name: str = raw.model_name
    label = f"step {index} (model '{model_name}')"
    if not model_name:
        raise ConfigError(f"{where}: step {index} has no model_name")
    model = step_configs.get(model_name)
    if model is None:
        raise ConfigError(f"{where}: {label}: model '{model_name}' does not exist in the repository")
    version = int(raw.model_version)
    if version < -1:
        raise ConfigError(f"{where}: {label}: model_version {version} must be -1 (latest) or a version")
    if version > 0 and version not in available_versions.get(model_name, ()):
        have = ", ".join(str(v) for v in sorted(available_versions.get(model_name, ()))) or "none"
        raise ConfigError(
            f"{where}: {label}: pinned model_version {version} is not available (available: {have})"
        )
    if is_ensemble(model):
        raise ConfigError(
            f"{where}: {label}: model '{model_name}' is itself an ensemble; nested ensembles are not "
            "supported, list its steps in this ensemble instead"
        )
    return Step(
        index=index,
        model_name=model_name,
        model_version=version if version > 0 else -1,
        input_map=frozen_map(raw.input_map),
        output_map=frozen_map(raw.output_map),
        decoupled=model.model_transaction_policy.decoupled,
    )


def _data_type(value: int) -> str:
    try:
        return str(mc.DataType.Name(value))
    except ValueError:
        return f"TYPE_{value}"


def _tensor(tensor: Any) -> Tensor:
    reshape = tuple(int(d) for d in tensor.reshape.shape) if tensor.HasField("reshape") else None
    optional = bool(tensor.optional) if isinstance(tensor, mc.ModelInput) else False
    return Tensor(tensor.name, _data_type(int(tensor.data_type)), tuple(int(d) for d in tensor.dims), reshape, optional)


def _step_model(config: ModelConfig) -> StepModel:
    return StepModel(
        inputs=tuple(_tensor(t) for t in config.input),
        outputs=tuple(_tensor(t) for t in config.output),
        max_batch_size=config.max_batch_size,
    )


def _topological_order(steps: list[Step], producer: Mapping[str, int]) -> tuple[int, ...]:
    """Kahn's algorithm over steps (acyclic: check_graph refused cycles), lowest index first among ready ones."""
    upstream = [{producer[t] for t in s.input_map.values() if t in producer} for s in steps]
    downstream: list[list[int]] = [[] for _ in steps]
    for index, sources in enumerate(upstream):
        for source in sorted(sources):
            downstream[source].append(index)
    remaining = [len(sources) for sources in upstream]
    ready = [index for index, count in enumerate(remaining) if count == 0]
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for nxt in downstream[index]:
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                heapq.heappush(ready, nxt)
    return tuple(order)
