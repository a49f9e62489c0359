"""spec.grpcTls end to end on a real node: a kubernetes.io/tls Secret (with ca.crt) the admin made, the text
scenario's Ensemble with mutual TLS, the operator mounting the Secret's keys into the runtime pods (non-root, a
read-only root: the files readable through the pod's fsGroup), and tritonclient over mutual TLS through the
Ensemble's Service; a client without a certificate, and a plaintext one, refused."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import checks
from tritonclient.utils import InferenceServerException

from e2e.real_stack import RealStack
from e2e.scenario import delete_and_wait_gone, is_ready, kubectl_apply, wait_ensemble
from tests.infra.certs import generate_ca, generate_client_cert, generate_serving_cert
from tests.integration.operator.support import new_namespace, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.s3, pytest.mark.timeout(600)]

GRPC_PORT = 8001
SERVER_NAME = "text-pipeline.tls.test"  # the certificate's name; clients reach the Service's address under it


def _client(target: str, ca: Path, certificate: tuple[Path, Path] | None) -> grpcclient.InferenceServerClient:
    chain, key = (str(p) for p in certificate) if certificate else (None, None)
    return grpcclient.InferenceServerClient(target, ssl=True, root_certificates=str(ca), certificate_chain=chain,
                                            private_key=key,
                                            channel_args=[("grpc.ssl_target_name_override", SERVER_NAME)])


def test_an_ensemble_serves_grpc_over_mutual_tls_from_its_secret(real_stack: RealStack, tmp_path: Path) -> None:
    stack = real_stack
    ca = generate_ca("e2e-grpc-ca")
    server = generate_serving_cert(ca, "runtime", dns_names=[SERVER_NAME])
    client = generate_client_cert(ca, "e2e-client")
    files = {"ca.crt": ca.cert_pem, "client.crt": client.cert_pem, "client.key": client.key_pem}
    for name, pem in files.items():
        (tmp_path / name).write_bytes(pem)
    secret = {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": {"name": "text-serving"},
        "data": {key: base64.b64encode(pem).decode() for key, pem in
                 (("tls.crt", server.cert_pem), ("tls.key", server.key_pem), ("ca.crt", ca.cert_pem))},
    }
    docs = stack.documents("text")
    (ensemble,) = [d for d in docs if d["kind"] == "Ensemble"]
    ensemble["spec"]["grpcTls"] = {"secretName": "text-serving", "mutual": True}
    name = ensemble["metadata"]["name"]
    ns = new_namespace(stack.cp, "e2e-tls")
    try:
        kubectl_apply(stack.cp, ns, [secret, *docs], tmp_path)
        wait_ensemble(stack, ns, name, is_ready, "Ready with every replica", timeout=300.0)
        target = f"{stack.service_ip(ns, name)}:{GRPC_PORT}"
        ca_file, mine = tmp_path / "ca.crt", (tmp_path / "client.crt", tmp_path / "client.key")
        with _client(target, ca_file, mine) as tls:
            wait_for(lambda: tls.is_model_ready(name) or None, f"{name} ready over TLS at {target}", timeout=60,
                     detail=lambda: stack.diagnostics(ns, name))
            checks.check_text_pipeline(tls, ["a short sentence", "another, longer, sentence"], model=name)
        for refused in (_client(target, ca_file, None), grpcclient.InferenceServerClient(target)):
            with refused, pytest.raises(InferenceServerException, match="UNAVAILABLE"):
                refused.is_server_live(client_timeout=10)
        delete_and_wait_gone(stack, ns, name)
    finally:
        stack.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)
