"""The runtime's default ports: its HTTP/REST, gRPC and metrics endpoints (Triton's)."""

from __future__ import annotations

HTTP_PORT = 8000
GRPC_PORT = 8001
METRICS_PORT = 8002
