"""Shared building blocks of the v1alpha1 API: base model, tensors, conditions, object metadata."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

GROUP = "serving.ensemble.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

DATA_TYPE_PATTERN = (
    r"^(TYPE_)?(BOOL|UINT8|UINT16|UINT32|UINT64|INT8|INT16|INT32|INT64|FP16|FP32|FP64|BF16|BYTES|STRING)$"
)
# Bounds of the ModelConfig fields (Triton's int32 and uint32) the operator writes numbers into.
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1
DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

DataType = Annotated[str, StringConstraints(pattern=DATA_TYPE_PATTERN)]
TensorName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
DnsLabel = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=DNS_LABEL_PATTERN)]
ResourceName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)]
# Kubernetes quantities and int-or-string values: the CRD generator turns `int | str` into
# `x-kubernetes-int-or-string: true`.
Quantity = int | str
IntOrString = int | str


class KubeModel(BaseModel):
    """Base for API types: camelCase on the wire, snake_case in Python, unknown fields ignored."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_wire(self) -> dict[str, Any]:
        """The JSON-compatible wire form (camelCase, unset optionals left out)."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class TensorSpec(KubeModel):
    """A named tensor: Triton data type (TYPE_FP32 or FP32) and dims (-1 is a wildcard)."""

    name: TensorName
    data_type: DataType
    dims: list[Annotated[int, Field(ge=-1)]] = Field(default_factory=list, max_length=16)


class Condition(KubeModel):
    """A Kubernetes-style status condition."""

    type: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class ObjectMeta(KubeModel):
    """The subset of metadata the operator reads."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    deletion_timestamp: str | None = None


def normalize_data_type(data_type: str) -> str:
    """Map a data type to Triton's config form (`FP32` -> `TYPE_FP32`; BYTES and STRING are one type)."""
    bare = data_type.removeprefix("TYPE_")
    if bare == "BYTES":
        bare = "STRING"
    return f"TYPE_{bare}"
