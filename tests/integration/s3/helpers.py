"""Uploading Triton-layout repositories to MinIO and reading the cache back, for the S3 tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ensemble_examples import configs, onnx_models
from ensemble_examples.repository import python_model_source
from ensemble_runtime.repository.local import scan_roots
from ensemble_runtime.repository.s3 import S3Settings
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.infra.minio import MinioServer

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BUCKET = "models"
# Quick to give up, so outages and fault tests take seconds; still several attempts for retries to show.
FAST = S3Settings(max_attempts=5, connect_timeout_s=1.0, read_timeout_s=10.0, object_attempts=4, backoff_base_s=0.05)


def versioned_config(policy: str = "all {}") -> str:
    config = configs.versioned()
    text_format.Parse(f"version_policy {{ {policy} }}", config)
    return text_format.MessageToString(config)


def ensemble_config(name: str) -> str:
    config = mc.ModelConfig(name=name, platform="ensemble")
    step = config.ensemble_scheduling.step.add(model_name="versioned", model_version=-1)
    step.input_map["X"] = "X"
    step.output_map["Y"] = "Y"
    return text_format.MessageToString(config)


def onnx_bytes(version: int) -> bytes:
    return onnx_models.versioned(version).SerializeToString(deterministic=True)


@dataclass
class S3Helper:
    server: MinioServer
    client: S3Client

    @property
    def endpoint_url(self) -> str:
        return self.server.endpoint_url

    def put(self, key: str, data: bytes | str, bucket: str = BUCKET) -> None:
        body = data.encode() if isinstance(data, str) else data
        self.client.put_object(Bucket=bucket, Key=key, Body=body)

    def delete_prefix(self, prefix: str, bucket: str = BUCKET) -> None:
        listing = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix)
        for item in listing.get("Contents", []):
            self.client.delete_object(Bucket=bucket, Key=item["Key"])

    def put_versioned(self, prefix: str, versions: list[int], *, policy: str = "all {}", marker: bool = False) -> None:
        """The example `versioned` ONNX model (Y = X + version) under `<prefix>/`."""
        self.put(f"{prefix}/config.pbtxt", versioned_config(policy))
        for version in versions:
            self.put_version(prefix, version, marker=marker)

    def put_version(self, prefix: str, version: int, *, marker: bool = False) -> None:
        self.put(f"{prefix}/{version}/model.onnx", onnx_bytes(version))
        if marker:
            self.put(f"{prefix}/{version}/.complete", b"")

    def put_python(self, prefix: str, name: str = "threshold") -> None:
        self.put(f"{prefix}/config.pbtxt", text_format.MessageToString(configs.threshold()))
        self.put(f"{prefix}/1/model.py", python_model_source(name))


def cached_versions(root: Path) -> dict[str, list[int]]:
    return {name: sorted(location.versions) for name, location in scan_roots([root]).items()}
