"""Kubeconfig documents (pure) and a writer. JSON is valid YAML, so no YAML library is needed."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

Kubeconfig = dict[str, Any]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _document(server: str, ca_pem: bytes, user: str, credentials: dict[str, str], namespace: str) -> Kubeconfig:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "ensemble-test",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "ensemble-test", "user": user, "namespace": namespace}}],
        "current-context": user,
        "preferences": {},
    }


def client_cert_kubeconfig(
    server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, *, user: str, namespace: str = "default"
) -> Kubeconfig:
    """A kubeconfig authenticating with a client certificate (embedded)."""
    credentials = {"client-certificate-data": _b64(cert_pem), "client-key-data": _b64(key_pem)}
    return _document(server, ca_pem, user, credentials, namespace)


def token_kubeconfig(server: str, ca_pem: bytes, token: str, *, user: str, namespace: str = "default") -> Kubeconfig:
    """A kubeconfig authenticating with a bearer token (e.g. a ServiceAccount token)."""
    return _document(server, ca_pem, user, {"token": token}, namespace)


def write_kubeconfig(path: Path, config: Kubeconfig) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path
