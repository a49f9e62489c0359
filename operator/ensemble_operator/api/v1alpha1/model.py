"""The Model custom resource: a versioned model repository and how to load it."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, StringConstraints, model_validator

from .common import API_VERSION, INT32_MAX, UINT32_MAX, Condition, KubeModel, ObjectMeta, ResourceName, TensorSpec

SOURCE_PATTERN = r"^(s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?|/.*|file:///.*)$"


class LatestVersions(KubeModel):
    num_versions: Annotated[int, Field(ge=1, le=UINT32_MAX)] = 1


class SpecificVersions(KubeModel):
    versions: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=64)


class AllVersions(KubeModel):
    pass


class VersionPolicy(KubeModel):
    """Which versions of the repository to serve: exactly one of latest, specific, all."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "(has(self.latest) ? 1 : 0) + (has(self.specific) ? 1 : 0)"
                    " + (has(self.all) ? 1 : 0) == 1",
                    "message": "versionPolicy must set exactly one of latest, specific, all",
                }
            ]
        }
    }

    latest: LatestVersions | None = None
    specific: SpecificVersions | None = None
    all_: AllVersions | None = Field(default=None, alias="all")

    @model_validator(mode="after")
    def _exactly_one(self) -> VersionPolicy:
        if sum(x is not None for x in (self.latest, self.specific, self.all_)) != 1:
            raise ValueError("versionPolicy must set exactly one of latest, specific, all")
        return self

    def summary(self) -> str:
        """A short human form for printer columns: latest(1), specific(1,3), all."""
        if self.latest is not None:
            return f"latest({self.latest.num_versions})"
        if self.specific is not None:
            return "specific(" + ",".join(str(v) for v in self.specific.versions) + ")"
        return "all"

    def selects(self, version: int, available: list[int]) -> bool:
        """Whether `version` is served under this policy, given the versions in the repository."""
        if self.specific is not None:
            return version in self.specific.versions
        if self.latest is not None:
            return version in sorted(available, reverse=True)[: self.latest.num_versions]
        return version in available


class DynamicBatching(KubeModel):
    preferred_batch_size: list[Annotated[int, Field(ge=1, le=INT32_MAX)]] = Field(default_factory=list, max_length=16)
    max_queue_delay_microseconds: Annotated[int, Field(ge=0)] = 0


class InstanceGroup(KubeModel):
    count: Annotated[int, Field(ge=1, le=INT32_MAX)] = 1
    kind: Literal["KIND_AUTO", "KIND_GPU", "KIND_CPU"] = "KIND_AUTO"
    gpus: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] = Field(default_factory=list, max_length=16)


class SecretKeyRef(KubeModel):
    """A Secret in the Model's namespace holding S3 credentials."""

    name: ResourceName
    access_key_id_key: str = "AWS_ACCESS_KEY_ID"
    secret_access_key_key: str = "AWS_SECRET_ACCESS_KEY"


class S3Config(KubeModel):
    """S3 endpoint and credentials: a Secret, or a service account (IRSA), or neither (instance role)."""

    model_config = KubeModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                {
                    "rule": "!(has(self.secretRef) && has(self.serviceAccountName))",
                    "message": "set at most one of secretRef and serviceAccountName",
                }
            ]
        }
    }

    endpoint_url: Annotated[str, StringConstraints(pattern=r"^https?://.+$")] | None = None
    region: str | None = None
    secret_ref: SecretKeyRef | None = None
    service_account_name: ResourceName | None = None

    @model_validator(mode="after")
    def _one_credential(self) -> S3Config:
        if self.secret_ref is not None and self.service_account_name is not None:
            raise ValueError("set at most one of secretRef and serviceAccountName")
        return self


class ModelSpec(KubeModel):
    """A versioned model repository (`<source>/<version>/...`, optional `config.pbtxt`) and overrides."""

    source: Annotated[str, StringConstraints(pattern=SOURCE_PATTERN, max_length=1024)]
    backend: Annotated[str, StringConstraints(max_length=64)] | None = None
    platform: Annotated[str, StringConstraints(max_length=64)] | None = None
    version_policy: VersionPolicy = Field(
        default_factory=lambda: VersionPolicy(latest=LatestVersions(num_versions=1)),
        json_schema_extra={"default": {"latest": {"numVersions": 1}}},
    )
    max_batch_size: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    dynamic_batching: DynamicBatching | None = None
    instance_groups: list[InstanceGroup] = Field(default_factory=list, max_length=16)
    inputs: list[TensorSpec] = Field(default_factory=list, max_length=64)
    outputs: list[TensorSpec] = Field(default_factory=list, max_length=64)
    parameters: dict[str, str] = Field(default_factory=dict)
    s3: S3Config | None = None


class ModelStatus(KubeModel):
    policy: str | None = None
    versions_found: list[int] | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observed_generation: int | None = None


class Model(KubeModel):
    api_version: str = API_VERSION
    kind: Literal["Model"] = "Model"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ModelSpec
    status: ModelStatus = Field(default_factory=ModelStatus)
