"""ErrorCode -> HTTP status and -> gRPC status code name, as Triton maps them. Pure: no grpc, no aiohttp.

HTTP follows Triton's `HttpCodeFromError` (http_server.cc): INTERNAL 500, NOT_FOUND 404, UNAVAILABLE 503,
UNSUPPORTED (our UNIMPLEMENTED) 501, and 400 for invalid argument, already exists, cancelled and the rest.
Codes Triton has no counterpart for get the status their meaning calls for (RESOURCE_EXHAUSTED 429).
gRPC uses the status code of the same name (Triton's grpc_utils maps its codes one to one); the gRPC
transport turns the name into `grpc.StatusCode[name]`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from ensemble_runtime.errors import ErrorCode

HTTP_OK = 200
HTTP_BAD_REQUEST = 400
HTTP_FORBIDDEN = 403  # a restricted API without its header (Triton: EVHTP_RES_FORBIDDEN)
HTTP_PAYLOAD_TOO_LARGE = 413
HTTP_INTERNAL = 500

_HTTP_STATUS: Mapping[ErrorCode, int] = MappingProxyType(
    {
        ErrorCode.INVALID_ARGUMENT: 400,
        ErrorCode.NOT_FOUND: 404,
        ErrorCode.UNAVAILABLE: 503,
        ErrorCode.INTERNAL: 500,
        ErrorCode.RESOURCE_EXHAUSTED: 429,
        ErrorCode.ALREADY_EXISTS: 400,
        ErrorCode.FAILED_PRECONDITION: 400,
        ErrorCode.UNIMPLEMENTED: 501,
        ErrorCode.CANCELLED: 400,
    }
)

_GRPC_NAME: Mapping[ErrorCode, str] = MappingProxyType({code: code.name for code in ErrorCode})


def http_status(code: ErrorCode) -> int:
    """The HTTP status Triton answers an error of this code with."""
    return _HTTP_STATUS.get(code, HTTP_BAD_REQUEST)


def grpc_status_name(code: ErrorCode) -> str:
    """The name of the `grpc.StatusCode` member for this code (e.g. "INVALID_ARGUMENT")."""
    return _GRPC_NAME.get(code, "UNKNOWN")
