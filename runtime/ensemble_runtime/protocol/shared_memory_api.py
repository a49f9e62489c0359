"""Triton's shared memory APIs over the registry: the gRPC messages (System/CudaSharedMemory Register,
Unregister, Status) and the HTTP routes (/v2/systemsharedmemory/..., /v2/cudasharedmemory/...).

The gRPC servicer calls the `grpc_*` functions; `http_routes` gives the routes for http_server, all in the
restricted-API category `shared-memory`. Answers and messages are Triton's (http_server.cc, grpc_server.cc).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from tritonclient.grpc import service_pb2 as pb

from ensemble_runtime.errors import invalid, quote_name
from ensemble_runtime.protocol import http_codec as codec
from ensemble_runtime.protocol import status_codes
from ensemble_runtime.restrictions import Category
from ensemble_runtime.shared_memory import Kind, Region, SharedMemoryRegistry
from ensemble_runtime.shared_memory.cuda_ipc import HANDLE_BYTES

BodyReader = Callable[[web.Request], Awaitable[bytearray]]

# ---- gRPC -----------------------------------------------------------------------------------------------


def grpc_system_status(shm: SharedMemoryRegistry, request: pb.SystemSharedMemoryStatusRequest) -> Any:
    Status = pb.SystemSharedMemoryStatusResponse
    regions = shm.status(Kind.SYSTEM, request.name)
    return Status(regions={
        r.name: Status.RegionStatus(name=r.name, key=r.key, offset=r.offset, byte_size=r.byte_size) for r in regions
    })


def grpc_system_register(shm: SharedMemoryRegistry, request: pb.SystemSharedMemoryRegisterRequest) -> Any:
    shm.register_system(request.name, request.key, request.offset, request.byte_size)
    return pb.SystemSharedMemoryRegisterResponse()


def grpc_system_unregister(shm: SharedMemoryRegistry, request: pb.SystemSharedMemoryUnregisterRequest) -> Any:
    shm.unregister(Kind.SYSTEM, request.name)
    return pb.SystemSharedMemoryUnregisterResponse()


def grpc_cuda_status(shm: SharedMemoryRegistry, request: pb.CudaSharedMemoryStatusRequest) -> Any:
    Status = pb.CudaSharedMemoryStatusResponse
    regions = shm.status(Kind.CUDA, request.name)
    return Status(regions={
        r.name: Status.RegionStatus(name=r.name, device_id=r.device_id, byte_size=r.byte_size) for r in regions
    })


def grpc_cuda_register(shm: SharedMemoryRegistry, request: pb.CudaSharedMemoryRegisterRequest) -> Any:
    shm.register_cuda(request.name, request.raw_handle, request.device_id, request.byte_size)
    return pb.CudaSharedMemoryRegisterResponse()


def grpc_cuda_unregister(shm: SharedMemoryRegistry, request: pb.CudaSharedMemoryUnregisterRequest) -> Any:
    shm.unregister(Kind.CUDA, request.name)
    return pb.CudaSharedMemoryUnregisterResponse()


# ---- HTTP -----------------------------------------------------------------------------------------------


def _status_json(region: Region) -> dict[str, Any]:
    if region.kind is Kind.SYSTEM:
        return {"name": region.name, "key": region.key, "offset": region.offset, "byte_size": region.byte_size}
    return {"name": region.name, "device_id": region.device_id, "byte_size": region.byte_size}


def _int_field(body: dict[str, Any], key: str, name: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise invalid(
            f"shared memory register request for {quote_name(name)}: '{key}' must be a non-negative integer"
        )
    return value


def _ok() -> web.Response:
    return web.Response(status=status_codes.HTTP_OK)


def http_routes(shm: SharedMemoryRegistry, read_json: BodyReader) -> list[tuple[str, str, Handler, Category]]:
    """(method, path, handler, category) of the shared memory routes, for both kinds."""

    def status(kind: Kind) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            regions = shm.status(kind, request.match_info.get("name", ""))
            return web.Response(body=codec.dumps([_status_json(r) for r in regions]),
                                content_type=codec.JSON_CONTENT)
        return handler

    def unregister(kind: Kind) -> Handler:
        async def handler(request: web.Request) -> web.Response:
            shm.unregister(kind, request.match_info.get("name", ""))
            return _ok()
        return handler

    async def register_system(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = codec.parse_json(await read_json(request), f"the shared memory register request for {quote_name(name)}")
        key = body.get("key")
        if not isinstance(key, str):
            raise invalid(f"shared memory register request for {quote_name(name)}: 'key' must be a string")
        shm.register_system(name, key, _int_field(body, "offset", name, 0), _int_field(body, "byte_size", name))
        return _ok()

    async def register_cuda(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = codec.parse_json(await read_json(request), f"the shared memory register request for {quote_name(name)}")
        raw = body.get("raw_handle")
        encoded = raw.get("b64") if isinstance(raw, dict) else None
        try:
            handle = base64.b64decode(encoded, validate=True) if isinstance(encoded, str) else None
        except (binascii.Error, ValueError):
            handle = None
        if handle is None or len(handle) != HANDLE_BYTES:
            raise invalid("'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t")
        device_id = _int_field(body, "device_id", name, 0)
        shm.register_cuda(name, handle, device_id, _int_field(body, "byte_size", name))
        return _ok()

    routes: list[tuple[str, str, Handler, Category]] = []
    for kind, base in ((Kind.SYSTEM, "/v2/systemsharedmemory"), (Kind.CUDA, "/v2/cudasharedmemory")):
        routes += [
            ("GET", f"{base}/status", status(kind), Category.SHARED_MEMORY),
            ("GET", f"{base}/region/{{name}}/status", status(kind), Category.SHARED_MEMORY),
            ("POST", f"{base}/region/{{name}}/register",
             register_system if kind is Kind.SYSTEM else register_cuda, Category.SHARED_MEMORY),
            ("POST", f"{base}/unregister", unregister(kind), Category.SHARED_MEMORY),
            ("POST", f"{base}/region/{{name}}/unregister", unregister(kind), Category.SHARED_MEMORY),
        ]
    return routes
