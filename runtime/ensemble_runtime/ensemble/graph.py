"""Ensemble graphs: validate `ensemble_scheduling` against the step models' configs and plan executions. Pure.

Follows Triton's ensemble validation (core `ensemble_utils.cc`, `model_config_utils.cc`):
- every model input is mapped unless `optional`; map keys must be the model's own inputs/outputs;
- an ensemble tensor has exactly one producer (an ensemble input or one step output), every consumed
  tensor and every ensemble output is produced, ensemble inputs and step outputs are all used;
- a step model that batches must allow at least the ensemble's max_batch_size; a non-batching model may
  sit in a batching ensemble when its full shape (with the leading batch -1) agrees;
- dtypes agree; shapes agree with -1 as a wildcard, compared without the batch dimension or, failing
  that, with it (full shapes); ensemble inputs/outputs compare their `reshape` shape where present.
Nested ensembles (a step whose model is itself an ensemble) are refused. A decoupled step model makes the
ensemble decoupled: each of its responses runs the steps downstream of it (ensemble/streaming.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from ensemble_runtime.config.model_config import ConfigError, ModelConfig, is_ensemble
from ensemble_runtime.ensemble.plan import ExecutionPlan, Step, frozen_map, make_plan
from ensemble_runtime.errors import invalid

__all__ = ["EnsembleGraph", "ExecutionPlan", "Step", "build_graph"]

_PLAN_CACHE_LIMIT = 256  # distinct requested-output sets cached per graph


@dataclass(frozen=True, slots=True)
class _TensorSpec:
    """What one side of an ensemble tensor declares: type and shape, and who declares it."""

    data_type: int
    dims: tuple[int, ...]
    batching: bool
    origin: str  # "step 0 (model 'pre') output 'OUT'" / "ensemble input 'IMAGE'"

    @property
    def full_dims(self) -> tuple[int, ...]:
        return (-1, *self.dims) if self.batching else self.dims

    def describe(self) -> str:
        return f"{mc.DataType.Name(self.data_type)} {_dims_text(self.full_dims)}"


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
    batching = ensemble_config.max_batch_size > 0

    # Producers: ensemble inputs first, then each step's outputs.
    specs: dict[str, _TensorSpec] = {}
    for tensor in ensemble_config.input:
        specs[tensor.name] = _spec(tensor, batching, f"ensemble input '{tensor.name}'", use_reshape=True)
    steps = [
        _check_step(where, index, raw, ensemble_config.max_batch_size, step_configs, available_versions)
        for index, raw in enumerate(ensemble_config.ensemble_scheduling.step)
    ]
    producer: dict[str, int] = {}
    for step in steps:
        model = step_configs[step.model_name]
        model_outputs = {t.name: t for t in model.output}
        for output_name, tensor in step.output_map.items():
            if tensor in specs:
                other = specs[tensor].origin
                raise ConfigError(
                    f"{where}: {step.label} output '{output_name}' writes ensemble tensor '{tensor}', "
                    f"which {other} already provides (a tensor has exactly one producer)"
                )
            specs[tensor] = _spec(
                model_outputs[output_name], model.max_batch_size > 0, f"{step.label} output '{output_name}'"
            )
            producer[tensor] = step.index

    # Consumers: step inputs and ensemble outputs must read something produced, of the same type/shape.
    consumers: dict[str, list[int]] = {}
    for step in steps:
        model = step_configs[step.model_name]
        model_inputs = {t.name: t for t in model.input}
        for input_name, tensor in step.input_map.items():
            consumer = _spec(
                model_inputs[input_name], model.max_batch_size > 0, f"{step.label} input '{input_name}'"
            )
            if tensor not in specs:
                raise ConfigError(
                    f"{where}: {consumer.origin} reads ensemble tensor '{tensor}', which is neither an "
                    "ensemble input nor any step's output"
                )
            _check_consistent(where, tensor, specs[tensor], consumer)
            consumers.setdefault(tensor, []).append(step.index)
    for tensor in ensemble_config.output:
        output = _spec(tensor, batching, f"ensemble output '{tensor.name}'", use_reshape=True)
        if tensor.name not in producer:
            source = (
                "is an ensemble input, not a step output" if tensor.name in specs else "no step writes it"
            )
            raise ConfigError(f"{where}: nothing produces ensemble output '{tensor.name}' ({source})")
        _check_consistent(where, tensor.name, specs[tensor.name], output)

    order = _topological_order(where, steps, producer)
    outputs = tuple(t.name for t in ensemble_config.output)
    for tensor, spec in specs.items():
        if tensor not in consumers and tensor not in outputs:
            raise ConfigError(f"{where}: ensemble tensor '{tensor}' ({spec.origin}) is never used")
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
    ensemble_max_batch: int,
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
    if 0 < model.max_batch_size < ensemble_max_batch:
        raise ConfigError(
            f"{where}: {label}: ensemble allows max_batch_size {ensemble_max_batch} but model "
            f"'{model_name}' only allows {model.max_batch_size}"
        )
    if not raw.input_map:
        raise ConfigError(f"{where}: {label} has no input_map")
    if not raw.output_map:
        raise ConfigError(f"{where}: {label} has no output_map")
    inputs = {t.name for t in model.input}
    outputs = {t.name for t in model.output}
    known = ", ".join(sorted(outputs))
    for input_name, tensor in sorted(raw.input_map.items()):
        if input_name not in inputs:
            raise ConfigError(
                f"{where}: {label} input_map maps ensemble tensor '{tensor}' to '{input_name}', which is "
                f"not an input of model '{model_name}' (inputs: {', '.join(sorted(inputs))})"
            )
    for output_name, tensor in sorted(raw.output_map.items()):
        if output_name not in outputs:
            raise ConfigError(
                f"{where}: {label} output_map maps '{output_name}' to ensemble tensor '{tensor}', but "
                f"'{output_name}' is not an output of model '{model_name}' (outputs: {known})"
            )
    for tensor in model.input:
        if tensor.name not in raw.input_map and not tensor.optional:
            raise ConfigError(f"{where}: {label} input '{tensor.name}' is not mapped to any ensemble tensor")
    seen: dict[str, str] = {}
    for output_name, tensor in sorted(raw.output_map.items()):
        if tensor in seen:
            raise ConfigError(
                f"{where}: {label} outputs '{seen[tensor]}' and '{output_name}' both write ensemble "
                f"tensor '{tensor}'"
            )
        seen[tensor] = output_name
    return Step(
        index=index,
        model_name=model_name,
        model_version=version if version > 0 else -1,
        input_map=frozen_map(raw.input_map),
        output_map=frozen_map(raw.output_map),
        decoupled=model.model_transaction_policy.decoupled,
    )


def _spec(tensor: Any, batching: bool, origin: str, *, use_reshape: bool = False) -> _TensorSpec:
    dims = tensor.reshape.shape if use_reshape and tensor.HasField("reshape") else tensor.dims
    return _TensorSpec(int(tensor.data_type), tuple(int(d) for d in dims), batching, origin)


def _check_consistent(where: str, tensor: str, producer: _TensorSpec, consumer: _TensorSpec) -> None:
    if producer.data_type != consumer.data_type:
        raise ConfigError(
            f"{where}: ensemble tensor '{tensor}': data type mismatch: {producer.origin} produces "
            f"{mc.DataType.Name(producer.data_type)} but {consumer.origin} expects "
            f"{mc.DataType.Name(consumer.data_type)}"
        )
    if _dims_match(producer.dims, consumer.dims) or _dims_match(producer.full_dims, consumer.full_dims):
        return
    raise ConfigError(
        f"{where}: ensemble tensor '{tensor}': shape mismatch: {producer.origin} produces "
        f"{producer.describe()} but {consumer.origin} expects {consumer.describe()} "
        "(shapes include the batch dimension as -1 where the model batches)"
    )


def _dims_match(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or x == -1 or y == -1 for x, y in zip(a, b, strict=True))


def _dims_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _topological_order(where: str, steps: list[Step], producer: Mapping[str, int]) -> tuple[int, ...]:
    """Kahn's algorithm over steps, lowest index first among ready ones; on a cycle, name its steps."""
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
    if len(order) == len(steps):
        return tuple(order)
    cycle = _find_cycle(upstream, {i for i, count in enumerate(remaining) if count > 0})
    path = " -> ".join(steps[i].label for i in cycle)
    raise ConfigError(f"{where}: steps form a cycle: {path}")


def _find_cycle(upstream: list[set[int]], stuck: set[int]) -> list[int]:
    """Walk upstream edges among `stuck` steps until a step repeats: the walk from there is a cycle."""
    current = min(stuck)
    seen: dict[int, int] = {}
    walk: list[int] = []
    while current not in seen:
        seen[current] = len(walk)
        walk.append(current)
        current = min(s for s in upstream[current] if s in stuck)
    cycle = walk[seen[current] :]
    cycle.reverse()  # walked against the data flow
    return [*cycle, cycle[0]]
