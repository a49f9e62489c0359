"""Run an ensemble with decoupled steps: each response of a decoupled step runs the steps downstream of it.

The pattern Triton users build streaming pipelines with (preprocess -> decoupled generator -> postprocess):
every response the generator sends flows through the rest of the graph and becomes one ensemble response.
Like `executor.run_ensemble`, the only I/O is injected: `call_step` for a step with one response,
`stream_step` for a decoupled one, both bound by the caller to the version set the request started on.

How it runs: the steps that are ready and not decoupled run (concurrently when several are); when only
decoupled steps are left ready, the first one's responses are taken one at a time, and each continues on its
own copy of the tensors produced so far, through the remaining steps, until the ensemble's outputs are
complete and yielded. The steps downstream of one response finish before the next response enters them, so
the ensemble's responses keep the order the decoupled step sent them in (the decoupled model itself keeps
producing meanwhile). A second decoupled step downstream fans out again for each response of the first.
Zero responses from a decoupled step: no ensemble response. A failing step fails the request (after the
responses already yielded), with the step named, as in `run_ensemble`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ensemble_runtime.ensemble.executor import StepCaller, _call, _cancel, _collect, _store
from ensemble_runtime.ensemble.graph import EnsembleGraph
from ensemble_runtime.ensemble.steps import ExecutionPlan, PlannedStep, Step
from ensemble_runtime.errors import InferenceError, internal, invalid
from ensemble_runtime.inference import BackendRequest, ParamValue, Tensor

StepStreamer = Callable[[Step, BackendRequest], AsyncGenerator[dict[str, Tensor], None]]
_NO_PARAMETERS: Mapping[str, ParamValue] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class _Run:
    """What every branch of one request shares."""

    plan: ExecutionPlan
    call_step: StepCaller
    stream_step: StepStreamer
    streams: Callable[[Step], bool]
    request_id: str
    parameters: Mapping[str, ParamValue]


async def stream_ensemble(
    graph: EnsembleGraph,
    inputs: Mapping[str, Tensor],
    requested_outputs: Collection[str],
    call_step: StepCaller,
    stream_step: StepStreamer,
    *,
    streams: Callable[[Step], bool] | None = None,
    request_id: str = "",
    parameters: Mapping[str, ParamValue] = _NO_PARAMETERS,
) -> AsyncGenerator[dict[str, Tensor], None]:
    """Yield the requested ensemble outputs once per complete pass through the graph. `streams(step)` says
    which steps are decoupled (default: what the graph recorded from the step configs)."""
    plan = graph.plan(requested_outputs)
    for name in plan.required_inputs:
        if name not in inputs:
            raise invalid(f"ensemble '{plan.ensemble_name}': request is missing input '{name}'")
    run = _Run(plan, call_step, stream_step, streams or (lambda step: step.decoupled), request_id, parameters)
    waiting = [planned.dependency_count for planned in plan.steps]
    async with contextlib.aclosing(_advance(run, dict(inputs), waiting, list(plan.initial))) as branches:
        async for values in branches:
            yield _collect(plan, values)


async def _advance(
    run: _Run, values: dict[str, Tensor], waiting: list[int], ready: list[int]
) -> AsyncGenerator[dict[str, Tensor], None]:
    """Run what is ready; at a decoupled step, fork once per response. Yields the tensors of each branch
    that got through every planned step."""
    steps = run.plan.steps
    while True:
        plain = [position for position in ready if not run.streams(steps[position].step)]
        if plain:
            ready = [position for position in ready if position not in plain]
            for position, result in await _run_plain(run, [steps[p] for p in plain], values):
                _store(steps[position], result, values, waiting, ready)
            continue
        if not ready:
            yield values
            return
        planned = steps[ready[0]]
        rest = ready[1:]
        async with contextlib.aclosing(_responses(run, planned, values)) as responses:
            async for result in responses:
                branch_values, branch_waiting, branch_ready = dict(values), list(waiting), list(rest)
                _store(planned, result, branch_values, branch_waiting, branch_ready)
                async with contextlib.aclosing(_advance(run, branch_values, branch_waiting, branch_ready)) as done:
                    async for branch in done:
                        yield branch
        return


async def _run_plain(
    run: _Run, planned_steps: list[PlannedStep], values: Mapping[str, Tensor]
) -> list[tuple[int, dict[str, Tensor]]]:
    """Run steps with one response each, concurrently; the first failure cancels the others."""
    if len(planned_steps) == 1:
        planned = planned_steps[0]
        return [(planned.position, await _call(planned, values, run.call_step, run.request_id, run.parameters))]
    loop = asyncio.get_running_loop()
    tasks = {
        loop.create_task(_call(planned, values, run.call_step, run.request_id, run.parameters)): planned
        for planned in planned_steps
    }
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in tasks:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        return [(tasks[task].position, task.result()) for task in tasks]
    finally:
        running = {task: planned for task, planned in tasks.items() if not task.done()}
        if running:
            await _cancel(running)


async def _responses(run: _Run, planned: PlannedStep, values: Mapping[str, Tensor]) -> AsyncGenerator[dict[str, Tensor], None]:
    step_inputs = {name: values[tensor] for name, tensor in planned.inputs if tensor in values}
    request = BackendRequest(step_inputs, planned.requested, run.parameters, run.request_id)
    try:
        async with contextlib.aclosing(run.stream_step(planned.step, request)) as responses:
            async for result in responses:
                yield result
    except InferenceError as exc:
        raise InferenceError(exc.code, planned.failure_prefix + exc.message) from exc
    except Exception as exc:  # CancelledError is a BaseException and passes through
        raise internal(f"{planned.failure_prefix}{type(exc).__name__}: {exc}") from exc
