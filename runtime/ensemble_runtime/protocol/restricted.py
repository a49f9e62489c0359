"""Enforce `--grpc-restricted-protocol` / `--http-restricted-api` (see ensemble_runtime.restrictions).

Every gRPC method and HTTP route belongs to one of Triton's categories; a request to a restricted category
without the right header is refused before its body is decoded or any handler runs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol import status_codes
from ensemble_runtime.restrictions import Category, Restrictions

INFERENCE_SERVICE = "inference.GRPCInferenceService"
HEALTH_SERVICE = "grpc.health.v1.Health"

# Triton's grouping of the GRPCInferenceService RPCs; the standard health service counts as `health`.
GRPC_CATEGORIES: Mapping[str, Category] = {
    **{f"/{INFERENCE_SERVICE}/{rpc}": category for rpc, category in {
        "ServerLive": Category.HEALTH,
        "ServerReady": Category.HEALTH,
        "ModelReady": Category.HEALTH,
        "ServerMetadata": Category.METADATA,
        "ModelMetadata": Category.METADATA,
        "ModelInfer": Category.INFERENCE,
        "ModelStreamInfer": Category.INFERENCE,
        "ModelConfig": Category.MODEL_CONFIG,
        "ModelStatistics": Category.STATISTICS,
        "RepositoryIndex": Category.MODEL_REPOSITORY,
        "RepositoryModelLoad": Category.MODEL_REPOSITORY,
        "RepositoryModelUnload": Category.MODEL_REPOSITORY,
        "SystemSharedMemoryStatus": Category.SHARED_MEMORY,
        "SystemSharedMemoryRegister": Category.SHARED_MEMORY,
        "SystemSharedMemoryUnregister": Category.SHARED_MEMORY,
        "CudaSharedMemoryStatus": Category.SHARED_MEMORY,
        "CudaSharedMemoryRegister": Category.SHARED_MEMORY,
        "CudaSharedMemoryUnregister": Category.SHARED_MEMORY,
        "TraceSetting": Category.TRACE,
        "LogSettings": Category.LOGGING,
    }.items()},
    f"/{HEALTH_SERVICE}/Check": Category.HEALTH,
    f"/{HEALTH_SERVICE}/Watch": Category.HEALTH,
}


def _metadata_value(metadata: Any, key: str) -> str | None:
    for name, value in metadata or ():
        if name == key:
            return value if isinstance(value, str) else None
    return None


def _refusing(handler: grpc.RpcMethodHandler, message: str) -> grpc.RpcMethodHandler:
    """A handler of the same shape as `handler` that answers UNAVAILABLE without decoding the request."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    def skip(_: bytes) -> None:
        return None

    serializer = handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, skip, serializer)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, skip, serializer)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, skip, serializer)
    return grpc.unary_unary_rpc_method_handler(refuse, skip, serializer)


class RestrictionInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, restrictions: Restrictions) -> None:
        self._restrictions = restrictions

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        restriction = self._restrictions.get(GRPC_CATEGORIES.get(details.method))
        if handler is None or restriction is None:
            return handler
        if restriction.allows(_metadata_value(details.invocation_metadata, restriction.header)):
            return handler
        return _refusing(handler, restriction.refusal("protocol"))


def http_restriction_middleware(restrictions: Restrictions, categories: Mapping[str, Category]) -> Middleware:
    """`categories`: route path template (as registered) -> its category; unlisted routes are open."""

    @web.middleware
    async def restrict(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        category = categories.get(resource.canonical) if resource is not None else None
        restriction = restrictions.get(category)
        if restriction is not None and not restriction.allows(request.headers.get(restriction.header)):
            return web.Response(body=codec.error_body(restriction.refusal("API")),
                                status=status_codes.HTTP_FORBIDDEN, content_type=codec.JSON_CONTENT)
        return await handler(request)

    return restrict
