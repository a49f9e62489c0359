"""A decoupled model's streamed request answered without a task: `infer_stream`'s work for one request, done in
callbacks.

`infer_stream` runs a request through nested async generators, its model call in a task of its own, and each
response back to the loop before it is written. Here the request is checked and handed to the model's instances
on the loop (`stream_then`), and each response the model sends goes to `emit` on the thread that sent it, so a
front end whose writes any thread may make (the native core's) sends it from there. The request's end (statistics,
in flight, its version's hold) and its execution's (the scheduler's counts) are queued for the loop as a request
`infer_then` took is (`DataPlane.settlements`): nothing wakes the loop per response or per request.

Taken only where `infer_stream` would do the same work: a decoupled model (not an ensemble) whose instances queue
calls on their own threads, a request in no sequence, no trace settings in force (`stream_takes`, which also
says where a streamed request for a model that is not decoupled may go as ModelInfer's does); anything else takes
`infer_stream`. What a request gets is the same: the same checks and errors, the same responses in the same
order, the final flag, and the same statistics (a success once the final response went to the client, a failure
when the scheduler refused the call or could not run it, neither when the client went away first)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ensemble_runtime.errors import InferenceError, failure_reason, internal
from ensemble_runtime.inference import BackendRequest, BackendResult, InferRequest, InferResponse, ParamValue
from ensemble_runtime.registry import LoadedVersion, Registry
from ensemble_runtime.responses import ResponseChannel, StreamItem, StreamResponse
from ensemble_runtime.scheduler import Scheduler
from ensemble_runtime.sequences import names_sequence
from ensemble_runtime.stream_inference import is_decoupled
from ensemble_runtime.validation import check_inputs, check_requested

if TYPE_CHECKING:
    from ensemble_runtime.dataplane import DataPlane

# Where `stream_then` hands each response of a request: on the thread that sent it, in the order sent, the last
# one with its final flag and what to call (any thread) once the client was sent it, which ends the request a
# success. A final response the client never gets (it went away) is not a success: the request's cancel ends it.
Emit = Callable[[StreamResponse, Callable[[], None] | None], None]


def stream_takes(
    dp: DataPlane, name: str, version: str, parameters: Mapping[str, ParamValue]
) -> tuple[LoadedVersion, bool] | None:
    """On the loop: the version a streamed request for the model `name` at `version` with these parameters runs on
    without `infer_stream`, and whether it is decoupled: a decoupled model (not an ensemble) whose instances run
    on their own threads goes through `stream_then`; a model or an ensemble that is not decoupled answers once, as
    ModelInfer does (`DataPlane.infer_then`, or `infer`). None where `infer_stream` must (in a sequence, traced, a
    decoupled ensemble, a decoupled model on the loop): nothing was done, nothing taken from the request."""
    if not dp.accepting or dp.tracing.control.active or names_sequence(parameters):
        return None
    record = dp.registry.records.get(name)
    if record is None:
        return None
    try:
        lv = dp.registry.find(name, version)
    except InferenceError:  # `infer_stream` answers with it
        return None
    if record.ensemble is not None:
        return None if record.ensemble.graph.decoupled else (lv, False)
    if not is_decoupled(lv):
        return lv, False
    scheduler = lv.scheduler
    return (lv, True) if isinstance(scheduler, Scheduler) and scheduler.hands_on else None


def stream_then(
    dp: DataPlane, lv: LoadedVersion, request: InferRequest, declared: Mapping[str, str] | None, emit: Emit
) -> Callable[[], None]:
    """On the loop: `request` (for `lv`, decoupled, which `stream_takes` gave) checked as `infer_stream` checks it,
    raising its errors, and handed to the model; each response goes to `emit` (see the module). Returns the request's
    cancel, for the loop: the client went away (the model sees `is_cancelled()`, later responses are dropped, the
    request ends uncounted, as a cancelled `infer_stream` does)."""
    dp.settle_answered()  # what the model threads answered is counted first: their places in the queue are free
    sig = dp.signature(lv)
    inputs = check_inputs(sig, request.inputs, declared or {})
    requested = check_requested(sig, request.requested_outputs) or tuple(sig.outputs)
    loop = asyncio.get_running_loop()
    call = _Call(dp, lv, request.id, emit, loop)
    scheduler = lv.scheduler
    assert isinstance(scheduler, Scheduler)  # `stream_takes`
    dp.in_flight += 1
    Registry.acquire(lv)
    try:
        scheduler.submit_then(
            BackendRequest(inputs, requested, request.parameters, request.id, responses=call.channel), call.ran
        )
    except Exception as exc:  # refused before it ran: a failure, and no response was sent
        dp.in_flight -= 1
        Registry.release(lv)
        lv.stats.record_failure(time.perf_counter_ns() - call.start, failure_reason(exc))
        raise
    dp.settlements.expect(loop)  # the execution's end (`ran`)
    dp.settlements.expect(loop)  # the request's (its final flag, or its cancel)
    return call.cancel


class _Call:
    """One request `stream_then` took: the items its model sends turned into responses for `emit`, its end
    queued for the loop once, by its final response sent or its cancel, whichever comes first."""

    __slots__ = ("_dp", "_emit", "_ended", "_failure", "_id", "_lock", "_lv", "channel", "start")

    def __init__(
        self, dp: DataPlane, lv: LoadedVersion, request_id: str, emit: Emit, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._dp = dp
        self._lv = lv
        self._id = request_id
        self._emit = emit
        self._lock = threading.Lock()
        self._ended = False
        self._failure: InferenceError | None = None  # the scheduler could not run the call
        self.start = time.perf_counter_ns()
        self.channel = ResponseChannel(loop, self._item)

    def _item(self, item: StreamItem) -> None:
        """The channel's listener: any thread, in the order the model sent them (its sender's lock)."""
        if item.error is not None:
            response = StreamResponse(error=item.error, final=item.final)
        elif item.outputs is not None:
            lv = self._lv
            response = StreamResponse(InferResponse(lv.model, str(lv.version), item.outputs, self._id), final=item.final)
        else:
            response = StreamResponse(final=True)
        if not item.final:
            self._emit(response, None)
        elif not self._ended:  # (else cancelled meanwhile)
            self._emit(response, self._sent)

    def _sent(self) -> None:
        """The client was sent the final response: the request ends counted (unless it was cancelled first)."""
        self._end(counted=True)

    def ran(self, result: BackendResult, settle: Callable[[], None]) -> None:
        """The scheduler's `then`, on the thread that ran the call, once `execute` returned: its counts for the
        loop; a call that could not run ends the request with its error."""
        if isinstance(result, BaseException):
            error = result if isinstance(result, InferenceError) else internal(
                f"model call failed: {type(result).__name__}: {result}"
            )
            self._failure = error
            self.channel.put(StreamItem(error=error, final=True))  # nothing, where the model sent its final flag
        self._dp.settlements.add(settle)

    def cancel(self) -> None:
        """On the loop (see `stream_then`)."""
        self.channel.cancel()
        if self._end(counted=False):
            self._dp.settlements.run()

    def _end(self, counted: bool) -> bool:
        """Queues the request's end for the loop, unless it ended already; whether it did."""
        with self._lock:
            if self._ended:
                return False
            self._ended = True
        self._dp.settlements.add(self._ended_on_loop, time.perf_counter_ns(), counted)
        return True

    def _ended_on_loop(self, end: int, counted: bool) -> None:
        dp, lv = self._dp, self._lv
        dp.in_flight -= 1
        Registry.release(lv)
        if not counted:
            return
        if self._failure is not None:
            lv.stats.record_failure(end - self.start, failure_reason(self._failure))
            return
        lv.stats.success.add(end - self.start)
        lv.stats.last_inference_ms = int(time.time() * 1000)
