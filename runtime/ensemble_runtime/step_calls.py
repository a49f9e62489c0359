"""An ensemble request's steps without a task: how `EnsembleRun` hands each step to its model's scheduler.

A step goes to `Scheduler.submit_then` where the scheduler takes it that way (a python model's instance threads, a
free ONNX instance that runs inline); otherwise it runs as a task of its own (`Scheduler.submit`). Either way the
step's statistics (its own success or failure, its compute phases summed into the ensemble's) are counted on
the loop, as `DataPlane._infer_ensemble` counts them: before the run goes on, or, for a run carried on by the model
threads (a chain of steps), before the request's own end is counted.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ensemble_runtime.backends.handoff import Deferred, on_loop
from ensemble_runtime.ensemble import Step
from ensemble_runtime.errors import ResponseError, failure_reason, internal, unavailable
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor
from ensemble_runtime.registry import LoadedVersion
from ensemble_runtime.scheduler import Scheduler, Then
from ensemble_runtime.stats import ComputeTimes

StepDone = Callable[[dict[str, Tensor] | Exception], None]


@dataclass(slots=True)
class StepCalls:
    """The steps of one ensemble request, on one version set (`steps`: step index -> version).

    With `carry` (a run that never has two steps in flight: `ExecutionPlan.serial`), a step that ends on its
    model's thread carries the run on from there: its statistics and queue place go to `carry` for the loop, and
    the next step is handed to its model from that thread where the model takes it so
    (`Scheduler.submit_then_off_loop`), so the loop is not woken between steps. `carry` must hold an expected piece
    for the request (`Deferred.expect`) that is added after the steps' (the request's own end)."""

    steps: Mapping[int, LoadedVersion]
    compute: ComputeTimes  # the request's compute: its steps' executions, summed
    loop: asyncio.AbstractEventLoop
    tasks: set[asyncio.Task[dict[str, Tensor]]]  # where step tasks are kept until they end (the data plane's)
    carry: Deferred | None = None
    loop_thread: int = field(default_factory=threading.get_ident)

    @staticmethod
    def can_run(steps: Mapping[int, LoadedVersion]) -> bool:
        """Whether every step's model has a scheduler that `submit` runs requests on (no sequence batcher)."""
        return all(isinstance(lv.scheduler, Scheduler) for lv in steps.values())

    def submit(self, step: Step, request: BackendRequest, done: StepDone) -> None:
        """Run `request` on the step's version; `done` gets its outputs or error, on the loop (or, carried, on
        the thread the step ended on). Raises instead (and never calls `done`) when the version is not loaded any
        more."""
        lv = self.steps[step.index]
        scheduler = lv.scheduler
        if not isinstance(scheduler, Scheduler):
            raise unavailable(f"model '{step.model_name}' version {lv.version} is not loaded")
        if threading.get_ident() != self.loop_thread:  # carried: the step before ended on its model's thread
            self._submit_off_loop(step, lv, scheduler, request, done)
            return
        started = time.perf_counter_ns()
        ended = functools.partial(_step_ended, lv, started, done)  # on the loop
        if scheduler.takes_then():
            try:
                scheduler.submit_then(request, self._then(lv, started, done), self.compute)
            except Exception as exc:  # refused (a full queue, unloading): a failure of the step, as `submit` counts it
                ended(exc, time.perf_counter_ns())
            return
        task = self.loop.create_task(scheduler.submit(request, self.compute))
        self.tasks.add(task)
        task.add_done_callback(lambda t: self._task_ended(t, ended))

    def _submit_off_loop(
        self, step: Step, lv: LoadedVersion, scheduler: Scheduler, request: BackendRequest, done: StepDone
    ) -> None:
        """`submit` on a model's thread: handed on from here where the step's model takes it, else on the loop."""
        assert self.carry is not None
        started = time.perf_counter_ns()
        try:
            taken = scheduler.submit_then_off_loop(request, self._then(lv, started, done), self.compute)
        except Exception as exc:  # refused: counted as `submit` counts it
            self.carry.ride(_count_step, lv, started, exc, time.perf_counter_ns())
            done(exc)
            return
        if not taken:
            on_loop(self.loop, self.loop_thread, self._submit_on_loop, step, request, done)

    def _submit_on_loop(self, step: Step, request: BackendRequest, done: StepDone) -> None:
        try:
            self.submit(step, request, done)
        except Exception as exc:  # as `EnsembleRun` treats a step it could not submit
            done(exc)

    def _then(self, lv: LoadedVersion, started: int, done: StepDone) -> Then:
        """`submit_then`'s callback for a step, on the thread that ran it. Carried, off the loop: the step is
        counted through `carry` and the run goes on here. Otherwise the result goes to the loop (at once when
        that is where it ran: inline), where the step's queue place and statistics are settled first."""
        carry, loop, loop_thread = self.carry, self.loop, self.loop_thread

        def then(result: BackendResult, settle: Callable[[], None]) -> None:
            end = time.perf_counter_ns()
            if carry is not None and threading.get_ident() != loop_thread:
                carry.ride(_settle_step, settle, lv, started, result, end)
                done(_step_outcome(lv, result))
                return
            on_loop(loop, loop_thread, _settled, settle, lv, started, done, result, end)

        return then

    def _task_ended(self, task: asyncio.Task[dict[str, Tensor]], ended: Callable[[BackendResult, int], None]) -> None:
        self.tasks.discard(task)
        end = time.perf_counter_ns()
        if task.cancelled():
            ended(unavailable("the server is stopping"), end)
            return
        exc = task.exception()
        ended(exc if exc is not None else task.result(), end)


def _count_step(lv: LoadedVersion, started: int, result: BackendResult, end: int) -> None:
    """On the loop: a step's own success or failure in its version's statistics."""
    if isinstance(result, BaseException):
        if isinstance(result, ResponseError):  # the step model's own error response: it ran
            lv.stats.success.add(end - started)
        else:
            lv.stats.record_failure(end - started, failure_reason(result))
        return
    success = lv.stats.success
    success.count += 1
    success.ns += end - started


def _step_outcome(lv: LoadedVersion, result: BackendResult) -> dict[str, Tensor] | Exception:
    """What the run gets for a step's result (pure)."""
    if isinstance(result, BaseException) and not isinstance(result, Exception):
        return internal(f"model '{lv.model}': {result!r}")
    return result


def _step_ended(lv: LoadedVersion, started: int, done: StepDone, result: BackendResult, end: int) -> None:
    """On the loop: a step's end counted, then handed to the run."""
    _count_step(lv, started, result, end)
    done(_step_outcome(lv, result))


def _settle_step(settle: Callable[[], None], lv: LoadedVersion, started: int, result: BackendResult, end: int) -> None:
    settle()
    _count_step(lv, started, result, end)


def _settled(
    settle: Callable[[], None], lv: LoadedVersion, started: int, done: StepDone, result: BackendResult, end: int
) -> None:
    settle()
    _step_ended(lv, started, done, result, end)
