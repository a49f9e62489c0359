"""ConfigMap, Services, PodDisruptionBudget and HorizontalPodAutoscaler (pure)."""

from __future__ import annotations

from ..api.v1alpha1 import Ensemble
from .common import (
    CONFIG_HASH_ANNOTATION,
    GRPC_PORT,
    HTTP_PORT,
    METRICS_PORT,
    Manifest,
    config_map_name,
    headless_service_name,
    metadata,
    selector_labels,
    stable_hash,
)
from .runtime_config import RepositoryConfig

_PORTS = [
    {"name": "http", "port": HTTP_PORT, "targetPort": "http", "protocol": "TCP"},
    {"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"},
    {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics", "protocol": "TCP"},
]


def render_config_map(ensemble: Ensemble, config: RepositoryConfig) -> Manifest:
    text = config.to_json()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(
            ensemble, config_map_name(ensemble), {CONFIG_HASH_ANNOTATION: stable_hash(text)}
        ),
        "data": {"repository.json": text},
    }


def render_service(ensemble: Ensemble) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ensemble, ensemble.metadata.name),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ensemble),
            "ports": [dict(p) for p in _PORTS],
        },
    }


def render_headless_service(ensemble: Ensemble) -> Manifest:
    """For gRPC client-side balancing: DNS and EndpointSlices list the pods, and only the ready ones (a
    client balancing over it must not get pods that are starting or draining)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ensemble, headless_service_name(ensemble)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": selector_labels(ensemble),
            "ports": [dict(p) for p in _PORTS],
        },
    }


def render_pdb(ensemble: Ensemble) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(ensemble, ensemble.metadata.name),
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(ensemble)}},
    }


def render_hpa(ensemble: Ensemble) -> Manifest | None:
    scaling = ensemble.spec.autoscaling
    if scaling is None:
        return None
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(ensemble, ensemble.metadata.name),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": ensemble.metadata.name},
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {
                            "type": "Utilization",
                            "averageUtilization": scaling.target_cpu_utilization_percentage,
                        },
                    },
                }
            ],
        },
    }
