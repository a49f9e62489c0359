"""An ensemble request's steps without a task: how `EnsembleRun` hands each step to its model's scheduler.

A step goes to `Scheduler.submit_then` where the scheduler takes it that way (a python model's instance threads, a
free ONNX instance that runs inline); otherwise it runs as a task of its own (`Scheduler.submit`). Either way the
step's statistics (its own success or failure, its compute phases summed into the ensemble's) are counted on
the loop before the run goes on, as `DataPlane._infer_ensemble` counts them.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ensemble_runtime.backends.handoff import on_loop
from ensemble_runtime.ensemble import Step
from ensemble_runtime.errors import ResponseError, internal, unavailable
from ensemble_runtime.inference import BackendRequest, BackendResult, Tensor
from ensemble_runtime.registry import LoadedVersion
from ensemble_runtime.scheduler import Scheduler, Then
from ensemble_runtime.stats import ComputeTimes

StepDone = Callable[[dict[str, Tensor] | Exception], None]


@dataclass(slots=True)
class StepCalls:
    """The steps of one ensemble request, on one version set (`steps`: step index -> version)."""

    steps: Mapping[int, LoadedVersion]
    compute: ComputeTimes  # the request's compute: its steps' executions, summed
    loop: asyncio.AbstractEventLoop
    tasks: set[asyncio.Task[dict[str, Tensor]]]  # where step tasks are kept until they end (the data plane's)
    loop_thread: int = field(default_factory=threading.get_ident)

    @staticmethod
    def can_run(steps: Mapping[int, LoadedVersion]) -> bool:
        """Whether every step's model has a scheduler that `submit` runs requests on (no sequence batcher)."""
        return all(isinstance(lv.scheduler, Scheduler) for lv in steps.values())

    def submit(self, step: Step, request: BackendRequest, done: StepDone) -> None:
        """Run `request` on the step's version; `done` gets its outputs or error, on the loop. Raises instead
        (and never calls `done`) when the version is not loaded any more."""
        lv = self.steps[step.index]
        scheduler = lv.scheduler
        if not isinstance(scheduler, Scheduler):
            raise unavailable(f"model '{step.model_name}' version {lv.version} is not loaded")
        started = time.perf_counter_ns()

        def ended(result: BackendResult, end: int) -> None:  # on the loop
            if isinstance(result, BaseException):
                answered = isinstance(result, ResponseError)  # the step model's own error response: it ran
                (lv.stats.success if answered else lv.stats.fail).add(end - started)
                done(result if isinstance(result, Exception) else internal(f"model '{lv.model}': {result!r}"))
                return
            success = lv.stats.success
            success.count += 1
            success.ns += end - started
            done(result)

        if scheduler.takes_then():
            try:
                scheduler.submit_then(request, self._then(ended), self.compute)
            except Exception as exc:  # refused (a full queue, unloading): a failure of the step, as `submit` counts it
                ended(exc, time.perf_counter_ns())
            return
        task = self.loop.create_task(scheduler.submit(request, self.compute))
        self.tasks.add(task)
        task.add_done_callback(lambda t: self._task_ended(t, ended))

    def _then(self, ended: Callable[[BackendResult, int], None]) -> Then:
        """`submit_then`'s callback for a step: on the thread that ran it, hand the result to the loop (at once
        when that is the loop: it ran inline), where the step's queue place and statistics are settled first."""

        def then(result: BackendResult, settle: Callable[[], None]) -> None:
            on_loop(self.loop, self.loop_thread, _settled, settle, ended, result, time.perf_counter_ns())

        return then

    def _task_ended(self, task: asyncio.Task[dict[str, Tensor]], ended: Callable[[BackendResult, int], None]) -> None:
        self.tasks.discard(task)
        end = time.perf_counter_ns()
        if task.cancelled():
            ended(unavailable("the server is stopping"), end)
            return
        exc = task.exception()
        ended(exc if exc is not None else task.result(), end)


def _settled(
    settle: Callable[[], None], ended: Callable[[BackendResult, int], None], result: BackendResult, end: int
) -> None:
    settle()
    ended(result, end)
