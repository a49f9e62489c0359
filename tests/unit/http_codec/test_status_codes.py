"""Every error code maps to the HTTP status and gRPC code Triton uses."""

from __future__ import annotations

import grpc
import pytest
from ensemble_runtime.errors import ErrorCode
from ensemble_runtime.protocol import status_codes


@pytest.mark.parametrize(
    ("code", "http", "grpc_name"),
    [
        (ErrorCode.INVALID_ARGUMENT, 400, "INVALID_ARGUMENT"),
        (ErrorCode.NOT_FOUND, 404, "NOT_FOUND"),
        (ErrorCode.UNAVAILABLE, 503, "UNAVAILABLE"),
        (ErrorCode.INTERNAL, 500, "INTERNAL"),
        (ErrorCode.UNIMPLEMENTED, 501, "UNIMPLEMENTED"),
        (ErrorCode.ALREADY_EXISTS, 400, "ALREADY_EXISTS"),
        (ErrorCode.CANCELLED, 400, "CANCELLED"),
        (ErrorCode.RESOURCE_EXHAUSTED, 429, "RESOURCE_EXHAUSTED"),
    ],
)
def test_triton_mapping(code: ErrorCode, http: int, grpc_name: str) -> None:
    assert status_codes.http_status(code) == http
    assert status_codes.grpc_status_name(code) == grpc_name


@pytest.mark.parametrize("code", list(ErrorCode))
def test_every_code_names_a_real_grpc_status(code: ErrorCode) -> None:
    assert isinstance(grpc.StatusCode[status_codes.grpc_status_name(code)], grpc.StatusCode)
    assert 400 <= status_codes.http_status(code) < 600
