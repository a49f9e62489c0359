"""Names, labels, owner references, hashes and quantities shared by the renderers (pure)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from ensemble_contract.ports import GRPC_PORT as GRPC_PORT  # re-exported for the renderers
from ensemble_contract.ports import HTTP_PORT as HTTP_PORT
from ensemble_contract.ports import METRICS_PORT as METRICS_PORT

from ..api.v1alpha1 import API_VERSION, GROUP, Ensemble

Manifest = dict[str, Any]

MANAGED_BY = "ensemble-operator"
ENSEMBLE_LABEL = f"{GROUP}/ensemble"
RESTART_HASH_ANNOTATION = f"{GROUP}/restart-hash"
CONFIG_HASH_ANNOTATION = f"{GROUP}/repository-config-hash"
CONFIG_REFRESH_ANNOTATION = f"{GROUP}/config-refresh"  # when a pod still on an older config was nudged again

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_FACTORS = {
    None: 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


@dataclass(frozen=True)
class NetworkPolicySettings:
    """What the chart's `networkPolicy` values pass the operator; rendered per Ensemble when enabled."""

    enabled: bool = False
    operator_namespace: str = ""
    operator_pod_labels: dict[str, str] = field(default_factory=dict)
    extra_inference_peers: list[dict[str, Any]] = field(default_factory=list)  # NetworkPolicyPeer objects


# A gRPC client keeps its connection, so the replicas an Ensemble scales out to would take none of its calls: the
# runtime ends a connection about this old with a GOAWAY (its calls answered, its streams going on until their
# clients end them), and the client's next calls go through the Service again, to any replica.
DEFAULT_GRPC_MAX_CONNECTION_AGE_SECONDS = 300
MAX_CONNECTION_AGE_FLAG = "--grpc-max-connection-age-secs"


@dataclass(frozen=True)
class RuntimeDefaults:
    """Operator-wide defaults for what an Ensemble leaves unset (from the operator settings)."""

    image: str = "ghcr.io/ensemble-operator/ensemble-runtime:0.1.0"
    image_pull_policy: str = "IfNotPresent"
    requests: dict[str, str] = field(default_factory=lambda: {"cpu": "1", "memory": "4Gi"})
    limits: dict[str, str] = field(default_factory=lambda: {"memory": "8Gi"})
    pre_stop_sleep_seconds: int = 5
    # the runtime's --grpc-max-connection-age-secs where an Ensemble's extraArgs do not set it (0: never)
    grpc_max_connection_age_seconds: int = DEFAULT_GRPC_MAX_CONNECTION_AGE_SECONDS
    # the operator's key for the pods' control tokens (render/control.py); "" leaves the pods' APIs open
    control_key: str = field(default="", repr=False)
    network_policy: NetworkPolicySettings = field(default_factory=NetworkPolicySettings)


def parse_bytes(quantity: int | str) -> int:
    """A Kubernetes memory quantity (`16Gi`, `500M`, `1048576`) as bytes."""
    if isinstance(quantity, int):
        return quantity
    match = _QUANTITY.match(quantity.strip())
    if match is None:
        raise ValueError(f"not a byte quantity: {quantity!r}")
    return int(float(match.group(1)) * _FACTORS[match.group(2)])


def stable_hash(value: Any) -> str:
    """A short, order-independent hash of a JSON-compatible value."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def selector_labels(ensemble: Ensemble) -> dict[str, str]:
    return {"app.kubernetes.io/name": "ensemble-runtime", ENSEMBLE_LABEL: ensemble.metadata.name}


def common_labels(ensemble: Ensemble) -> dict[str, str]:
    return {
        **selector_labels(ensemble),
        "app.kubernetes.io/instance": ensemble.metadata.name,
        "app.kubernetes.io/component": "runtime",
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "ensemble-operator",
    }


def owner_reference(ensemble: Ensemble) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Ensemble",
        "name": ensemble.metadata.name,
        "uid": ensemble.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(ensemble: Ensemble, name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ensemble.metadata.namespace,
        "labels": common_labels(ensemble),
        "ownerReferences": [owner_reference(ensemble)],
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


def config_map_name(ensemble: Ensemble) -> str:
    return f"{ensemble.metadata.name}-repository"


def headless_service_name(ensemble: Ensemble) -> str:
    return f"{ensemble.metadata.name}-pods"


def grpc_endpoint(ensemble: Ensemble) -> str:
    return f"{ensemble.metadata.name}.{ensemble.metadata.namespace}.svc:{GRPC_PORT}"
