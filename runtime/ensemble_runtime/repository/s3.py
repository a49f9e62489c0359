"""The S3 client: the only module that imports boto3/botocore. Lists prefixes and downloads verified objects.

Client construction, once per source (so boto3 refreshes expiring credentials itself):
- endpoint: the URI's `host:port` (Triton's `s3://host:port/bucket/prefix`), else the explicit setting
  (the `--s3-endpoint-url` flag), else boto3's own `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL`, else AWS;
- credentials: boto3's default chain (environment, shared files, web identity / IRSA through
  AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE, container and instance metadata), refreshed by boto3;
- region: explicit, else AWS_REGION, else AWS_DEFAULT_REGION / the profile, else us-east-1;
- botocore retries in standard mode (throttling such as 503 SlowDown backs off), connect/read timeouts.

Every call is blocking: callers run them in a thread executor.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from ensemble_runtime.repository.remote import ObjectInfo, S3Location, choose_region, strip_etag

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_CHUNK = 1024 * 1024
_UNREACHABLE = (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError, ReadTimeoutError)
_FINAL_CODES = frozenset({"NoSuchKey", "404", "PreconditionFailed", "412", "AccessDenied", "403", "NoSuchBucket"})


@dataclass(frozen=True, slots=True)
class S3Settings:
    endpoint_url: str | None = None  # explicit endpoint (a flag); the URI's host:port takes precedence
    region: str | None = None
    max_attempts: int = 5  # botocore, per request (standard mode)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 30.0
    object_attempts: int = 4  # ours, per object download: covers truncated or corrupted transfers
    backoff_base_s: float = 0.25  # object retries wait base, 2*base, 4*base, ...
    max_pool_connections: int = 16


class StorageError(Exception):
    """An S3 call failed; `unreachable` when the endpoint could not be reached at all."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


class IntegrityError(StorageError):
    """A downloaded object does not match its listing (size, or MD5 for single-part ETags)."""


class S3Storage:
    """One boto3 S3 client for one endpoint. Thread-safe (boto3 clients are)."""

    def __init__(
        self, settings: S3Settings, endpoint_url: str | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        environ = os.environ if env is None else env
        self.settings = settings
        session = boto3.session.Session()
        endpoint = endpoint_url or settings.endpoint_url
        custom = bool(endpoint or environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL"))
        config = Config(
            retries={"mode": "standard", "max_attempts": settings.max_attempts},
            connect_timeout=settings.connect_timeout_s,
            read_timeout=settings.read_timeout_s,
            max_pool_connections=settings.max_pool_connections,
            s3={"addressing_style": "path" if custom else "auto"},
        )
        try:
            self._client: S3Client = session.client(
                "s3",
                endpoint_url=endpoint,
                region_name=choose_region(settings.region, environ, session.region_name),
                config=config,
            )
        except (BotoCoreError, ValueError) as exc:
            raise StorageError(f"cannot create an S3 client for endpoint {endpoint or '(default)'}: {exc}") from None

    @property
    def endpoint(self) -> str:
        return str(self._client.meta.endpoint_url)

    @property
    def region(self) -> str:
        return str(self._client.meta.region_name)

    def list(self, location: S3Location) -> list[ObjectInfo]:
        """Every object below the location's prefix, keys relative to it."""
        prefix = location.key_prefix()
        out: list[ObjectInfo] = []
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=prefix)
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"][len(prefix) :]
                    out.append(ObjectInfo(key, int(item["Size"]), strip_etag(item["ETag"])))
        except (BotoCoreError, ClientError) as exc:
            raise self._error(f"listing {location.uri()}", exc) from None
        return out

    def read(self, location: S3Location, expected: ObjectInfo) -> bytes:
        """A small object (a config.pbtxt) in memory, verified like `download`."""
        data = bytearray()

        def sink(chunk: bytes) -> None:
            data.extend(chunk)

        self._fetch(location, expected, sink, data.clear)
        return bytes(data)

    def download(self, location: S3Location, expected: ObjectInfo, dest: Path) -> None:
        """The object `expected.key` (relative to the location) into `dest`, verified and retried."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("wb") as handle:

            def restart() -> None:
                handle.seek(0)
                handle.truncate()

            self._fetch(location, expected, handle.write, restart)

    def _fetch(
        self, location: S3Location, expected: ObjectInfo, sink: Callable[[bytes], object], restart: Callable[[], object]
    ) -> None:
        key = location.key_prefix() + expected.key
        what = f"s3://{location.bucket}/{key}"
        attempts = max(1, self.settings.object_attempts)
        for attempt in range(attempts):
            restart()
            try:
                self._get_once(location.bucket, key, expected, sink, what)
                return
            except IntegrityError as exc:
                error: StorageError = exc
            except ClientError as exc:
                error = self._error(f"downloading {what}", exc)
                if _code(exc) in _FINAL_CODES:
                    raise error from None
            except (BotoCoreError, OSError) as exc:
                error = self._error(f"downloading {what}", exc)
            if attempt + 1 == attempts:
                raise StorageError(f"{error} (after {attempts} attempts)", unreachable=error.unreachable)
            time.sleep(self.settings.backoff_base_s * (2**attempt))

    def _get_once(
        self, bucket: str, key: str, expected: ObjectInfo, sink: Callable[[bytes], object], what: str
    ) -> None:
        # IfMatch: the object must still be the one listed; a newer upload is picked up by a later sync.
        response = self._client.get_object(Bucket=bucket, Key=key, IfMatch=f'"{expected.etag}"')
        body = response["Body"]
        digest = hashlib.md5(usedforsecurity=False)
        size = 0
        try:
            for chunk in body.iter_chunks(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                sink(chunk)
        finally:
            body.close()
        if size != expected.size:
            raise IntegrityError(f"{what}: got {size} bytes, the listing says {expected.size}")
        if not expected.multipart and digest.hexdigest() != expected.etag.lower():
            raise IntegrityError(f"{what}: MD5 {digest.hexdigest()} does not match ETag {expected.etag}")

    def _error(self, doing: str, exc: Exception) -> StorageError:
        if isinstance(exc, _UNREACHABLE):
            return StorageError(f"storage unreachable: {self.endpoint}: {exc}", unreachable=True)
        if isinstance(exc, NoCredentialsError):
            return StorageError(f"no S3 credentials found (environment, shared files, web identity): {exc}")
        if isinstance(exc, ClientError):
            message = exc.response.get("Error", {}).get("Message", "") or str(exc)
            return StorageError(f"{doing}: {_code(exc)}: {message}")
        return StorageError(f"{doing}: {type(exc).__name__}: {exc}")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))
