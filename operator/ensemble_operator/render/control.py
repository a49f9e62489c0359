"""Who may control a runtime pod: the per-Ensemble control token and Secret, and the NetworkPolicy (pure).

The runtime's repository API (index, load, unload, storage status, served version sets) answers only with the
header `x-ensemble-control: <token>` (Triton's --http-restricted-api / --grpc-restricted-protocol). The token
is HMAC-SHA256(operator key, "<namespace>/<name>"): the operator derives it for its own calls to the pods and
writes it into a Secret it owns next to the Ensemble; the pod spec names the Secret, never the value (the
container gets it as an env var that Kubernetes expands into the $(VAR) in the args). So the operator never
reads a Secret back, and one Ensemble's token opens no other Ensemble's pods.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from ..api.v1alpha1 import Ensemble
from .common import (
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    Manifest,
    NetworkPolicySettings,
    metadata,
    selector_labels,
)

CONTROL_HEADER = "x-ensemble-control"
TOKEN_ENV = "ENSEMBLE_CONTROL_TOKEN"
TOKEN_KEY = "token"
# What only the operator needs. Inference, health, metadata, model-config and statistics stay open to clients.
RESTRICTED_CATEGORIES = ("model-repository", "shared-memory", "trace", "logging")


def control_token(key: str, namespace: str, name: str) -> str:
    return hmac.new(key.encode(), f"{namespace}/{name}".encode(), hashlib.sha256).hexdigest()


def token_fingerprint(key: str, ensemble: Ensemble) -> str:
    """A one-way digest of the Ensemble's token, for the restart hash: the token changes, the pods roll."""
    token = control_token(key, ensemble.metadata.namespace, ensemble.metadata.name)
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def control_secret_name(ensemble: Ensemble) -> str:
    return f"{ensemble.metadata.name}-control"


def control_headers(key: str, namespace: str, name: str) -> dict[str, str]:
    """The header the operator sends on its calls to the pods of Ensemble namespace/name ({} without a key)."""
    return {CONTROL_HEADER: control_token(key, namespace, name)} if key else {}


def render_control_secret(ensemble: Ensemble, key: str) -> Manifest:
    token = control_token(key, ensemble.metadata.namespace, ensemble.metadata.name)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata(ensemble, control_secret_name(ensemble)),
        "type": "Opaque",
        "stringData": {TOKEN_KEY: token},
    }


def control_args() -> list[str]:
    restricted = f"{','.join(RESTRICTED_CATEGORIES)}:{CONTROL_HEADER}=$({TOKEN_ENV})"
    return [f"--http-restricted-api={restricted}", f"--grpc-restricted-protocol={restricted}"]


def control_env(ensemble: Ensemble) -> dict[str, Any]:
    ref = {"name": control_secret_name(ensemble), "key": TOKEN_KEY, "optional": False}
    return {"name": TOKEN_ENV, "valueFrom": {"secretKeyRef": ref}}


def network_policy_name(ensemble: Ensemble) -> str:
    return f"{ensemble.metadata.name}-runtime"


def render_network_policy(ensemble: Ensemble, policy: NetworkPolicySettings) -> Manifest:
    """Inference ports from the Ensemble's namespace, the operator and any extra peers; metrics from anywhere
    (scrapers live elsewhere; the metrics port serves nothing else). Control shares the inference ports: the
    header restriction splits it from inference per API, this policy splits sources."""
    serving = [{"port": port, "protocol": "TCP"} for port in (HTTP_PORT, GRPC_PORT)]
    operator_peer: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": policy.operator_namespace}},
        "podSelector": {"matchLabels": dict(sorted(policy.operator_pod_labels.items()))},
    }
    peers = [{"podSelector": {}}, operator_peer, *policy.extra_inference_peers]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ensemble, network_policy_name(ensemble)),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(ensemble)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": peers, "ports": serving},
                {"ports": [{"port": METRICS_PORT, "protocol": "TCP"}]},
            ],
        },
    }
