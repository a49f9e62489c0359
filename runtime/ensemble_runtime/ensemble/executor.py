"""Run an ensemble request: an event-driven DAG runner whose only I/O is the injected `call_step`.

The caller binds `call_step` to one version set resolved when the request started; the executor never
resolves versions. A step starts as soon as the steps producing its inputs have finished; independent
steps run as concurrent tasks, and a step that is the only runnable one while nothing else is in flight
is awaited inline (no task), which makes chains as cheap as plain awaits.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Collection, Mapping
from types import MappingProxyType

from ensemble_runtime.ensemble.graph import EnsembleGraph
from ensemble_runtime.ensemble.steps import ExecutionPlan, PlannedStep, Step
from ensemble_runtime.errors import ErrorCode, InferenceError, internal, invalid
from ensemble_runtime.inference import BackendRequest, ParamValue, Tensor

StepCaller = Callable[[Step, BackendRequest], Awaitable[dict[str, Tensor]]]
# `EnsembleRun`'s way to run a step: the step, its request, and what to call (on the loop) with its outcome.
ThenStepCaller = Callable[[Step, BackendRequest, Callable[[dict[str, Tensor] | Exception], None]], None]

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
    request = _step_request(planned, values, request_id, parameters)
    try:
        return await call_step(planned.step, request)
    except Exception as exc:  # CancelledError is a BaseException and passes through
        raise _step_error(planned, exc) from exc


def _step_request(
    planned: PlannedStep, values: Mapping[str, Tensor], request_id: str, parameters: Mapping[str, ParamValue]
) -> BackendRequest:
    step_inputs: dict[str, Tensor] = {}
    for input_name, tensor in planned.inputs:
        value = values.get(tensor)
        if value is not None:  # None: an optional ensemble input the request left out
            step_inputs[input_name] = value
    return BackendRequest(step_inputs, planned.requested, parameters, request_id)


def _step_error(planned: PlannedStep, exc: Exception) -> InferenceError:
    """A step's failure as the ensemble's: the step's code, named by the step."""
    if isinstance(exc, InferenceError):
        return InferenceError(exc.code, planned.failure_prefix + exc.message)
    return internal(f"{planned.failure_prefix}{type(exc).__name__}: {exc}")


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


class EnsembleRun:
    """`run_ensemble` without a task: each step is handed to `submit_step` with a callback, and the run goes on
    from there. Every method runs on the event loop (a step's callback is to be called there too), except for a
    `serial` run: with never two steps in flight, a step's callback may carry it on from the thread the step
    ended on (one thread at a time; the hand-over between them orders what they see).

    `finish` gets the ensemble outputs, or the first step's error once no step is in flight any more (as
    `run_ensemble` raises only after its in-flight steps are unwound): after it, no step runs for this request.
    """

    def __init__(
        self,
        graph: EnsembleGraph,
        inputs: Mapping[str, Tensor],
        requested_outputs: Collection[str],
        submit_step: ThenStepCaller,
        finish: Callable[[dict[str, Tensor] | Exception], None],
        *,
        request_id: str = "",
        parameters: Mapping[str, ParamValue] = _NO_PARAMETERS,
    ) -> None:
        self._plan = graph.plan(requested_outputs)
        for name in self._plan.required_inputs:
            if name not in inputs:
                raise invalid(f"ensemble '{self._plan.ensemble_name}': request is missing input '{name}'")
        self._values: dict[str, Tensor] = dict(inputs)
        self._waiting = [planned.dependency_count for planned in self._plan.steps]
        self._submit = submit_step
        self._finish = finish
        self._request_id = request_id
        self._parameters = parameters
        self._running = 0
        self._error: Exception | None = None

    @property
    def serial(self) -> bool:
        """Never two steps in flight (`ExecutionPlan.serial`)."""
        return self._plan.serial

    def start(self) -> None:
        """Submit the steps that need only the request's inputs (raises nothing: failures go to `finish`)."""
        if not self._plan.initial:
            self._end()
            return
        self._launch(list(self._plan.initial))

    def _launch(self, ready: list[int]) -> None:
        # all counted first: a step that ends at once (it ran inline) must not see the run as over
        self._running += len(ready)
        for position in ready:
            planned = self._plan.steps[position]
            try:
                request = _step_request(planned, self._values, self._request_id, self._parameters)
                self._submit(planned.step, request, functools.partial(self._step_done, planned))
            except Exception as exc:  # not submitted: it ends here
                self._step_done(planned, exc)

    def _step_done(self, planned: PlannedStep, result: dict[str, Tensor] | Exception) -> None:
        self._running -= 1
        ready: list[int] = []
        if self._error is None:
            try:
                if isinstance(result, Exception):
                    raise _step_error(planned, result)
                _store(planned, result, self._values, self._waiting, ready)
            except InferenceError as exc:
                self._error = exc
                ready.clear()
        if ready:
            self._launch(ready)
        elif not self._running:
            self._end()

    def _end(self) -> None:
        if self._error is not None:
            self._finish(self._error)
            return
        try:
            outputs = _collect(self._plan, self._values)
        except KeyError as exc:  # a graph validation guarantees against; fail the request, not the loop
            self._finish(internal(f"ensemble '{self._plan.ensemble_name}': no value for output {exc}"))
            return
        self._finish(outputs)


def _collect(plan: ExecutionPlan, values: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return {name: values[name] for name in plan.outputs}
