"""Renewed TLS files taken while serving (--grpc-tls-reload-secs), on both front ends, against real runtime
processes and real tritonclient calls over mutual TLS. The files live as a Kubernetes Secret volume lays them out
(each name a link through `..data` to a versioned directory, swapped whole by one rename), and are renewed to a
certificate, key and client roots from another CA (and a P-256 key to an RSA one): connections accepted after the renewal are served with the new
ones (a client that trusts only the old CA, or presents a certificate it signed, is refused), a connection open
before it goes on, and files renewed half-way (a new certificate beside the old key) are refused once, in the log,
while the port keeps serving what it served; the metrics port counts both."""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.infra.certs import CertKey, generate_ca, generate_client_cert, generate_serving_cert
from tests.infra.process import poll_until
from tests.integration.runtime import repo
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ClientTls

RELOAD_SECS = 0.2  # the servers' --grpc-tls-reload-secs
WAIT_SECS = 30.0  # for a renewal to be taken: many reloads, on a loaded machine
REFUSED = "the renewed files are refused"
TAKEN = "renewed certificate files taken"


@dataclass(frozen=True)
class Issued:
    """What one CA issued: its root, a serving certificate for loopback and a client certificate."""

    ca: CertKey
    server: CertKey
    client: CertKey


def _issue(name: str, rsa_key: bool) -> Issued:
    ca = generate_ca(name)
    return Issued(ca, generate_serving_cert(ca, "runtime", dns_names=["localhost"], ip_addresses=["127.0.0.1"],
                                            rsa_key=rsa_key),
                  generate_client_cert(ca, "client"))


@pytest.fixture(scope="module")
def issued() -> tuple[Issued, Issued]:
    """Before the renewal a P-256 serving key; after it an RSA 2048 one (cert-manager's default)."""
    return _issue("ensemble-test-before", rsa_key=False), _issue("ensemble-test-after", rsa_key=True)


class SecretVolume:
    """A directory laid out as the kubelet's atomic writer lays out a Secret volume: `tls.crt` is a link to
    `..data/tls.crt`, `..data` a link to the current version's directory, and a new version replaces it with one
    rename."""

    NAMES = ("tls.crt", "tls.key", "ca.crt")

    def __init__(self, root: Path) -> None:
        self.root = root
        self._versions = 0

    def publish(self, certificate: bytes, key: bytes, roots: bytes) -> None:
        self._versions += 1
        version = self.root / f"..version_{self._versions}"
        version.mkdir()
        for name, pem in zip(self.NAMES, (certificate, key, roots), strict=True):
            (version / name).write_bytes(pem)
        staged = self.root / "..data_tmp"
        staged.symlink_to(version.name)
        os.replace(staged, self.root / "..data")
        for name in self.NAMES:
            if not (self.root / name).is_symlink():
                (self.root / name).symlink_to(f"..data/{name}")

    def path(self, name: str) -> Path:
        return self.root / name


def _files(directory: Path, stem: str, issued: Issued) -> ClientTls:
    """A client that trusts `issued`'s CA and presents its client certificate (its files under `directory`)."""
    paths = [directory / f"{stem}-{name}" for name in ("ca.crt", "client.crt", "client.key")]
    for path, pem in zip(paths, (issued.ca.cert_pem, issued.client.cert_pem, issued.client.key_pem), strict=True):
        path.write_bytes(pem)
    return ClientTls(paths[0], (paths[1], paths[2]))


def _live(url: str, tls: ClientTls) -> bool:
    with tls.client(url, own_connection=True) as client:
        return bool(client.is_server_live(client_timeout=10))


def _refused(url: str, tls: ClientTls) -> None:
    with tls.client(url, own_connection=True) as client, pytest.raises(InferenceServerException, match="UNAVAILABLE"):
        client.is_server_live(client_timeout=10)


def _renewals(proc: RuntimeProcess) -> dict[str, float]:
    """The renewal metrics, as the metrics port serves them."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("ensemble_grpc_tls_renewals{"):
            found[line[line.index("{") + 1:line.index("}")]] = float(line.split()[-1])
        elif line.startswith("ensemble_grpc_tls_renewal_refused "):
            found["refused now"] = float(line.split()[-1])
    return found


def _adds(client: grpcclient.InferenceServerClient) -> None:
    a, b = np.arange(4, dtype=np.float32), np.full(4, 2.0, dtype=np.float32)
    inputs = [grpcclient.InferInput("INPUT0", [4], "FP32"), grpcclient.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("py_add_sub", inputs, client_timeout=30)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repo.build(tmp_path_factory.mktemp("repo"))


@pytest.fixture(params=["native", "grpcio"])
def served(request: pytest.FixtureRequest, repository: Path, issued: tuple[Issued, Issued],
           tmp_path: Path) -> Iterator[tuple[RuntimeProcess, SecretVolume]]:
    before, _ = issued
    volume = SecretVolume(tmp_path / "secret")
    volume.root.mkdir()
    volume.publish(before.server.cert_pem, before.server.key_pem, before.ca.cert_pem)
    proc = RuntimeProcess([repository], [
        f"--grpc-frontend={request.param}", "--strict-readiness=false", "--grpc-use-ssl-mutual=true",
        f"--grpc-server-cert={volume.path('tls.crt')}", f"--grpc-server-key={volume.path('tls.key')}",
        f"--grpc-root-cert={volume.path('ca.crt')}", f"--grpc-tls-reload-secs={RELOAD_SECS}",
    ])
    proc.client_tls = _files(tmp_path, "before", before)
    try:
        proc.start()
        proc.wait_model_ready("py_add_sub")
        yield proc, volume
    finally:
        proc.stop()


def test_renewed_files_serve_new_connections_and_open_ones_go_on(
        served: tuple[RuntimeProcess, SecretVolume], issued: tuple[Issued, Issued], tmp_path: Path) -> None:
    proc, volume = served
    before, after = issued
    url = f"127.0.0.1:{proc.grpc_port}"
    old_client, new_client = proc.client_tls, _files(tmp_path, "after", after)
    assert old_client is not None
    with old_client.client(url, own_connection=True) as open_before:
        _adds(open_before)
        # renewed half-way, as files written one by one are read: the new certificate beside the old key
        volume.publish(after.server.cert_pem, before.server.key_pem, after.ca.cert_pem)
        poll_until(lambda: REFUSED in proc.log_text(), timeout=WAIT_SECS, what="the half-renewed files refused",
                   detail=proc.log_text)
        assert _live(url, old_client), "the port stopped serving what it served before"
        time.sleep(5 * RELOAD_SECS)  # not a wait for a condition: time for reads that would each log it again
        assert proc.log_text().count(REFUSED) == 1, "a refusal logged at every read, not once"
        assert _renewals(proc) == {'result="taken"': 0.0, 'result="refused"': 1.0, "refused now": 1.0}

        volume.publish(after.server.cert_pem, after.server.key_pem, after.ca.cert_pem)
        poll_until(lambda: _live(url, new_client), timeout=WAIT_SECS, what="the renewed files served",
                   detail=proc.log_text)
        _refused(url, old_client)  # neither trusts the new certificate nor is trusted by the new roots
        _refused(url, ClientTls(new_client.root, old_client.certificate))  # the roots renewed: the old client's refused
        _adds(open_before)  # the connection accepted before the renewal goes on with what it was served
    with new_client.client(url, own_connection=True) as renewed:
        _adds(renewed)
    assert proc.log_text().count(TAKEN) == 1
    assert _renewals(proc) == {'result="taken"': 1.0, 'result="refused"': 1.0, "refused now": 0.0}
