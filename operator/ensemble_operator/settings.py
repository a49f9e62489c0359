"""Operator settings, read once in __main__ from ENSEMBLE_OPERATOR_* environment variables."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from .access import RuntimePolicy, runtime_policy
from .render.common import NetworkPolicySettings, RuntimeDefaults


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ENSEMBLE_OPERATOR_", extra="ignore")

    namespaces: str = Field(
        default="", description="comma-separated namespaces to watch; empty: cluster-wide"
    )
    log_level: str = "INFO"
    status_interval_seconds: float = Field(
        default=30.0,
        gt=0.0,
        description="ask each Ensemble's runtime pods for their reports (served versions, storage, load failures) "
        "this often; reads nothing from the Kubernetes API (its changes arrive by watch)",
    )
    resync_interval_seconds: float = Field(
        default=36000.0,
        gt=0.0,
        description="re-read each Ensemble's owned objects from the API this often: a safety net for what no "
        "watch reports (the control-token Secret, which the operator never reads); like controller-runtime's "
        "default sync period, 10 hours",
    )
    model_settle_seconds: float = Field(
        default=1.0,
        ge=0.0,
        description="wait this long after a Model changes before re-rendering the Ensembles that use it, so that "
        "Models changed together (one kubectl apply) reach the pods in one ConfigMap write",
    )
    pod_http_timeout_seconds: float = 2.0

    webhook_enabled: bool = False
    webhook_addr: str = "0.0.0.0"
    webhook_host: str | None = None
    webhook_port: int = 9443
    webhook_cert_path: str | None = None
    webhook_key_path: str | None = None

    default_runtime_image: str = RuntimeDefaults().image
    default_runtime_image_pull_policy: str = "IfNotPresent"
    default_runtime_resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: {
            "requests": dict(RuntimeDefaults().requests),
            "limits": dict(RuntimeDefaults().limits),
        }
    )
    default_grpc_max_connection_age_seconds: int = Field(
        default=RuntimeDefaults().grpc_max_connection_age_seconds,
        ge=0,
        lt=2**31,
        description="the runtime pods' --grpc-max-connection-age-secs where an Ensemble's extraArgs do not set it, "
        "so that a client's next calls reach replicas added since it connected; 0: connections never age",
    )
    allowed_runtime_images: list[str] = Field(
        default_factory=list,
        description="image repositories an Ensemble's spec.runtime.image may name (an entry ending in '/' allows "
        "every repository under it); empty: the repository of default_runtime_image",
    )
    allowed_runtime_flags: list[str] = Field(
        default_factory=list,
        description="runtime flags an Ensemble's spec.runtime.extraArgs may set, besides the built-in tunables",
    )

    control_key: SecretStr = Field(
        default=SecretStr(""),
        description="key the runtime pods' control tokens derive from (the chart's Secret); empty: pods' "
        "repository APIs stay open",
    )
    pod_namespace: str = Field(default="", description="the operator's namespace (for the NetworkPolicy)")
    network_policy_enabled: bool = False
    network_policy_operator_labels: dict[str, str] = Field(
        default_factory=dict, description="labels of the operator's pods, admitted to the runtime pods"
    )
    network_policy_extra_peers: list[dict[str, Any]] = Field(
        default_factory=list, description="more NetworkPolicyPeers admitted to the inference ports"
    )

    peering_name: str = "ensemble-operator"
    peering_priority: int | None = Field(default=None, description="unset: random, so replicas never tie")
    liveness_endpoint: str = "http://0.0.0.0:8080/healthz"

    def namespace_list(self) -> list[str]:
        return [ns.strip() for ns in self.namespaces.split(",") if ns.strip()]

    @property
    def clusterwide(self) -> bool:
        return not self.namespace_list()

    def runtime_policy(self) -> RuntimePolicy:
        return runtime_policy(self.default_runtime_image, self.allowed_runtime_images, self.allowed_runtime_flags)

    def runtime_defaults(self) -> RuntimeDefaults:
        res = self.default_runtime_resources
        return RuntimeDefaults(
            image=self.default_runtime_image,
            image_pull_policy=self.default_runtime_image_pull_policy,
            requests=dict(res.get("requests", {})),
            limits=dict(res.get("limits", {})),
            grpc_max_connection_age_seconds=self.default_grpc_max_connection_age_seconds,
            control_key=self.control_key.get_secret_value(),
            network_policy=NetworkPolicySettings(
                enabled=self.network_policy_enabled,
                operator_namespace=self.pod_namespace,
                operator_pod_labels=dict(self.network_policy_operator_labels),
                extra_inference_peers=list(self.network_policy_extra_peers),
            ),
        )
