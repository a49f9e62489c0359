"""TLS on the gRPC port (Triton's --grpc-use-ssl, --grpc-use-ssl-mutual) against real runtime processes and real
clients: tritonclient over TLS, unary and streamed; a plaintext client, bytes that are not TLS and a peer that
never finishes its handshake refused while the port keeps serving; mutual TLS refusing a client without a
certificate its roots signed, on both front ends; and files that are not what they should be failing the start
with the flag or file named."""

from __future__ import annotations

import queue
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.infra.certs import CertKey, generate_ca, generate_client_cert, generate_serving_cert
from tests.integration.runtime import repo
from tests.support.runtime_process import REPO_ROOT, RuntimeProcess
from tests.support.server_process import ClientTls

HANDSHAKE_SECS = 5  # the TLS servers' --grpc-handshake-timeout-secs


@dataclass(frozen=True)
class Pki:
    ca: Path  # the root the server's certificate and the good client's chain to
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate another CA signed
    stranger_key: Path


def _write(directory: Path, stem: str, pair: CertKey) -> tuple[Path, Path]:
    cert, key = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert.write_bytes(pair.cert_pem)
    key.write_bytes(pair.key_pem)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, other_ca = generate_ca("ensemble-test-grpc-ca"), generate_ca("another-ca")
    ca_cert, _ = _write(directory, "ca", ca)
    server = _write(directory, "server", generate_serving_cert(ca, "runtime", dns_names=["localhost"],
                                                               ip_addresses=["127.0.0.1"]))
    client = _write(directory, "client", generate_client_cert(ca, "client"))
    stranger = _write(directory, "stranger", generate_client_cert(other_ca, "stranger"))
    return Pki(ca_cert, *server, *client, *stranger)


class TlsRuntime(RuntimeProcess):
    """A runtime whose gRPC port is served over TLS; its own clients (readiness polls) hold the good certificate."""

    def __init__(self, repository: Path, pki: Pki, frontend: str, mutual: bool) -> None:
        flag = "--grpc-use-ssl-mutual=true" if mutual else "--grpc-use-ssl=true"
        super().__init__([repository], [f"--grpc-frontend={frontend}", "--strict-readiness=false", flag,
                                        f"--grpc-server-cert={pki.server_cert}", f"--grpc-server-key={pki.server_key}",
                                        f"--grpc-root-cert={pki.ca}",
                                        f"--grpc-handshake-timeout-secs={HANDSHAKE_SECS}"])
        self.pki = pki
        self.client_tls = ClientTls(pki.ca, (pki.client_cert, pki.client_key))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runtime tests' repository, and `echo` (an answer as large as its request)."""
    root = repo.build(tmp_path_factory.mktemp("repo"))
    repo.echo_model(root)
    return root


@pytest.fixture(scope="module")
def servers(repository: Path, pki: Pki) -> Iterator[dict[str, TlsRuntime]]:
    started = {
        "tls": TlsRuntime(repository, pki, "native", mutual=False),
        "mutual": TlsRuntime(repository, pki, "native", mutual=True),
        "grpcio-mutual": TlsRuntime(repository, pki, "grpcio", mutual=True),
    }
    try:
        for proc in started.values():
            proc.start()
        for proc in started.values():
            for model in ("add_sub", "py_add_sub", "echo"):
                proc.wait_model_ready(model)
        yield started
    finally:
        for proc in started.values():
            proc.stop()


def _inputs(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"), grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


SHAPES = {"add_sub": (1, 16), "py_add_sub": (4,)}  # tests/integration/runtime/repo.py


def _adds(client: grpcclient.InferenceServerClient, model: str = "add_sub") -> None:
    a = np.arange(16, dtype=np.float32)[:np.prod(SHAPES[model])].reshape(SHAPES[model])
    b = np.full(SHAPES[model], 2.0, dtype=np.float32)
    result = client.infer(model, _inputs(a, b), client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_tritonclient_infers_and_streams_over_tls(servers: dict[str, TlsRuntime]) -> None:
    proc = servers["tls"]
    with ClientTls(proc.pki.ca).client(proc.grpc_url) as client:  # no certificate of its own
        assert client.is_server_live()
        _adds(client)
        _adds(client, "py_add_sub")
        answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            a = np.ones((1, 16), dtype=np.float32)
            for i in range(3):
                client.async_stream_infer("add_sub", _inputs(a * i, a), request_id=str(i))
            got = {}
            for _ in range(3):
                result, error = answers.get(timeout=30)
                assert error is None, error
                got[result.get_response().id] = result.as_numpy("OUTPUT0")
        finally:
            client.stop_stream()
    assert {k: v.tolist() for k, v in got.items()} == {str(i): (a * i + a).tolist() for i in range(3)}
    assert f"grpc 127.0.0.1:{proc.grpc_port} (TLS)" in proc.log_text()


@pytest.mark.parametrize("frontend", ["tls", "grpcio-mutual"])
def test_large_tensors_cross_tls_whole_in_both_directions(servers: dict[str, TlsRuntime], frontend: str) -> None:
    """8 MiB each way, from four threads at once: the core's writes of TLS records larger than one (and than the
    socket takes at once) end whole, whichever thread writes them."""
    proc = servers[frontend]
    sent = [np.random.default_rng(seed).random(2 * 1024 * 1024, dtype=np.float32) for seed in range(4)]

    def echoed(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        with proc.grpc_client() as client:
            answer: np.ndarray[Any, Any] = client.infer("echo", [tensor], client_timeout=120).as_numpy("y")
            return answer

    with ThreadPoolExecutor(4) as pool:
        for x, y in zip(sent, pool.map(echoed, sent), strict=True):
            np.testing.assert_array_equal(x, y)


def test_a_plaintext_client_and_bytes_that_are_not_tls_are_refused_and_the_port_keeps_serving(
        servers: dict[str, TlsRuntime]) -> None:
    proc = servers["tls"]
    with grpcclient.InferenceServerClient(proc.grpc_url) as plain, pytest.raises(InferenceServerException) as refused:
        plain.is_server_live(client_timeout=10)
    assert "StatusCode.UNAVAILABLE" in str(refused.value)
    for garbage in (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bytes(range(256)) * 64):
        with socket.create_connection(("127.0.0.1", proc.grpc_port), timeout=60) as raw:
            raw.sendall(garbage)
            _closed(raw)
    with proc.grpc_client() as client:
        _adds(client)


def _closed(raw: socket.socket) -> None:
    """Reads until the server closes the connection (an alert it sends first is read past)."""
    while True:
        try:
            if not raw.recv(4096):
                return
        except ConnectionResetError:
            return


def test_a_peer_that_never_finishes_its_handshake_is_closed_at_the_deadline(servers: dict[str, TlsRuntime]) -> None:
    proc = servers["tls"]
    client_hello_start = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01])  # a record header, then one byte of 512
    for sent in (b"", client_hello_start):
        began = time.monotonic()
        with socket.create_connection(("127.0.0.1", proc.grpc_port), timeout=60) as raw:
            raw.sendall(sent)
            _closed(raw)
        assert time.monotonic() - began >= HANDSHAKE_SECS - 0.5, f"closed before the deadline after {sent!r}"
    with proc.grpc_client() as client:
        _adds(client)


@pytest.mark.parametrize("frontend", ["mutual", "grpcio-mutual"])
def test_mutual_tls_takes_only_clients_whose_certificate_its_roots_signed(
        servers: dict[str, TlsRuntime], frontend: str) -> None:
    proc = servers[frontend]
    pki = proc.pki
    with ClientTls(pki.ca).client(proc.grpc_url) as anonymous, pytest.raises(InferenceServerException) as refused:
        anonymous.is_server_live(client_timeout=10)
    assert "StatusCode.UNAVAILABLE" in str(refused.value)
    stranger = ClientTls(pki.ca, (pki.stranger_cert, pki.stranger_key)).client(proc.grpc_url)
    with stranger, pytest.raises(InferenceServerException) as refused:
        stranger.is_server_live(client_timeout=10)
    assert "StatusCode.UNAVAILABLE" in str(refused.value)
    with proc.grpc_client() as client:
        _adds(client)
        _adds(client, "py_add_sub")
    assert f"grpc 127.0.0.1:{proc.grpc_port} (mutual TLS)" in proc.log_text()


def _start_fails(tmp_path: Path, *flags: str) -> str:
    """What the runtime writes when it fails to start with `flags` (it must exit, not serve)."""
    done = subprocess.run([sys.executable, "-m", "ensemble_runtime", f"--model-repository={tmp_path}",
                           "--grpc-address=127.0.0.1", "--grpc-port=0", "--http-port=0", "--metrics-port=0",
                           "--http-address=127.0.0.1", "--metrics-address=127.0.0.1", *flags],
                          capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert done.returncode != 0, done.stderr[-2000:]
    return done.stderr


@pytest.mark.parametrize("frontend", ["native", "grpcio"])
def test_tls_files_that_are_not_what_they_should_be_fail_the_start(tmp_path: Path, pki: Pki, frontend: str) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a certificate\n")
    good = (f"--grpc-server-cert={pki.server_cert}", f"--grpc-server-key={pki.server_key}")
    front = f"--grpc-frontend={frontend}"
    assert "--grpc-use-ssl needs --grpc-server-cert" in _start_fails(
        tmp_path, front, "--grpc-use-ssl=true", f"--grpc-server-key={pki.server_key}")
    assert "--grpc-use-ssl-mutual needs --grpc-root-cert" in _start_fails(
        tmp_path, front, "--grpc-use-ssl-mutual=true", *good)
    missing = tmp_path / "missing.pem"
    assert f"--grpc-server-key '{missing}': No such file or directory" in _start_fails(
        tmp_path, front, "--grpc-use-ssl=true", f"--grpc-server-cert={pki.server_cert}", f"--grpc-server-key={missing}")
    # what is in the files: both front ends check them by the native core's rules, which name what is wrong
    said = ("the server certificate: no certificate", "the server certificate and key:")
    for (cert, key), expected in zip([(garbage, pki.server_key), (pki.server_cert, pki.client_key)], said, strict=True):
        log = _start_fails(tmp_path, front, "--grpc-use-ssl=true", f"--grpc-server-cert={cert}",
                           f"--grpc-server-key={key}")
        assert f"cannot start: --grpc-use-ssl: {expected}" in log
        assert "Traceback" not in log
