"""A real MinIO server on loopback, for tests of the S3 model repository.

with MinioServer() as s3:
    client = s3.boto3_client()
    client.create_bucket(Bucket="models")
    s3.stop()    # S3 outage: requests now fail
    s3.start()   # same data directory, same endpoint
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self

from tests.infra.process import ManagedProcess, http_status, poll_until
from tests.infra.tools import ToolLocator
from tests.support.ports import free_port

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class MinioServer:
    """`minio server` on 127.0.0.1 with a fixed endpoint across stop()/start()."""

    def __init__(
        self,
        *,
        data_dir: Path | None = None,
        access_key: str = "ensemble-test",
        secret_key: str = "ensemble-test-secret",
        region: str = "us-east-1",
        startup_timeout: float = 60.0,
        locator: ToolLocator | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.host = host  # 127.0.0.1, or a test-network gateway the e2e pods (own network namespaces) reach
        if len(access_key) < 3 or len(secret_key) < 8:
            raise ValueError("MinIO wants an access key of 3+ and a secret key of 8+ characters")
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self._startup_timeout = startup_timeout
        self._locator = locator or ToolLocator.from_env()
        # Logs and MinIO's $HOME always go to a private temporary directory, removed by close();
        # the data directory is inside it unless the caller supplies one (which is then left alone).
        self._root = Path(tempfile.mkdtemp(prefix="ensemble-minio-"))
        self.data_dir = data_dir if data_dir is not None else self._root / "data"
        self._log_path = self._root / "minio.log"
        # Chosen once: clients keep working after stop()/start().
        self.port = free_port()
        self.console_port = free_port()
        self._proc: ManagedProcess | None = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self._log_path

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.running

    def start(self) -> None:
        """Start (or restart) the server on the same data directory and port; wait until it is live."""
        if self.running:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_REGION": self.region,
            "MINIO_UPDATE": "off",
            "MINIO_BROWSER": "off",
            "HOME": str(self._root),  # minio writes ~/.minio
        }
        argv = [
            str(self._locator.binary("minio")),
            "server",
            str(self.data_dir),
            "--address",
            f"{self.host}:{self.port}",
            "--console-address",
            f"127.0.0.1:{self.console_port}",
            "--quiet",
        ]
        proc = ManagedProcess("minio", argv, self._log_path, env=env)
        self._proc = proc
        proc.start()
        try:
            poll_until(
                lambda: http_status(f"{self.endpoint_url}/minio/health/ready") == 200 and self._answers_s3(),
                timeout=self._startup_timeout,
                what=f"minio at {self.endpoint_url}",
                alive=[proc],
                detail=lambda: f"last lines of {self._log_path}:\n{proc.log_tail()}",
            )
        except BaseException:
            self.stop()
            raise

    def _answers_s3(self) -> bool:
        """Health says ready a moment before the object layer is (XMinioServerNotInitialized): ask S3 itself."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.boto3_client(max_attempts=1).list_buckets()
        except (BotoCoreError, ClientError):
            return False
        return True

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); data stays for the next start()."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.stop()

    def close(self) -> None:
        """Stop and remove the temporary directory (data too, unless the caller supplied `data_dir`)."""
        self.stop()
        shutil.rmtree(self._root, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        return self._proc.log_tail(lines) if self._proc is not None else ""

    def client_env(self) -> dict[str, str]:
        """Environment for a process (e.g. the runtime) to reach this server with boto3."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
        }

    def boto3_client(self, *, max_attempts: int = 2, connect_timeout: float = 2.0) -> S3Client:
        """A boto3 S3 client for this server (path-style addressing, few retries so outages show fast)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": max_attempts, "mode": "standard"},
                connect_timeout=connect_timeout,
                read_timeout=10,
            ),
        )
