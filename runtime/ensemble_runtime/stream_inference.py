"""Streaming inference: every response of one request, for ModelStreamInfer and BLS `exec(decoupled=True)`.

A model that is not decoupled gives exactly one response (the data plane's ordinary `infer`, unchanged). A
decoupled Python model gives zero or many through its response channel; an ensemble with a decoupled step
gives one response per pass through its graph (ensemble/streaming.py), each carrying the `ensemble_versions`
of the one version set the request started on, and then the final flag alone. The versions a request uses
stay acquired until its last response, so a rollover drains it before unloading them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ensemble_runtime.ensemble import EnsembleGraph, Step
from ensemble_runtime.ensemble.streaming import stream_ensemble
from ensemble_runtime.errors import InferenceError, failure_reason, internal, unavailable
from ensemble_runtime.inference import BackendRequest, InferRequest, InferResponse, ParamValue, Tensor
from ensemble_runtime.registry import LoadedVersion, Registry, describe_set
from ensemble_runtime.responses import ResponseChannel, StreamItem, StreamResponse
from ensemble_runtime.stats import ComputeTimes
from ensemble_runtime.traces import Trace, TracedTimes
from ensemble_runtime.validation import check_inputs, check_requested

if TYPE_CHECKING:
    from ensemble_runtime.dataplane import DataPlane

# Triton's refusal of a decoupled model outside the stream API; `{}` is the endpoint ("ModelInfer RPC",
# "HTTP end point", ...).
DECOUPLED_REFUSAL = "{} doesn't support models with decoupled transaction policy"


def is_decoupled(lv: LoadedVersion) -> bool:
    return bool(lv.config.model_transaction_policy.decoupled)


async def infer_stream(
    dp: DataPlane, request: InferRequest, declared: Mapping[str, str] | None = None
) -> AsyncGenerator[StreamResponse, None]:
    if not dp.accepting:
        raise unavailable("server is shutting down and no longer accepts requests")
    lv = dp.registry.find(request.model_name, request.model_version)
    ensemble = dp.registry.records[request.model_name].ensemble
    if not (ensemble.graph.decoupled if ensemble is not None else is_decoupled(lv)):
        yield StreamResponse(await dp.infer(request, declared), final=True)
        return
    sig = dp.signature(lv)
    inputs = check_inputs(sig, request.inputs, declared or {})
    requested = check_requested(sig, request.requested_outputs) or tuple(sig.outputs)
    backend_request = BackendRequest(inputs, requested, request.parameters, request.id)
    start = time.perf_counter_ns()
    # a request the trace settings sample: each response's completion marked too (Triton's INFER_RESPONSE_COMPLETE)
    traced = dp.tracing.begin(request.model_name, lv.version, request.id, start) if dp.tracing.control.active else None
    channels: list[ResponseChannel] = []  # of the decoupled calls (a traced request ends when they have too)
    dp.in_flight += 1
    try:
        if traced is not None:
            traced[0].mark("QUEUE_START", time.perf_counter_ns())
        if ensemble is not None:
            responses = _ensemble(dp, lv, ensemble.graph, backend_request, traced, channels)
        else:
            responses = _model(lv, backend_request, traced[0] if traced else None, channels)
        async with contextlib.aclosing(responses):
            async for response in responses:
                if traced is not None and response.response is not None:
                    traced[0].mark("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
                yield response
    except Exception as exc:
        lv.stats.record_failure(time.perf_counter_ns() - start, failure_reason(exc, ensemble is not None))
        raise
    finally:
        dp.in_flight -= 1
        if traced is not None:
            after_calls(channels, functools.partial(dp.tracing.end, traced, request.model_name))
    lv.stats.success.add(time.perf_counter_ns() - start)
    lv.stats.last_inference_ms = int(time.time() * 1000)


async def model_items(
    lv: LoadedVersion, request: BackendRequest, channel: ResponseChannel | None = None,
    times: ComputeTimes | None = None,
) -> AsyncGenerator[StreamItem, None]:
    """What a decoupled model sends for `request`, up to its final flag, each item as soon as it is sent: the call
    runs while its channel is read, so what `execute` sends before it returns is not held until it does. A call the
    scheduler refuses (before `execute`) raises here. Closing the generator early (the client went away) cancels
    the channel: the model sees `is_cancelled()`, later sends are dropped; the call runs on to its end."""
    scheduler = lv.scheduler
    if scheduler is None:
        raise unavailable(f"model '{lv.model}' version {lv.version} is not loaded")
    channel = channel or ResponseChannel(asyncio.get_running_loop())
    call = channel.call = asyncio.ensure_future(scheduler.submit(dataclasses.replace(request, responses=channel), times))
    refused: list[BaseException] = []
    call.add_done_callback(functools.partial(_end_refused, channel, refused))
    try:
        async for item in channel.items():
            if refused and item.error is refused[0]:
                raise item.error
            yield item
    finally:
        channel.cancel()


def after_calls(channels: list[ResponseChannel], then: Callable[[], None]) -> None:
    """`then()` once the decoupled calls answering through `channels` have returned: at once if they have (a
    decoupled model may send its final response before `execute` returns, or after)."""
    running = [c.call for c in channels if c.call is not None and not c.call.done()]
    if not running:
        then()
        return
    asyncio.gather(*running, return_exceptions=True).add_done_callback(lambda _: then())


def _end_refused(channel: ResponseChannel, refused: list[BaseException], call: asyncio.Future[Any]) -> None:
    """A call that ended in an error (the scheduler refused it: nothing ran, nothing was sent) ends its channel
    with it, for `model_items` to raise."""
    exc = None if call.cancelled() else call.exception()
    if exc is None:
        return
    error = exc if isinstance(exc, InferenceError) else internal(f"model call failed: {type(exc).__name__}: {exc}")
    refused.append(error)
    channel.put(StreamItem(error=error, final=True))


async def _model(
    lv: LoadedVersion, request: BackendRequest, trace: Trace | None, channels: list[ResponseChannel]
) -> AsyncGenerator[StreamResponse, None]:
    with Registry.holding(lv):
        channel = ResponseChannel(asyncio.get_running_loop())
        channels.append(channel)
        times = None if trace is None else TracedTimes(trace=trace)
        async with contextlib.aclosing(model_items(lv, request, channel, times)) as items:
            async for item in items:
                if item.error is not None:
                    yield StreamResponse(error=item.error, final=item.final)
                elif item.outputs is not None:
                    response = InferResponse(lv.model, str(lv.version), item.outputs, request.request_id)
                    yield StreamResponse(response, final=item.final)
                else:
                    yield StreamResponse(final=True)


async def _ensemble(
    dp: DataPlane, lv: LoadedVersion, graph: EnsembleGraph, request: BackendRequest, traced: list[Trace] | None,
    channels: list[ResponseChannel],
) -> AsyncGenerator[StreamResponse, None]:
    steps = dict(dp.registry.ensemble_set(lv.model))  # one version set for every response of the request
    if not steps:
        raise unavailable(f"ensemble '{lv.model}' has no ready version set")
    parameters: dict[str, ParamValue] = {"ensemble_versions": describe_set(steps)}
    active: list[ResponseChannel] = []  # the decoupled steps whose responses are being run downstream

    async def call_step(step: Step, step_request: BackendRequest) -> dict[str, Tensor]:
        step_lv = steps[step.index]
        scheduler = step_lv.scheduler
        if scheduler is None:
            raise unavailable(f"model '{step.model_name}' version {step_lv.version} is not loaded")
        started = time.perf_counter_ns()
        child = None if traced is None else dp.tracing.step(traced, step.model_name, step_lv.version, started)
        try:
            result = await scheduler.submit(step_request, None if child is None else TracedTimes(trace=child))
        except Exception as exc:
            step_lv.stats.record_failure(time.perf_counter_ns() - started, failure_reason(exc))
            raise
        finally:
            if child is not None:
                child.mark("REQUEST_END", time.perf_counter_ns())
        step_lv.stats.success.add(time.perf_counter_ns() - started)
        return result

    async def stream_step(step: Step, step_request: BackendRequest) -> AsyncGenerator[dict[str, Tensor], None]:
        step_lv = steps[step.index]
        started = time.perf_counter_ns()
        channel = ResponseChannel(asyncio.get_running_loop())
        active.append(channel)
        channels.append(channel)
        child = None if traced is None else dp.tracing.step(traced, step.model_name, step_lv.version, started)
        times = None if child is None else TracedTimes(trace=child)
        try:
            async with contextlib.aclosing(model_items(step_lv, step_request, channel, times)) as items:
                async for item in items:
                    if item.error is not None:
                        step_lv.stats.record_failure(time.perf_counter_ns() - started, failure_reason(item.error))
                        raise item.error
                    if item.outputs is not None:
                        if child is not None:
                            child.mark("INFER_RESPONSE_COMPLETE", time.perf_counter_ns())
                        yield item.outputs
        finally:
            active.remove(channel)
            if child is not None:
                after_calls([channel], lambda: child.mark("REQUEST_END", time.perf_counter_ns()))
        step_lv.stats.success.add(time.perf_counter_ns() - started)

    with Registry.holding(*steps.values(), lv):
        outputs = stream_ensemble(
            graph, request.inputs, request.requested_outputs, call_step, stream_step,
            streams=lambda step: is_decoupled(steps[step.index]),
            request_id=request.request_id,
        )
        final_sent = False
        async with contextlib.aclosing(outputs):
            async for values in outputs:
                response = InferResponse(
                    lv.model, str(lv.version), {n: values[n] for n in request.requested_outputs},
                    request.request_id, dict(parameters),
                )
                # As Triton's ensemble: the response carries the final flag when, as it is sent, every
                # decoupled step has already sent its own (nothing more can follow); else the flag comes alone.
                final_sent = all(channel.drained for channel in active)
                yield StreamResponse(response, final=final_sent)
        if not final_sent:
            yield StreamResponse(final=True)
