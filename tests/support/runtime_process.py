"""A real `ensemble-runtime` process on free loopback ports, for integration tests and benchmarks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]


class RuntimeProcess:
    """Starts the runtime with the given flags; `wait_live` polls ServerLive with a deadline."""

    def __init__(self, repositories: Sequence[Path | str], extra_args: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.grpc_port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.args = [
            sys.executable, "-m", "ensemble_runtime",
            *(f"--model-repository={r}" for r in repositories),
            f"--grpc-port={self.grpc_port}", f"--http-port={self.http_port}", f"--metrics-port={self.metrics_port}",
            "--grpc-address=127.0.0.1", "--http-address=127.0.0.1", "--metrics-address=127.0.0.1",
            *extra_args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT / "runtime"), str(REPO_ROOT / "examples"), self.env.get("PYTHONPATH", "")]
        )
        self._log = tempfile.NamedTemporaryFile(prefix="runtime-", suffix=".log", delete=False)  # noqa: SIM115
        self.log_path = Path(self._log.name)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self, timeout: float = 60.0) -> RuntimeProcess:
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env)
        self.wait_live(timeout)
        return self

    def wait_live(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        client = grpcclient.InferenceServerClient(self.grpc_url)
        try:
            while time.monotonic() < deadline:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"runtime exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")
                try:
                    if client.is_server_live():
                        return
                except Exception:  # not listening yet
                    pass
                time.sleep(0.05)
        finally:
            client.close()
        raise TimeoutError(f"runtime not live after {timeout}s:\n{self.log_text()[-4000:]}")

    def wait_model_ready(self, name: str, timeout: float = 60.0, version: str = "") -> None:
        deadline = time.monotonic() + timeout
        with grpcclient.InferenceServerClient(self.grpc_url) as client:
            while time.monotonic() < deadline:
                if client.is_model_ready(name, version):
                    return
                time.sleep(0.05)
        raise TimeoutError(f"model '{name}' not ready after {timeout}s:\n{self.log_text()[-4000:]}")

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with grpcclient.InferenceServerClient(self.grpc_url) as client:
            while time.monotonic() < deadline:
                if client.is_server_ready():
                    return
                time.sleep(0.05)
        raise TimeoutError(f"server not ready after {timeout}s:\n{self.log_text()[-4000:]}")

    def grpc_client(self) -> grpcclient.InferenceServerClient:
        return grpcclient.InferenceServerClient(self.grpc_url)

    def http_client(self) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(self.http_url)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> RuntimeProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
