"""A KServe v2 / Triton-protocol server as a child process on free loopback ports (ours or the real Triton)."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.ports import free_ports


@dataclass(frozen=True)
class ClientTls:
    """How a client reaches a gRPC port served over TLS: the root the server's certificate chains to, and for
    mutual TLS the client's own certificate chain and key."""

    root: Path
    certificate: tuple[Path, Path] | None = None  # (chain, key)

    def client(self, url: str, own_connection: bool = False) -> grpcclient.InferenceServerClient:
        """`own_connection`: one of its own, with its own handshake (grpc core would otherwise share an earlier
        client's connection to the same address)."""
        chain, key = (str(path) for path in self.certificate) if self.certificate else (None, None)
        options = {"channel_args": [("grpc.use_local_subchannel_pool", 1)]} if own_connection else {}
        return grpcclient.InferenceServerClient(url, ssl=True, root_certificates=str(self.root),
                                                certificate_chain=chain, private_key=key, **options)


class ServerProcess:
    """Ports, log file, start/stop and readiness waits; subclasses build the command line in `command`.
    `client_tls`: set (before `start`) for a server whose gRPC port serves TLS, so its own clients use it."""

    label = "server"

    def __init__(self) -> None:
        # chosen together (each held while the next is chosen): three separate choices may pick one port twice,
        # and the server then fails to bind its second listener with "address already in use"
        self.grpc_port, self.http_port, self.metrics_port = free_ports(3)
        self._log = tempfile.NamedTemporaryFile(prefix=f"{self.label}-", suffix=".log", delete=False)  # noqa: SIM115
        self.log_path = Path(self._log.name)
        self.proc: subprocess.Popen[bytes] | None = None
        self.client_tls: ClientTls | None = None

    def command(self) -> tuple[Sequence[str], Mapping[str, str]]:
        raise NotImplementedError

    def ports_args(self) -> list[str]:
        return [
            f"--grpc-port={self.grpc_port}", f"--http-port={self.http_port}", f"--metrics-port={self.metrics_port}",
            "--grpc-address=127.0.0.1", "--http-address=127.0.0.1", "--metrics-address=127.0.0.1",
        ]

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.http_port}"

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def start(self, timeout: float = 60.0) -> Self:
        args, env = self.command()
        # Own session: a hard stop takes the server's child processes (e.g. Triton's stubs) with it.
        self.proc = subprocess.Popen(list(args), stdout=self._log, stderr=subprocess.STDOUT, env=dict(env),
                                     start_new_session=True)
        self.wait_live(timeout)
        return self

    def _poll(self, check: Callable[[grpcclient.InferenceServerClient], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.grpc_client() as client:
            while time.monotonic() < deadline:
                assert self.proc is not None, "not started"
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.label} exited with {self.proc.returncode}:\n{self.log_text()[-4000:]}")
                try:
                    if check(client):
                        return
                except Exception:  # not listening yet
                    pass
                time.sleep(0.05)
        raise TimeoutError(f"{self.label}: {what} not reached after {timeout}s:\n{self.log_text()[-4000:]}")

    def wait_live(self, timeout: float) -> None:
        self._poll(lambda c: bool(c.is_server_live()), "live", timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        self._poll(lambda c: bool(c.is_server_ready()), "server ready", timeout)

    def wait_model_ready(self, name: str, timeout: float = 60.0, version: str = "") -> None:
        self._poll(lambda c: bool(c.is_model_ready(name, version)), f"model '{name}' ready", timeout)

    def grpc_client(self) -> grpcclient.InferenceServerClient:
        if self.client_tls is not None:
            return self.client_tls.client(self.grpc_url)
        return grpcclient.InferenceServerClient(self.grpc_url)

    def http_client(self) -> httpclient.InferenceServerClient:
        return httpclient.InferenceServerClient(self.http_url)

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.after_stop()
        self._log.close()
        return self.proc.returncode

    def after_stop(self) -> None:
        """Clean-up after the main process ended (e.g. children it left)."""

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:  # `__exit__` will not run: stop what started and close the log (else a later test
            self.stop()  # fails on its ResourceWarning)
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
