"""Requests whose bytes are not the protobuf message the method takes: INVALID_ARGUMENT, not UNKNOWN.

grpcio decodes a request before any handler runs; a decode failure there ends the call with UNKNOWN
"Unexpected <class 'DecodeError'>" and logs a traceback per request. `add_guarded` registers each method with
a deserializer that hands a `Malformed` marker to the handler instead, and the wrapped handler answers it with
a clear INVALID_ARGUMENT (a stream ends with that status at the first frame that does not decode).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc


@dataclass(frozen=True, slots=True)
class Malformed:
    reason: str


def _safe(deserialize: Callable[[bytes], Any] | None, method: str) -> Callable[[bytes], Any]:
    kind = method.rsplit("/", 1)[-1] or "the"

    def run(data: bytes) -> Any:
        try:
            return deserialize(data) if deserialize is not None else data
        except Exception as exc:  # protobuf's DecodeError, or whatever a deserializer raises
            return Malformed(f"the {kind} request is not a valid protobuf message ({type(exc).__name__})")

    return run


async def _refuse(context: Any, request: Malformed) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


def _unary(inner: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    async def behaviour(request: Any, context: Any) -> Any:
        if isinstance(request, Malformed):
            await _refuse(context, request)
        return await inner(request, context)

    return behaviour


def _streaming(inner: Callable[..., Any], requests_in: bool) -> Callable[[Any, Any], Any]:
    """Wrap a handler that streams requests in or responses out, keeping its kind: grpc.aio calls an async
    generator function and a coroutine function (one that writes with `context.write`) differently."""

    def arguments(request: Any, context: Any) -> Any:
        return _checked(request, context) if requests_in else request

    if inspect.isasyncgenfunction(inner):

        async def generate(request: Any, context: Any) -> AsyncIterator[Any]:
            if not requests_in and isinstance(request, Malformed):
                await _refuse(context, request)
            async for response in inner(arguments(request, context), context):
                yield response

        return generate

    async def run(request: Any, context: Any) -> Any:
        if not requests_in and isinstance(request, Malformed):
            await _refuse(context, request)
        return await inner(arguments(request, context), context)

    return run


def _checked(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
    async def run() -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, Malformed):
                await _refuse(context, request)
            yield request

    return run()


class _Capture:
    """Stands in for the server while generated `add_*Servicer_to_server` code registers a servicer: keeps the
    method handlers it would register, per service."""

    def __init__(self) -> None:
        self.services: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        return None  # the same handlers come to add_registered_method_handlers, by name

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.services[service] = dict(handlers)


def add_guarded(server: grpc.aio.Server, add_to_server: Callable[[Any, Any], None], servicer: Any) -> None:
    """Register `servicer` as the generated `add_to_server` does, each method's handler guarded once, here.

    Not an interceptor: grpc.aio runs a server interceptor's coroutine chain, and the wrapping, for every call."""
    capture = _Capture()
    add_to_server(servicer, capture)
    if not capture.services:
        raise RuntimeError(f"{add_to_server.__name__} registered no method handlers by name")
    for service, handlers in capture.services.items():
        guarded = {name: _wrap(handler, f"/{service}/{name}") for name, handler in handlers.items()}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, guarded),))
        server.add_registered_method_handlers(service, guarded)


def _wrap(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    safe = _safe(handler.request_deserializer, method)
    if handler.unary_unary is not None:
        return handler._replace(request_deserializer=safe, unary_unary=_unary(handler.unary_unary))
    if handler.unary_stream is not None:
        return handler._replace(request_deserializer=safe, unary_stream=_streaming(handler.unary_stream, False))
    if handler.stream_unary is not None:
        return handler._replace(request_deserializer=safe, stream_unary=_streaming(handler.stream_unary, True))
    return handler._replace(request_deserializer=safe, stream_stream=_streaming(handler.stream_stream, True))
