"""Run an ensemble request: an event-driven DAG runner whose only I/O is the injected `call_step`.

The caller binds `call_step` to one version set resolved when the request started; the executor never
resolves versions. A step starts as soon as the steps producing its inputs have finished; independent
steps run as concurrent tasks, and a step that is the only runnable one while nothing else is in flight
is awaited inline (no task), which makes chains as cheap as plain awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Mapping
from types import MappingProxyType

from ensemble_runtime.ensemble.graph import EnsembleGraph
from ensemble_runtime.ensemble.steps import ExecutionPlan, PlannedStep, Step
from ensemble_runtime.errors import ErrorCode, InferenceError, internal, invalid
from ensemble_runtime.inference import BackendRequest, ParamValue, Tensor

StepCaller = Callable[[Step, BackendRequest], Awaitable[dict[str, Tensor]]]

_NO_PARAMETERS: Mapping[str, ParamValue] = MappingProxyType({})


async def run_ensemble(
    graph: EnsembleGraph,
    inputs: Mapping[str, Tensor],
    requested_outputs: Collection[str],
    call_step: StepCaller,
    *,
    request_id: str = "",
    parameters: Mapping[str, ParamValue] = _NO_PARAMETERS,
) -> dict[str, Tensor]:
    """Run the steps needed for `requested_outputs` (empty: all) and return those ensemble outputs.

    A failing step fails the request with an InferenceError that keeps the step's code and names the
    step's model; the other in-flight steps are cancelled and awaited before the error propagates.
    """
    plan = graph.plan(requested_outputs)
    for name in plan.required_inputs:
        if name not in inputs:
            raise invalid(f"ensemble '{plan.ensemble_name}': request is missing input '{name}'")
    values: dict[str, Tensor] = dict(inputs)
    waiting = [planned.dependency_count for planned in plan.steps]
    ready = list(plan.initial)
    running: dict[asyncio.Task[dict[str, Tensor]], PlannedStep] = {}
    steps = plan.steps
    loop = asyncio.get_running_loop()
    finished: list[asyncio.Task[dict[str, Tensor]]] = []
    wakeup: asyncio.Future[None] | None = None

    def on_done(task: asyncio.Task[dict[str, Tensor]]) -> None:
        finished.append(task)
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    try:
        while True:
            if not running and len(ready) == 1:
                # The only thing to do: await it inline, no task and no wake-up bookkeeping.
                planned = steps[ready.pop()]
                result = await _call(planned, values, call_step, request_id, parameters)
                _store(planned, result, values, waiting, ready)
                continue
            for position in ready:
                planned = steps[position]
                task = loop.create_task(_call(planned, values, call_step, request_id, parameters))
                task.add_done_callback(on_done)
                running[task] = planned
            ready.clear()
            if not running:
                break
            if not finished:
                wakeup = loop.create_future()
                await wakeup
            done = finished.copy()
            finished.clear()
            for task in done:
                planned = running.pop(task)
                _store(planned, task.result(), values, waiting, ready)
    finally:
        if running:
            await _cancel(running)
    return _collect(plan, values)


async def _call(
    planned: PlannedStep,
    values: Mapping[str, Tensor],
    call_step: StepCaller,
    request_id: str,
    parameters: Mapping[str, ParamValue],
) -> dict[str, Tensor]:
    step_inputs: dict[str, Tensor] = {}
    for input_name, tensor in planned.inputs:
        value = values.get(tensor)
        if value is not None:  # None: an optional ensemble input the request left out
            step_inputs[input_name] = value
    request = BackendRequest(step_inputs, planned.requested, parameters, request_id)
    try:
        return await call_step(planned.step, request)
    except InferenceError as exc:
        raise InferenceError(exc.code, planned.failure_prefix + exc.message) from exc
    except Exception as exc:  # CancelledError is a BaseException and passes through
        raise internal(f"{planned.failure_prefix}{type(exc).__name__}: {exc}") from exc


def _store(
    planned: PlannedStep,
    result: Mapping[str, Tensor],
    values: dict[str, Tensor],
    waiting: list[int],
    ready: list[int],
) -> None:
    """Record a finished step's outputs and mark the dependents whose last producer this was."""
    try:
        for output_name, tensor in planned.outputs:
            values[tensor] = result[output_name]
    except KeyError as exc:
        raise InferenceError(
            ErrorCode.INTERNAL,
            f"{planned.failure_prefix}it did not return output '{exc.args[0]}' "
            f"(asked for {', '.join(planned.requested)}; got {', '.join(result) or 'nothing'})",
        ) from None
    for position in planned.dependents:
        waiting[position] -= 1
        if waiting[position] == 0:
            ready.append(position)


async def _cancel(running: Mapping[asyncio.Task[dict[str, Tensor]], PlannedStep]) -> None:
    """Cancel the steps still in flight and wait until they have all unwound."""
    for task in running:
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)


def _collect(plan: ExecutionPlan, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {name: values[name] for name in plan.outputs}
