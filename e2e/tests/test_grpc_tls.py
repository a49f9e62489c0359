"""spec.grpcTls end to end on a real node: a kubernetes.io/tls Secret (with ca.crt) the admin made, the text
scenario's Ensemble with mutual TLS, the operator mounting the Secret's keys into the runtime pods (non-root, a
read-only root: the files readable through the pod's fsGroup), and tritonclient over mutual TLS through the
Ensemble's Service; a client without a certificate, and a plaintext one, refused. Then the Secret renewed with
another CA's certificate, key (RSA, cert-manager's default) and roots, as cert-manager renews it: the kubelet swaps the pods' files, the runtime
takes them (--grpc-tls-reload-secs) with no pod restarted, and only clients of the new CA are served."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import checks
from tritonclient.utils import InferenceServerException

from e2e.real_stack import RealStack
from e2e.scenario import delete_and_wait_gone, is_ready, kubectl_apply, live_pods, restart_counts, wait_ensemble
from tests.infra.certs import CertKey, generate_ca, generate_client_cert, generate_serving_cert
from tests.integration.operator.support import new_namespace, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.s3, pytest.mark.timeout(600)]

GRPC_PORT = 8001
SERVER_NAME = "text-pipeline.tls.test"  # the certificate's name; clients reach the Service's address under it


RENEWAL_SECS = 240.0  # the kubelet's next sync of the pods' volumes (10 s here), then the runtime's next read (30 s)


def _client(target: str, ca: Path, certificate: tuple[Path, Path] | None) -> grpcclient.InferenceServerClient:
    """A client on a connection of its own (grpc core would otherwise share one with an earlier client's)."""
    chain, key = (str(p) for p in certificate) if certificate else (None, None)
    return grpcclient.InferenceServerClient(target, ssl=True, root_certificates=str(ca), certificate_chain=chain,
                                            private_key=key,
                                            channel_args=[("grpc.ssl_target_name_override", SERVER_NAME),
                                                          ("grpc.use_local_subchannel_pool", 1)])


def _secret(ca: CertKey, server: CertKey) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "text-serving"},
        "data": {key: base64.b64encode(pem).decode() for key, pem in
                 (("tls.crt", server.cert_pem), ("tls.key", server.key_pem), ("ca.crt", ca.cert_pem))},
    }


def _write_client(directory: Path, stem: str, ca: CertKey) -> tuple[Path, tuple[Path, Path]]:
    """(the CA's root, a client certificate and key it signed), written under `directory`."""
    client = generate_client_cert(ca, f"e2e-{stem}-client")
    paths = [directory / f"{stem}-{name}" for name in ("ca.crt", "client.crt", "client.key")]
    for path, pem in zip(paths, (ca.cert_pem, client.cert_pem, client.key_pem), strict=True):
        path.write_bytes(pem)
    return paths[0], (paths[1], paths[2])


def _live(target: str, ca: Path, certificate: tuple[Path, Path]) -> bool:
    with _client(target, ca, certificate) as client:
        return bool(client.is_server_live(client_timeout=10))


def test_an_ensemble_serves_grpc_over_mutual_tls_from_its_secret(real_stack: RealStack, tmp_path: Path) -> None:
    stack = real_stack
    ca, renewed_ca = generate_ca("e2e-grpc-ca"), generate_ca("e2e-grpc-renewed-ca")
    ca_file, mine = _write_client(tmp_path, "first", ca)
    renewed_ca_file, renewed_mine = _write_client(tmp_path, "renewed", renewed_ca)
    secret = _secret(ca, generate_serving_cert(ca, "runtime", dns_names=[SERVER_NAME]))
    docs = stack.documents("text")
    (ensemble,) = [d for d in docs if d["kind"] == "Ensemble"]
    ensemble["spec"]["grpcTls"] = {"secretName": "text-serving", "mutual": True}
    name = ensemble["metadata"]["name"]
    ns = new_namespace(stack.cp, "e2e-tls")
    try:
        kubectl_apply(stack.cp, ns, [secret, *docs], tmp_path)
        wait_ensemble(stack, ns, name, is_ready, "Ready with every replica", timeout=300.0)
        target = f"{stack.service_ip(ns, name)}:{GRPC_PORT}"
        with _client(target, ca_file, mine) as tls:
            wait_for(lambda: tls.is_model_ready(name) or None, f"{name} ready over TLS at {target}", timeout=60,
                     detail=lambda: stack.diagnostics(ns, name))
            checks.check_text_pipeline(tls, ["a short sentence", "another, longer, sentence"], model=name)
        for refused in (_client(target, ca_file, None), grpcclient.InferenceServerClient(target)):
            with refused, pytest.raises(InferenceServerException, match="UNAVAILABLE"):
                refused.is_server_live(client_timeout=10)

        # the Secret renewed (another CA: every file changes); the pods' files follow it, and so does the port
        pods = live_pods(stack.cp, ns, name)
        restarts = restart_counts(pods)
        renewed = _secret(renewed_ca, generate_serving_cert(renewed_ca, "runtime", dns_names=[SERVER_NAME],
                                                            rsa_key=True))  # cert-manager's default key
        kubectl_apply(stack.cp, ns, [renewed], tmp_path)
        for pod in pods:  # each replica on its own (the Service would pick one of them per connection)
            address = f"{pod['status']['podIP']}:{GRPC_PORT}"
            wait_for(lambda: _live(address, renewed_ca_file, renewed_mine),  # noqa: B023 (called in this turn)
                     f"the renewed certificate served by {pod['metadata']['name']}", timeout=RENEWAL_SECS,
                     detail=lambda: stack.diagnostics(ns, name))
            for refused in (_client(address, ca_file, mine), _client(address, renewed_ca_file, mine)):
                with refused, pytest.raises(InferenceServerException, match="UNAVAILABLE"):
                    refused.is_server_live(client_timeout=10)
        with _client(target, renewed_ca_file, renewed_mine) as tls:
            checks.check_text_pipeline(tls, ["renewed"], model=name)
        assert restart_counts(live_pods(stack.cp, ns, name)) == restarts, "a pod restarted (or was replaced)"
        delete_and_wait_gone(stack, ns, name)
    finally:
        stack.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
