"""One `TritonPythonModel` object per model instance: its calls, and its responses turned into results."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from ensemble_runtime.backends.base import RunTimes
from ensemble_runtime.backends.handoff import deliver
from ensemble_runtime.backends.python import bls
from ensemble_runtime.backends.python.decoupled import InferenceResponseSender
from ensemble_runtime.backends.python.pb_types import error_code_of
from ensemble_runtime.backends.python.pb_utils import (
    InferenceRequest,
    InferenceResponse,
    Tensor,
    TritonModelException,
)
from ensemble_runtime.dtypes import numpy_to_wire
from ensemble_runtime.errors import ErrorCode, InferenceError, ResponseError, internal, must_propagate
from ensemble_runtime.inference import BackendRequest, BackendResult
from ensemble_runtime.responses import StreamItem

log = logging.getLogger(__name__)
T = TypeVar("T")


class ModelExitError(InferenceError):
    """A BaseException that model code raised (SystemExit, KeyboardInterrupt, ...), contained where the model
    was called: the request (or the load) fails, the server keeps running."""

    def __init__(self, model: str, version: int, what: str, exc: BaseException) -> None:
        super().__init__(ErrorCode.INTERNAL, f"model '{model}' version {version}: {what} raised {exc!r}")


_Job = tuple[
    asyncio.AbstractEventLoop, "asyncio.Future[Any]", contextvars.Context, Callable[..., Any], tuple[Any, ...],
    RunTimes | None,
]


class _Worker:
    """The instance's own thread: runs calls one at a time, in order, and hands results back to the loop.

    A plain SimpleQueue and `call_soon_threadsafe` instead of `run_in_executor`: no concurrent Future and no
    future chaining per call (bench/hotpath.py). Calls queued while one runs start as soon as it ends, without
    a round trip through the loop; a call given a RunTimes gets when it ran stamped into it.
    """

    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, loop: asyncio.AbstractEventLoop, context: contextvars.Context, fn: Callable[..., Any],
               args: tuple[Any, ...], ran: RunTimes | None = None) -> asyncio.Future[Any]:
        future = loop.create_future()
        if ran is not None:
            ran.queued_ns = time.perf_counter_ns()
        self._jobs.put((loop, future, context, fn, args, ran))
        return future

    def shutdown(self) -> None:
        """Let the calls already queued finish, then end the thread (without waiting for it)."""
        self._jobs.put(None)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            loop, future, context, fn, args, ran = job
            if future.cancelled():  # cancelled before it started: skip it, as run_in_executor does
                continue
            if ran is not None:
                ran.started_ns = time.perf_counter_ns()
            try:
                result, ok = context.run(fn, *args), True
            except BaseException as exc:  # handed to the caller, like run_in_executor does
                result, ok = exc, False
            if ran is not None:
                ran.ended_ns = time.perf_counter_ns()
            del job, fn, args
            with contextlib.suppress(RuntimeError):  # RuntimeError: the loop is closed, nobody waits any more
                loop.call_soon_threadsafe(deliver, future, ok, result)
            del future, result


class PythonInstance:
    """Runs a synchronous `execute` on the instance's own thread, an `async def execute` on the loop."""

    def __init__(
        self,
        model: Any,
        name: str,
        instance_name: str,
        target: bls.BlsTarget,
        output_types: Mapping[str, str],
        on_close: Callable[[], None],
        *,
        inline: bool = False,
        version: int = 0,
        decoupled: bool = False,
    ) -> None:
        self._version = version
        self._decoupled = decoupled  # answers through response senders; execute returns None
        self._inline = inline  # run a synchronous execute on the loop (opt-in per model, see backend.py)
        self._model = model
        self._name = name
        self._target = target
        self._output_types = dict(output_types)  # output name -> wire type, where the config declares one
        self._on_close = on_close
        self._worker = _Worker(f"py-{instance_name}")
        self._closed = False

    async def call(self, method: Callable[..., Any], *args: Any, ran: RunTimes | None = None) -> Any:
        """Call one of the model's methods where it belongs, with BLS pointed at this server; a BaseException
        it raises (not our cancellation) comes back as a ModelExitError, before it can reach the event loop.
        `ran` gets when a call on the instance's thread ran."""
        try:
            return await self._call(method, args, ran)
        except Exception:
            raise
        except BaseException as exc:
            if must_propagate(exc):
                raise
            raise self._contained(getattr(method, "__name__", "model code"), exc) from None

    def _contained(self, what: str, exc: BaseException) -> ModelExitError:
        error = ModelExitError(self._name, self._version, what, exc)
        log.error("%s; contained, the server keeps running", error.message)
        return error

    async def _call(self, method: Callable[..., Any], args: tuple[Any, ...], ran: RunTimes | None) -> Any:
        if inspect.iscoroutinefunction(method):
            token = bls.BLS_TARGET.set(self._target)
            try:
                return await method(*args)
            finally:
                bls.BLS_TARGET.reset(token)
        context = contextvars.copy_context()
        context.run(bls.BLS_TARGET.set, self._target)
        return await self._worker.submit(self._target.loop, context, method, args, ran)

    async def initialize(self, args: dict[str, str]) -> None:
        initialize = getattr(self._model, "initialize", None)
        if initialize is not None:
            await self.call(initialize, args)

    def queues_calls(self) -> bool:
        """A synchronous `execute` (not inline) runs on the instance's own thread, which takes calls in order:
        they may be queued while one runs (the scheduler does, for a single instance). A decoupled model's
        call ends when `execute` returns, as before; its responses go on through their channels."""
        return not self._inline and not inspect.iscoroutinefunction(self._model.execute)

    async def execute_queued(self, requests: Sequence[BackendRequest], ran: RunTimes | None) -> list[BackendResult]:
        """`execute`; on the instance's thread, `ran` (where given) gets when it ran there."""
        if self._decoupled:
            return await self._execute_decoupled(requests, ran)
        return await self._execute_all(requests, ran)

    async def _execute(self, pb_requests: list[InferenceRequest], ran: RunTimes | None) -> Any:
        execute = self._model.execute
        if not self._inline or inspect.iscoroutinefunction(execute):
            return await self.call(execute, pb_requests, ran=ran)
        token = bls.BLS_TARGET.set(self._target)
        try:
            return execute(pb_requests)
        except Exception:
            raise
        except BaseException as exc:  # on the loop itself: SystemExit here would end the server
            if must_propagate(exc):
                raise
            raise self._contained("execute", exc) from None
        finally:
            bls.BLS_TARGET.reset(token)

    async def execute(self, requests: Sequence[BackendRequest]) -> list[BackendResult]:
        return await self.execute_queued(requests, None)

    async def _execute_all(self, requests: Sequence[BackendRequest], ran: RunTimes | None) -> list[BackendResult]:
        pb_requests = [_incoming(request) for request in requests]
        try:
            responses = await self._execute(pb_requests, ran)
        except ModelExitError as exc:
            return [exc] * len(requests)
        except Exception as exc:
            failure = internal(f"model '{self._name}': {type(exc).__name__}: {exc}")
            return [failure] * len(requests)
        if not isinstance(responses, list | tuple):
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
        return [self._result(request, response) for request, response in zip(requests, responses, strict=True)]

    async def _execute_decoupled(self, requests: Sequence[BackendRequest], ran: RunTimes | None) -> list[BackendResult]:
        """Hand each request its response sender and run `execute`; the request's result is `{}` once
        `execute` returns (the instance is free again), its responses go through its channel. If `execute`
        fails or returns something other than None, every request not yet finished gets the error as its
        final response, as Triton's python_backend does."""
        senders: list[InferenceResponseSender] = []
        for request in requests:
            if request.responses is None:  # an ensemble or the data plane always gives one; never None here
                return [internal(f"model '{self._name}' is decoupled but the request has no response channel")] \
                    * len(requests)
            convert = functools.partial(self._stream_item, request)
            senders.append(InferenceResponseSender(request.responses, convert, self._name))
        pb_requests = [_incoming(request, sender) for request, sender in zip(requests, senders, strict=True)]
        error: InferenceError | None = None
        try:
            returned = await self._execute(pb_requests, ran)
        except ModelExitError as exc:
            error = exc
        except Exception as exc:
            error = internal(f"model '{self._name}': {type(exc).__name__}: {exc}")
        else:
            if returned is not None:
                error = internal(
                    f"Python model '{self._name}' is using the decoupled mode and the execute function must "
                    "return None."
                )
        if error is not None:
            for sender in senders:
                sender.fail(error)
        return [{} for _ in requests]

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
            mismatch = self._type_mismatch(tensor)
            if mismatch:
                return StreamItem(error=internal(mismatch), final=final)
            outputs[tensor.name()] = tensor.as_numpy()
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
        produced = {tensor.name(): tensor for tensor in response.output_tensors()}
        wanted = request.requested_outputs or tuple(produced)
        outputs = {}
        for name in wanted:
            tensor = produced.get(name)
            if tensor is None:
                return internal(
                    f"model '{self._name}': the response has no output '{name}' "
                    f"(it has: {', '.join(produced) or 'none'})"
                )
            mismatch = self._type_mismatch(tensor)
            if mismatch:
                return internal(mismatch)
            outputs[name] = tensor.as_numpy()
        return outputs

    def _type_mismatch(self, tensor: Tensor) -> str:
        expected = self._output_types.get(tensor.name())
        if expected is None:
            return ""
        actual = numpy_to_wire(tensor.as_numpy().dtype)
        if actual == expected:
            return ""
        return (
            f"model '{self._name}': output '{tensor.name()}' has data type {actual} but the model config "
            f"declares {expected}"
        )

    def discard(self) -> None:
        """Drop an instance whose `initialize` failed, without calling `finalize`."""
        if not self._closed:
            self._closed = True
            self._worker.shutdown()
            self._on_close()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        finalize = getattr(self._model, "finalize", None)
        try:
            if finalize is not None:
                await self.call(finalize)
        except Exception:
            log.exception("model '%s': finalize() failed", self._name)
        finally:
            self._worker.shutdown()
            self._on_close()


def _incoming(request: BackendRequest, sender: InferenceResponseSender | None = None) -> InferenceRequest:
    incoming = InferenceRequest(
        request_id=request.request_id,
        inputs=[Tensor(name, array) for name, array in request.inputs.items()],
        requested_output_names=list(request.requested_outputs),
        parameters=dict(request.parameters),
        correlation_id=request.correlation_id,
        flags=request.flags,
    )
    if sender is not None:
        incoming.attach_response_sender(sender)
    return incoming
