"""Smoke tests of the real MinIO server (tests.infra.minio)."""

from __future__ import annotations

import pytest
from botocore.exceptions import BotoCoreError, ClientError

from tests.infra.minio import MinioServer

pytestmark = pytest.mark.s3


def test_put_get_roundtrip(minio_server: MinioServer) -> None:
    s3 = minio_server.boto3_client()
    s3.create_bucket(Bucket="models")
    s3.put_object(Bucket="models", Key="resnet/1/model.onnx", Body=b"\x00weights\xff")
    body = s3.get_object(Bucket="models", Key="resnet/1/model.onnx")["Body"].read()
    assert body == b"\x00weights\xff"
    listing = s3.list_objects_v2(Bucket="models", Prefix="resnet/")
    assert [o["Key"] for o in listing.get("Contents", [])] == ["resnet/1/model.onnx"]


def test_stop_start_keeps_data_and_endpoint(minio_server: MinioServer) -> None:
    s3 = minio_server.boto3_client(max_attempts=1, connect_timeout=1.0)
    s3.create_bucket(Bucket="models")
    s3.put_object(Bucket="models", Key="config.pbtxt", Body=b"name: 'm'")
    endpoint = minio_server.endpoint_url

    minio_server.stop()
    assert not minio_server.running
    with pytest.raises((BotoCoreError, ClientError)):
        s3.get_object(Bucket="models", Key="config.pbtxt")

    minio_server.start()
    assert minio_server.endpoint_url == endpoint
    assert s3.get_object(Bucket="models", Key="config.pbtxt")["Body"].read() == b"name: 'm'"
