"""The Ensemble custom resource: a DAG of steps over Models, served by runtime pods."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from .common import (
    API_VERSION,
    INT32_MAX,
    Condition,
    DnsLabel,
    IntOrString,
    KubeModel,
    ObjectMeta,
    Quantity,
    ResourceName,
    TensorName,
    TensorSpec,
)

MAX_STEPS = 64


def _unique_names_rule(what: str) -> dict[str, Any]:
    return {
        "x-kubernetes-validations": [
            {
                "rule": "self.all(x, self.filter(y, y.name == x.name).size() == 1)",
                "message": f"{what} names must be unique",
            }
        ]
    }


class ModelRef(KubeModel):
    name: ResourceName


class Step(KubeModel):
    """One step: run `modelRef` at `modelVersion` (-1 = newest served), mapping its tensors."""

    name: DnsLabel
    model_ref: ModelRef
    model_version: Annotated[int, Field(ge=-1)] = -1
    input_map: dict[TensorName, TensorName] = Field(
        default_factory=dict, description="model input name -> ensemble tensor name"
    )
    output_map: dict[TensorName, TensorName] = Field(
        default_factory=dict, description="model output name -> ensemble tensor name"
    )


class ResourceRequirements(KubeModel):
    requests: dict[str, Quantity] = Field(default_factory=dict)
    limits: dict[str, Quantity] = Field(default_factory=dict)


class RuntimeSpec(KubeModel):
    image: str | None = None
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    poll_interval_seconds: Annotated[int, Field(ge=1, le=3600)] = 15
    memory_budget: Quantity | None = None
    memory_policy: Literal["refuse", "drain-then-swap"] | None = None
    exit_timeout_seconds: Annotated[int, Field(ge=0, le=3600)] = 30
    startup_timeout_seconds: Annotated[int, Field(ge=30, le=86400)] = 1800
    cache_size_limit: Quantity | None = None
    extra_args: list[str] = Field(default_factory=list, max_length=64)


class Toleration(KubeModel):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class Scheduling(KubeModel):
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    affinity: dict[str, Any] | None = Field(
        default=None,
        description="a core/v1 Affinity, passed through to the pod spec",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    priority_class_name: ResourceName | None = None


class Rollout(KubeModel):
    max_surge: IntOrString = 1
    progress_deadline_seconds: Annotated[int, Field(ge=30)] = 600


class Autoscaling(KubeModel):
    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "self.minReplicas <= self.maxReplicas",
                    "message": "minReplicas must be <= maxReplicas",
                }
            ]
        }
    }

    min_replicas: Annotated[int, Field(ge=1)] = 1
    max_replicas: Annotated[int, Field(ge=1)]
    target_cpu_utilization_percentage: Annotated[int, Field(ge=1, le=100)] = 80

    @model_validator(mode="after")
    def _bounds(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError("minReplicas must be <= maxReplicas")
        return self


class GrpcTls(KubeModel):
    """TLS on the runtime pods' gRPC port (Triton's --grpc-use-ssl): the serving certificate and key from a Secret
    in the Ensemble's namespace (`tls.crt`, `tls.key`: a kubernetes.io/tls Secret, or cert-manager's), and with
    `mutual` its `ca.crt` too, whose certificates a client's must chain to (--grpc-use-ssl-mutual). HTTP and
    the probes stay plaintext. The pods read the files at start: a renewed certificate reaches a pod restarted."""

    secret_name: ResourceName
    mutual: bool = False


class EnsembleSpec(KubeModel):
    """A DAG of steps over Models served as one Triton ensemble by a set of runtime pods."""

    inputs: list[TensorSpec] = Field(
        min_length=1, max_length=64, json_schema_extra=_unique_names_rule("input")
    )
    outputs: list[TensorSpec] = Field(
        min_length=1, max_length=64, json_schema_extra=_unique_names_rule("output")
    )
    steps: list[Step] = Field(
        min_length=1, max_length=MAX_STEPS, json_schema_extra=_unique_names_rule("step")
    )
    max_batch_size: Annotated[int, Field(ge=0, le=INT32_MAX)] = 0
    replicas: Annotated[int, Field(ge=0)] = 1
    resources: ResourceRequirements | None = None
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, json_schema_extra={"default": {}})
    scheduling: Scheduling = Field(default_factory=Scheduling, json_schema_extra={"default": {}})
    rollout: Rollout = Field(default_factory=Rollout, json_schema_extra={"default": {}})
    autoscaling: Autoscaling | None = None
    grpc_tls: GrpcTls | None = None

    @model_validator(mode="after")
    def _unique_names(self) -> EnsembleSpec:
        for what, names in (
            ("step", [s.name for s in self.steps]),
            ("input", [t.name for t in self.inputs]),
            ("output", [t.name for t in self.outputs]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{what} names must be unique: {', '.join(dupes)}")
        return self


Phase = Literal["Pending", "Progressing", "Ready", "Degraded", "Invalid"]


class EnsembleStatus(KubeModel):
    phase: Phase | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    served_versions: dict[str, int] | None = None
    served_versions_summary: str | None = None
    endpoint: str | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = None


class Ensemble(KubeModel):
    api_version: str = API_VERSION
    kind: Literal["Ensemble"] = "Ensemble"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: EnsembleSpec
    status: EnsembleStatus = Field(default_factory=EnsembleStatus)
