"""Answering the calls the native gRPC core hands over: ModelInfer through the data plane (decoded by the core,
encoded by it with the GIL released; where the data plane can, run and answered from the model instance's thread
without a task), every other unary method through the grpcio servicer's own handlers on
the raw request bytes, so both front ends answer the same way."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

import grpc
from grpc_health.v1 import health_pb2
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc

from ensemble_runtime.dataplane import DataPlane
from ensemble_runtime.errors import InferenceError, bounded
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.protocol import grpc_codec
from ensemble_runtime.protocol._native import Call
from ensemble_runtime.protocol.grpc_server import InferenceServicer
from ensemble_runtime.protocol.offload import INLINE_BYTES, sized
from ensemble_runtime.protocol.restricted import HEALTH_SERVICE, INFERENCE_SERVICE
from ensemble_runtime.shared_memory import output_refs, sends_to_shared_memory

log = logging.getLogger(__name__)
UNIMPLEMENTED = grpc.StatusCode.UNIMPLEMENTED.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
INTERNAL = grpc.StatusCode.INTERNAL.value[0]
CANCELLED = grpc.StatusCode.CANCELLED.value[0]
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE.value[0]
# what grpcio answers for a method the servicer leaves to the generated base class
NOT_IMPLEMENTED = "Unexpected <class 'NotImplementedError'>: Method not implemented!"
_NATIVE_METHODS = ("ModelInfer", "ModelStreamInfer")  # decoded by the core / not forwarded


class RpcAbort(Exception):
    """A handler ended its call with a status (what `context.abort` does under grpcio)."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(code, details)
        self.code = code
        self.details = details


class CallContext:
    """The part of a grpc.aio servicer context the servicer's handlers use, for calls that did not come
    through grpcio: `abort` ends the handler with a status."""

    async def abort(self, code: grpc.StatusCode, details: str = "") -> NoReturn:
        raise RpcAbort(code.value[0], details)


@dataclass(frozen=True, slots=True)
class Route:
    """A forwarded method: how to parse its request and the handler that answers it."""

    name: str
    parse: Callable[[bytes], Any]
    handle: Callable[[Any, Any], Awaitable[Any]]


def forwarded_routes(servicer: InferenceServicer, health: Any) -> dict[str, Route]:
    """Method path -> route, for the unary methods the servicer implements and health Check. Methods it leaves
    to the generated base class are absent: UNIMPLEMENTED, as under grpcio."""
    routes: dict[str, Route] = {}
    base = service_pb2_grpc.GRPCInferenceServiceServicer
    for method in pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods:
        name = method.name
        if name in _NATIVE_METHODS or getattr(type(servicer), name) is getattr(base, name):
            continue
        message = getattr(pb, method.input_type.name)
        routes[f"/{INFERENCE_SERVICE}/{name}"] = Route(name, message.FromString, getattr(servicer, name))
    routes[f"/{HEALTH_SERVICE}/Check"] = Route("Check", health_pb2.HealthCheckRequest.FromString, health.Check)
    return routes


def status_code(name: str) -> int:
    """The gRPC code number of an ErrorCode / grpc.StatusCode name."""
    return int(grpc.StatusCode[name].value[0])


async def answer_forwarded(call: Call, routes: Mapping[str, Route]) -> None:
    route = routes.get(call.method)
    if route is None:
        call.fail(UNIMPLEMENTED, NOT_IMPLEMENTED)
        return
    try:
        request = route.parse(call.payload)
    except Exception as exc:  # protobuf's DecodeError: the same answer as decode_guard gives under grpcio
        call.fail(INVALID_ARGUMENT, f"the {route.name} request is not a valid protobuf message ({type(exc).__name__})")
        return
    await ended_by_status(call, route.name, _reply(call, route, request))


async def _reply(call: Call, route: Route, request: Any) -> None:
    response = await route.handle(request, CallContext())
    call.reply(response.SerializeToString())


class Ends(Protocol):
    """A call that can be ended with a status (a unary `Call`, a `StreamCall`)."""

    def fail(self, code: int, message: str) -> None: ...


async def ended_by_status(call: Ends, method: str, work: Awaitable[None]) -> None:
    """Runs `work`, which answers `call`; where it raises instead, `call` ends with the status its exception means:
    an RpcAbort's own, CANCELLED where the server stops (the cancellation goes on), INTERNAL (logged) for anything
    else."""
    try:
        await work
    except RpcAbort as abort:
        call.fail(abort.code, abort.details)
    except asyncio.CancelledError:
        call.fail(CANCELLED, "the server is stopping")
        raise
    except Exception as exc:
        log.exception("unexpected error in gRPC handler %s", method)
        call.fail(INTERNAL, bounded(f"internal error: {type(exc).__name__}: {exc}"))


def begin_infer(call: Call, dataplane: DataPlane) -> Coroutine[Any, Any, None] | None:
    """ModelInfer, begun on the loop. A small request is decoded here; where the data plane takes it without a
    task (`DataPlane.infer_then`) it is run, encoded and answered on the model instance's thread. None: it is
    taken (or refused, answered already). Otherwise the coroutine that answers it, to run as a task."""
    if call.size > INLINE_BYTES:  # decoded off the loop by answer_infer
        return answer_infer(call, dataplane)
    try:
        decoded = grpc_codec.decode_view(call.request, dataplane.shared_memory)
        request, declared = decoded
        outputs = request.output_parameters
        if not (outputs and sends_to_shared_memory(outputs)) and dataplane.infer_then(
            request, declared, functools.partial(_answer_then, call)
        ):
            return None
    except Exception as exc:
        fail_infer(call, exc)
        return None
    return answer_infer(call, dataplane, decoded)


def _answer_then(call: Call, outcome: InferResponse | Exception) -> None:
    """Where `infer_then` hands a ModelInfer's outcome, on the model instance's thread."""
    if isinstance(outcome, Exception):
        fail_infer(call, outcome)
        return
    try:
        if not call.reply_response(outcome):
            reply_infer(call, outcome, grpc_codec.output_payloads(outcome))
    except Exception as exc:
        fail_infer(call, exc)


async def answer_infer(
    call: Call, dataplane: DataPlane, decoded: tuple[InferRequest, dict[str, str]] | None = None
) -> None:
    """Decode (in a thread when large; unless `decoded` already), run, and hand the outputs back for the core
    to encode."""
    shm = dataplane.shared_memory
    try:
        if decoded is None:
            decoded = await sized(call.size, grpc_codec.decode_view, call.request, shm)
        request, declared = decoded
        response = await dataplane.infer(request, declared)
        refs = output_refs(request.output_parameters)
        if refs or not call.reply_response(response):
            reply_infer(call, response, grpc_codec.output_payloads(response, shm, refs))
    except asyncio.CancelledError:
        call.fail(CANCELLED, "the server is stopping")
        raise
    except Exception as exc:
        fail_infer(call, exc)


def reply_infer(call: Call, response: InferResponse, outputs: list[grpc_codec.OutputPayload]) -> None:
    call.reply_infer(response.model_name, response.model_version, response.id, response.parameters, outputs)


def fail_infer(call: Call, exc: Exception) -> None:
    """A ModelInfer's error as its status: an InferenceError's code and message, anything else INTERNAL."""
    if isinstance(exc, InferenceError):
        call.fail(status_code(exc.code.name), bounded(exc.message))
        return
    log.exception("unexpected error in gRPC handler ModelInfer", exc_info=exc)
    call.fail(INTERNAL, bounded(f"internal error: {type(exc).__name__}: {exc}"))
