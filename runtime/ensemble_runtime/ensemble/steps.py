"""Ensemble steps: the validated `Step`, and execution plans (the steps a set of requested outputs needs, with
what the executor looks up precomputed).

Pure; built once per (graph, requested output set) and cached on the graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, eq=False, slots=True)
class Step:
    """One `ensemble_scheduling.step`, as validated.

    `input_map` maps the step model's input names to ensemble tensor names and `output_map` its output
    names to ensemble tensor names (Triton's direction for both). `model_version` is -1 for "the version
    the request's version set holds" or a pinned version.
    """

    index: int
    model_name: str
    model_version: int
    input_map: Mapping[str, str]
    output_map: Mapping[str, str]
    decoupled: bool = False  # the model answers with zero or many responses (ensemble/streaming.py)

    @property
    def label(self) -> str:
        """`step 0 (model 'pre')`: how validation messages name a step."""
        return f"step {self.index} (model '{self.model_name}')"

    @property
    def version_label(self) -> str:
        """`model 'pre' version 2` or `model 'pre' latest version`."""
        if self.model_version > 0:
            return f"model '{self.model_name}' version {self.model_version}"
        return f"model '{self.model_name}' latest version"


@dataclass(frozen=True, eq=False, slots=True)
class PlannedStep:
    """A step as one plan runs it. Positions index `ExecutionPlan.steps`."""

    step: Step
    position: int
    inputs: tuple[tuple[str, str], ...]  # (step input name, ensemble tensor name)
    requested: tuple[str, ...]  # step output names to ask the model for
    outputs: tuple[tuple[str, str], ...]  # (step output name, ensemble tensor name), requested only
    dependency_count: int  # distinct planned steps that produce one of its inputs
    dependents: tuple[int, ...]  # positions of planned steps that consume one of its outputs
    failure_prefix: str  # "ensemble 'e' step 0 (model 'pre' version 2) failed: "


@dataclass(frozen=True, eq=False, slots=True)
class ExecutionPlan:
    """The steps needed for `outputs`, in a topological order."""

    ensemble_name: str
    steps: tuple[PlannedStep, ...]
    initial: tuple[int, ...]  # positions runnable from ensemble inputs alone
    outputs: tuple[str, ...]  # ensemble outputs this plan produces (the requested ones)
    required_inputs: tuple[str, ...]  # non-optional ensemble inputs some planned step reads
    optional_inputs: frozenset[str]  # optional ensemble inputs: absent ones are not passed on
    serial: bool = False  # never two steps in flight: each step starts only after the one before it ended


def make_plan(
    ensemble_name: str,
    steps: Sequence[Step],
    topological_order: Sequence[int],
    producer: Mapping[str, int],
    ensemble_inputs: Mapping[str, bool],
    outputs: tuple[str, ...],
) -> ExecutionPlan:
    """Backwards closure from `outputs`: only steps that contribute to them, asked only for what is used.

    `producer` maps each step-produced tensor to its step index; `ensemble_inputs` maps each ensemble
    input name to whether it is optional.
    """
    needed: set[int] = set()
    pending = list(outputs)
    wanted_tensors: set[str] = set(outputs)
    while pending:
        tensor = pending.pop()
        index = producer.get(tensor)
        if index is None or index in needed:
            continue
        needed.add(index)
        for source in steps[index].input_map.values():
            wanted_tensors.add(source)
            pending.append(source)

    order = [index for index in topological_order if index in needed]
    position_of = {index: position for position, index in enumerate(order)}
    dependents: dict[int, set[int]] = {position: set() for position in range(len(order))}
    dependency_count: dict[int, int] = {}
    for position, index in enumerate(order):
        upstream = {producer[t] for t in steps[index].input_map.values() if t in producer}
        dependency_count[position] = len(upstream)
        for upstream_index in upstream:
            dependents[position_of[upstream_index]].add(position)

    planned: list[PlannedStep] = []
    for position, index in enumerate(order):
        step = steps[index]
        outs = tuple((name, tensor) for name, tensor in step.output_map.items() if tensor in wanted_tensors)
        planned.append(
            PlannedStep(
                step=step,
                position=position,
                inputs=tuple(step.input_map.items()),
                requested=tuple(name for name, _ in outs),
                outputs=outs,
                dependency_count=dependency_count[position],
                dependents=tuple(sorted(dependents[position])),
                failure_prefix=(
                    f"ensemble '{ensemble_name}' step {step.index} ({step.version_label}) failed: "
                ),
            )
        )
    read = {tensor for index in needed for tensor in steps[index].input_map.values()}
    initial = tuple(p.position for p in planned if p.dependency_count == 0)
    return ExecutionPlan(
        ensemble_name=ensemble_name,
        steps=tuple(planned),
        initial=initial,
        outputs=outputs,
        required_inputs=tuple(
            name for name, optional in ensemble_inputs.items() if name in read and not optional
        ),
        optional_inputs=frozenset(name for name, optional in ensemble_inputs.items() if optional),
        serial=runs_serially(planned, initial),
    )


def runs_serially(planned: Sequence[PlannedStep], initial: Sequence[int]) -> bool:
    """Whether running the plan as `EnsembleRun` does (a step starts once its producers ended) never has two
    steps in flight: at most one step is ready at the start and after each step ends."""
    waiting = [p.dependency_count for p in planned]
    ready = list(initial)
    while ready:
        if len(ready) > 1:
            return False
        ended = ready.pop()
        for position in planned[ended].dependents:
            waiting[position] -= 1
            if waiting[position] == 0:
                ready.append(position)
    return True


def frozen_map(items: Mapping[str, str]) -> Mapping[str, str]:
    """A read-only copy, so a Step cannot be changed after validation."""
    return MappingProxyType(dict(items))
