"""One `TritonPythonModel` object per model instance: its calls, and its responses turned into results."""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ensemble_runtime.backends.base import RunTimes
from ensemble_runtime.backends.python import bls
from ensemble_runtime.backends.python.decoupled import InferenceResponseSender
from ensemble_runtime.backends.python.pb_types import arrived, error_code_of
from ensemble_runtime.backends.python.pb_utils import (
    InferenceRequest,
    InferenceResponse,
    Tensor,
    TritonModelException,
)
from ensemble_runtime.backends.python.threads import CallQueue, InstanceThread
from ensemble_runtime.dtypes import numpy_to_wire
from ensemble_runtime.errors import ErrorCode, InferenceError, ResponseError, internal, must_propagate
from ensemble_runtime.inference import BackendRequest, BackendResult
from ensemble_runtime.inference import Tensor as Array
from ensemble_runtime.responses import StreamItem

log = logging.getLogger(__name__)

THREAD_END_SECS = 5.0  # how long a close waits for the instance's thread to end


class ModelExitError(InferenceError):
    """A BaseException that model code raised (SystemExit, KeyboardInterrupt, ...), contained where the model
    was called: the request (or the load) fails, the server keeps running."""

    def __init__(self, model: str, version: int, what: str, exc: BaseException) -> None:
        super().__init__(ErrorCode.INTERNAL, f"model '{model}' version {version}: {what} raised {exc!r}")


class PythonInstance:
    """Runs a synchronous `execute` on the instance's own thread (on the loop where the model opted in with
    `EXECUTE_INLINE`), an `async def execute` on the loop."""

    def __init__(
        self,
        model: Any,
        name: str,
        instance_name: str,
        target: bls.BlsTarget,
        output_types: Mapping[str, str],
        on_close: Callable[[], None],
        calls: CallQueue,
        *,
        inline: bool = False,
        version: int = 0,
        decoupled: bool = False,
    ) -> None:
        self._version = version
        self._decoupled = decoupled  # answers through response senders; execute returns None
        # a synchronous execute that runs on the loop (opt-in per model, see backend.py): decided once, asked per call
        self._inline = inline and not inspect.iscoroutinefunction(getattr(model, "execute", None))
        self._model = model
        self._name = name
        self._target = target
        self._output_types = dict(output_types)  # output name -> wire type, where the config declares one
        self._on_close = on_close
        self._calls = calls  # the version's: an execution any of its instances may run
        # the context its thread runs every call in: the loader's, with BLS pointed at this server
        context = contextvars.copy_context()
        context.run(bls.BLS_TARGET.set, target)
        self._thread = InstanceThread(f"py-{instance_name}", model, calls, context)
        self._closed = False
        self._runs_inline = self._inline and not decoupled  # requests on the loop without a task (`runs_inline`)

    async def call(self, method: str, *args: Any, ran: RunTimes | None = None, anywhere: bool = False) -> Any:
        """Call the model's method `method` where it belongs, with BLS pointed at this server; a BaseException
        it raises (not our cancellation) comes back as a ModelExitError, before it can reach the event loop.
        A synchronous method runs on this instance's thread, or with `anywhere` on the first free instance of
        the version (the same method of that instance's model); `ran` gets when it ran there."""
        try:
            return await self._call(method, args, ran, anywhere)
        except Exception:
            raise
        except BaseException as exc:
            if must_propagate(exc):
                raise
            raise self._contained(method, exc) from None

    def _contained(self, what: str, exc: BaseException) -> ModelExitError:
        error = ModelExitError(self._name, self._version, what, exc)
        log.error("%s; contained, the server keeps running", error.message)
        return error

    async def _call(self, method: str, args: tuple[Any, ...], ran: RunTimes | None, anywhere: bool) -> Any:
        bound = getattr(self._model, method)
        if inspect.iscoroutinefunction(bound):
            token = bls.BLS_TARGET.set(self._target)
            try:
                return await bound(*args)
            finally:
                bls.BLS_TARGET.reset(token)
        where = self._calls if anywhere else self._thread
        return await where.submit(self._target.loop, method, args, ran)

    async def initialize(self, args: dict[str, str]) -> None:
        if getattr(self._model, "initialize", None) is not None:
            await self.call("initialize", args)

    def queues_calls(self) -> bool:
        """A synchronous `execute` (not inline) runs on an instance's own thread, and every instance of the
        version takes calls from one queue: `execute_queued` on any of them may be called while others run,
        and the first free instance takes the next. A decoupled model's call ends when `execute` returns, as
        before; its responses go on through their channels."""
        return not self._inline and not inspect.iscoroutinefunction(self._model.execute)

    async def execute_queued(self, requests: Sequence[BackendRequest], ran: RunTimes | None) -> list[BackendResult]:
        """`execute` on the first free instance of the version; `ran` gets when it ran there."""
        return await self._execute_on(requests, ran, anywhere=True)

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """`execute` on this instance."""
        return await self._execute_on(requests, None, anywhere=False)

    async def _execute_on(self, requests: Sequence[BackendRequest], ran: RunTimes | None,
                          anywhere: bool) -> list[BackendResult]:
        if self._decoupled:
            return await self._execute_decoupled(requests, ran, anywhere)
        return await self._execute_all(requests, ran, anywhere)

    async def _execute(self, pb_requests: list[InferenceRequest], ran: RunTimes | None, anywhere: bool) -> Any:
        if not self._inline:  # on the instance's thread, or an `async def execute` on the loop
            return await self.call("execute", pb_requests, ran=ran, anywhere=anywhere)
        return self._execute_here(pb_requests)

    def _execute_here(self, pb_requests: list[InferenceRequest]) -> Any:
        """A synchronous `execute` on the calling thread (the loop), with BLS pointed at this server."""
        token = bls.BLS_TARGET.set(self._target)
        try:
            return self._model.execute(pb_requests)
        except Exception:
            raise
        except BaseException as exc:  # on the loop itself: SystemExit here would end the server
            if must_propagate(exc):
                raise
            raise self._contained("execute", exc) from None
        finally:
            bls.BLS_TARGET.reset(token)

    def runs_inline(self) -> bool:
        """Whether `execute_inline` may run a request now: the model opted in (`EXECUTE_INLINE`), its `execute`
        is synchronous and it is not decoupled. Then the scheduler runs its requests on the loop in the wake-up
        that took them, without a task (`Scheduler.submit_then`), as it runs a fast ONNX model's."""
        return self._runs_inline

    def execute_one(self, request: BackendRequest) -> BackendResult:
        """`execute_inline` for one request (its result: `execute_inline` gives one per request)."""
        return self.execute_inline((request,))[0]

    def execute_inline(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        """`execute` on the calling thread, where `runs_inline` says so: one result per request."""
        try:
            responses = self._execute_here([_incoming(request) for request in requests])
        except Exception as exc:
            return [self._failure(exc)] * len(requests)
        return self._results(requests, responses)

    def execute_then(self, request: BackendRequest, ran: RunTimes, then: Callable[[BackendResult], None]) -> None:
        """`execute_queued` for one request without a future or the loop: the first free instance of the version
        runs it and calls `then` with its result on its own thread (where `then` must answer, not raise). Only for
        a model that `queues_calls`: the scheduler asks that once, when it starts (`Scheduler.takes_then`), not per
        request. A decoupled model's result is `{}` once `execute` returned, its responses gone through the
        request's channel (`_execute_decoupled`)."""
        if self._decoupled:
            self._execute_decoupled_then(request, ran, then)
            return
        requests = (request,)

        def outcome(ok: bool, value: Any) -> None:
            result: BackendResult
            try:
                if ok:  # one InferenceResponse, as execute must return here: checked without `_results`' frame
                    one = type(value) is list and len(value) == 1
                    result = self._result(request, value[0]) if one else self._results(requests, value)[0]
                elif isinstance(value, Exception):
                    result = self._failure(value)
                else:  # SystemExit and the like, raised by the model on its thread: contained here
                    result = self._contained("execute", value)
            except Exception as exc:  # what the model returned broke the conversion: this request fails
                result = exc
            then(result)

        self._calls.submit_then(outcome, "execute", ([_incoming(request)],), ran)

    def _failure(self, exc: Exception) -> InferenceError:
        """What a request gets when `execute` raised `exc`."""
        if isinstance(exc, ModelExitError):
            return exc
        return internal(f"model '{self._name}': {type(exc).__name__}: {exc}")

    async def _execute_all(self, requests: Sequence[BackendRequest], ran: RunTimes | None,
                           anywhere: bool) -> list[BackendResult]:
        if self._runs_inline:
            return self.execute_inline(requests)
        pb_requests = [_incoming(request) for request in requests]
        try:
            responses = await self._execute(pb_requests, ran, anywhere)
        except Exception as exc:
            return [self._failure(exc)] * len(requests)
        return self._results(requests, responses)

    def _results(self, requests: Sequence[BackendRequest], responses: Any) -> list[BackendResult]:
        """One result per request from what `execute` returned."""
        if not isinstance(responses, (list, tuple)):  # (a tuple, not `list | tuple`: no union made per call)
            failure = internal(
                f"model '{self._name}': execute() returned {type(responses).__name__}; it must return a list "
                "with one InferenceResponse per request"
            )
            return [failure] * len(requests)
        if len(responses) != len(requests):
            failure = internal(
                f"model '{self._name}': execute() returned {len(responses)} responses for {len(requests)} requests"
            )
            return [failure] * len(requests)
        if len(requests) == 1:  # (the common case, without a comprehension's call)
            return [self._result(requests[0], responses[0])]
        return [self._result(request, response) for request, response in zip(requests, responses, strict=True)]

    async def _execute_decoupled(self, requests: Sequence[BackendRequest], ran: RunTimes | None,
                                 anywhere: bool) -> list[BackendResult]:
        """Hand each request its response sender and run `execute`; the request's result is `{}` once
        `execute` returns (the instance is free again), its responses go through its channel. If `execute`
        fails or returns something other than None, every request not yet finished gets the error as its
        final response, as Triton's python_backend does."""
        senders = self._senders(requests)
        if isinstance(senders, InferenceError):
            return [senders] * len(requests)
        pb_requests = [_incoming(request, sender) for request, sender in zip(requests, senders, strict=True)]
        error: InferenceError | None = None
        try:
            returned = await self._execute(pb_requests, ran, anywhere)
        except ModelExitError as exc:
            error = exc
        except Exception as exc:
            error = internal(f"model '{self._name}': {type(exc).__name__}: {exc}")
        else:
            error = self._not_none(returned)
        _fail_senders(senders, error)
        return [{} for _ in requests]

    def _execute_decoupled_then(
        self, request: BackendRequest, ran: RunTimes, then: Callable[[BackendResult], None]
    ) -> None:
        """`_execute_decoupled` for one request without a future or the loop (`execute_then`)."""
        senders = self._senders((request,))
        if isinstance(senders, InferenceError):
            then(senders)
            return

        def outcome(ok: bool, value: Any) -> None:  # on the instance's thread, as `_execute_decoupled` ends
            error: InferenceError | None
            if ok:
                error = self._not_none(value)
            elif isinstance(value, Exception):
                error = self._failure(value)
            else:  # SystemExit and the like, raised by the model on its thread: contained here
                error = self._contained("execute", value)
            _fail_senders(senders, error)
            then({})

        self._calls.submit_then(outcome, "execute", ([_incoming(request, senders[0])],), ran)

    def _senders(self, requests: Sequence[BackendRequest]) -> list[InferenceResponseSender] | InferenceError:
        """A response sender per request, over its channel."""
        senders: list[InferenceResponseSender] = []
        for request in requests:
            if request.responses is None:  # an ensemble or the data plane always gives one; never None here
                return internal(f"model '{self._name}' is decoupled but the request has no response channel")
            convert = functools.partial(self._stream_item, request)
            senders.append(InferenceResponseSender(request.responses, convert, self._name))
        return senders

    def _not_none(self, returned: object) -> InferenceError | None:
        """A decoupled `execute` returns None; anything else is an error for its requests."""
        if returned is None:
            return None
        return internal(
            f"Python model '{self._name}' is using the decoupled mode and the execute function must return None."
        )

    def _stream_item(self, request: BackendRequest, response: object, final: bool) -> StreamItem:
        """A response a decoupled model sent: its outputs the request asked for (all when it named none),
        their types checked against the config, or its error."""
        if not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"InferenceResponseSender.send() takes a pb_utils.InferenceResponse, got {type(response).__name__}"
            )
        error = response.error()
        if error is not None:
            return StreamItem(error=InferenceError(error_code_of(error), error.message()), final=final)
        wanted = request.requested_outputs
        outputs = {}
        for tensor in response.output_tensors():
            if wanted and tensor.name() not in wanted:
                continue
            array = tensor.as_numpy()
            mismatch = self._type_mismatch(tensor.name(), array)
            if mismatch:
                return StreamItem(error=internal(mismatch), final=final)
            outputs[tensor.name()] = array
        return StreamItem(outputs=outputs, final=final)

    def _result(self, request: BackendRequest, response: Any) -> BackendResult:
        if not isinstance(response, InferenceResponse):
            return internal(
                f"model '{self._name}': execute() returned a {type(response).__name__} where an "
                "InferenceResponse was expected"
            )
        error = response.error()
        if error is not None:
            return ResponseError(error_code_of(error), error.message())
        produced: dict[str, Tensor] = {}  # (a loop, not a comprehension: one call fewer per request)
        for made in response.output_tensors():
            produced[made.name()] = made
        wanted = request.requested_outputs or tuple(produced)
        outputs = {}
        for name in wanted:
            tensor = produced.get(name)
            if tensor is None:
                return internal(
                    f"model '{self._name}': the response has no output '{name}' "
                    f"(it has: {', '.join(produced) or 'none'})"
                )
            array = tensor.as_numpy()
            expected = self._output_types.get(name)
            if expected is not None and numpy_to_wire(array.dtype) != expected:  # (checked inline: per request)
                return internal(self._type_mismatch(name, array))
            outputs[name] = array
        return outputs

    def _type_mismatch(self, name: str, array: Array) -> str:
        """Why output `name` does not have the type the config declares for it ('' if it does)."""
        expected = self._output_types.get(name)
        if expected is None:
            return ""
        actual = numpy_to_wire(array.dtype)
        if actual == expected:
            return ""
        return f"model '{self._name}': output '{name}' has data type {actual} but the model config declares {expected}"

    def discard(self) -> None:
        """Drop an instance whose `initialize` failed, without calling `finalize`."""
        if not self._closed:
            self._closed = True
            self._thread.shutdown()
            self._on_close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if getattr(self._model, "finalize", None) is not None:
                await self.call("finalize")
        except Exception:
            log.exception("model '%s': finalize() failed", self._name)
        finally:
            self._thread.shutdown()
            self._on_close()
        # Closed once its thread has ended: only then is what the model holds garbage, for reference counting or
        # for the collection the version's unload is followed by (python_gc.py). After finalize only the end is
        # left in its queue; a thread still busy after this long is not waited for.
        await self._thread.ended(THREAD_END_SECS)


def _incoming(request: BackendRequest, sender: InferenceResponseSender | None = None) -> InferenceRequest:
    incoming = InferenceRequest(
        request_id=request.request_id,
        inputs=[arrived(name, array) for name, array in request.inputs.items()],
        requested_output_names=list(request.requested_outputs),
        parameters=request.parameters,
        correlation_id=request.correlation_id,
        flags=request.flags,
    )
    if sender is not None:
        incoming.attach_response_sender(sender)
    return incoming


def _fail_senders(senders: Sequence[InferenceResponseSender], error: InferenceError | None) -> None:
    """After a decoupled `execute`: every request not yet finished gets `error` as its final response."""
    if error is not None:
        for sender in senders:
            sender.fail(error)
