"""Fixtures for S3 repository tests against a real MinIO (skipped, with the reason, when it cannot be built)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO_ROOT = str(Path(__file__).resolve().parents[3])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.infra.conftest_plugin import minio_server, tool_locator  # noqa: E402
from tests.infra.minio import MinioServer  # noqa: E402
from tests.integration.s3.helpers import BUCKET, S3Helper  # noqa: E402
from tests.support.fault_proxy import FaultProxy  # noqa: E402

__all__ = ["minio_server", "tool_locator"]

_AWS_VARIABLES = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_ROLE_ARN",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
)


@pytest.fixture
def s3(minio_server: MinioServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> S3Helper:
    """MinIO with a `models` bucket; the runtime finds credentials through boto3's default chain (env)."""
    for name in _AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", minio_server.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", minio_server.secret_key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = minio_server.boto3_client()
    client.create_bucket(Bucket=BUCKET)
    return S3Helper(minio_server, client)


@pytest.fixture
def proxy(minio_server: MinioServer) -> Iterator[FaultProxy]:
    with FaultProxy(minio_server.endpoint_url) as fault_proxy:
        yield fault_proxy
