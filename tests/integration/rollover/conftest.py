"""The S3 fixtures (real MinIO, a fault-injecting proxy in front of it) are the S3 tests' own, reused here."""

from __future__ import annotations

from tests.integration.s3.conftest import minio_server, proxy, s3, tool_locator

__all__ = ["minio_server", "proxy", "s3", "tool_locator"]
