"""An ensemble request on the data plane's task path (`DataPlane.infer`): its steps as the graph allows them, on
one version set held for the whole request, each on its model's scheduler, counted in that model's statistics.
A step whose model uses the response cache asks it first (a hit runs nothing); a request in a sequence passes its
correlation ID and flags on to every step and each step runs on the version its sequence started on."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from ensemble_runtime.ensemble import EnsembleGraph, Step
from ensemble_runtime.ensemble.executor import run_ensemble
from ensemble_runtime.errors import ResponseError, failure_reason, unavailable
from ensemble_runtime.inference import BackendRequest, Tensor
from ensemble_runtime.registry import LoadedVersion, Registry, describe_set
from ensemble_runtime.response_caching import identity
from ensemble_runtime.sequences import SequenceTag
from ensemble_runtime.stats import ComputeTimes
from ensemble_runtime.traces import Trace, TracedTimes

if TYPE_CHECKING:
    from ensemble_runtime.dataplane import DataPlane


async def infer_ensemble(
    dp: DataPlane,
    lv: LoadedVersion,
    graph: object,
    request: BackendRequest,
    compute: ComputeTimes,
    tag: SequenceTag | None = None,
    traced: list[Trace] | None = None,
) -> tuple[dict[str, Tensor], str]:
    """The outputs of `request` to ensemble version `lv`, and the version set that answered it (`compute` gets
    its steps' executions)."""
    assert isinstance(graph, EnsembleGraph)
    steps = dict(dp.registry.ensemble_set(lv.model))  # one version set for the whole request
    if not steps:
        raise unavailable(f"ensemble '{lv.model}' has no ready version set")
    caching = dp.caching if tag is None else None

    async def call_step(step: Step, step_request: BackendRequest) -> dict[str, Tensor]:
        step_lv = steps[step.index]
        if tag is not None:  # Triton's ensembles pass the correlation ID and flags on to every step
            step_request = dataclasses.replace(step_request, correlation_id=tag.correlation_id, flags=tag.flags)
            step_lv = dp.sequence_version(step.model_name, "", tag) or step_lv
        scheduler = step_lv.scheduler
        if scheduler is None:
            raise unavailable(f"model '{step.model_name}' version {step_lv.version} is not loaded")
        started = time.perf_counter_ns()
        lookup = None
        if caching is not None and caching.enabled(step_lv):
            lookup = caching.lookup(step_lv, identity(step_lv), step_request, {}, started)
            if lookup.hit is not None:
                step_lv.stats.success.add(time.perf_counter_ns() - started)
                return dict(lookup.hit.outputs)
        child = None if traced is None else dp.tracing.step(traced, step.model_name, step_lv.version, started)
        try:
            result = await scheduler.submit(step_request, compute if child is None else TracedTimes(trace=child, into=compute))
        except Exception as exc:
            if isinstance(exc, ResponseError):  # the step model's own error response: it ran
                step_lv.stats.success.add(time.perf_counter_ns() - started)
            else:
                step_lv.stats.record_failure(time.perf_counter_ns() - started, failure_reason(exc))
            raise
        finally:
            if child is not None:
                child.mark("REQUEST_END", time.perf_counter_ns())
        if lookup is not None and caching is not None:
            caching.store(step_lv, lookup, result)
        step_lv.stats.success.add(time.perf_counter_ns() - started)
        return result

    with Registry.holding(*steps.values(), lv):
        outputs = await run_ensemble(
            graph, request.inputs, request.requested_outputs, call_step, request_id=request.request_id
        )
    return outputs, describe_set(steps)
