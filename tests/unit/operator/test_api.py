from __future__ import annotations

from typing import Any

import pytest
from ensemble_operator.api.v1alpha1 import (
    Autoscaling,
    EnsembleSpec,
    Model,
    ModelSpec,
    S3Config,
    VersionPolicy,
)
from pydantic import ValidationError


@pytest.mark.parametrize(
    ("policy", "ok"),
    [
        ({"latest": {"numVersions": 2}}, True),
        ({"specific": {"versions": [1, 3]}}, True),
        ({"all": {}}, True),
        ({}, False),
        ({"latest": {}, "all": {}}, False),
        ({"specific": {"versions": []}}, False),
    ],
)
def test_version_policy_exactly_one(policy: dict[str, Any], ok: bool) -> None:
    if ok:
        VersionPolicy.model_validate(policy)
    else:
        with pytest.raises(ValidationError):
            VersionPolicy.model_validate(policy)


def test_policy_summary_and_selection() -> None:
    assert VersionPolicy.model_validate({"latest": {"numVersions": 2}}).summary() == "latest(2)"
    latest = VersionPolicy.model_validate({"latest": {"numVersions": 2}})
    assert latest.selects(3, [1, 2, 3]) and not latest.selects(1, [1, 2, 3])
    assert VersionPolicy.model_validate({"specific": {"versions": [1, 3]}}).summary() == "specific(1,3)"
    assert VersionPolicy.model_validate({"all": {}}).selects(1, [1, 2])


def test_model_defaults_and_wire_round_trip() -> None:
    spec = ModelSpec.model_validate({"source": "s3://bucket/models/m"})
    assert spec.version_policy.summary() == "latest(1)"
    again = ModelSpec.model_validate(spec.to_wire())
    assert again == spec
    assert "versionPolicy" in spec.to_wire()


@pytest.mark.parametrize("source", ["http://x/y", "s3://", "relative/path", "s3://UPPER/x"])
def test_bad_sources_rejected(source: str) -> None:
    with pytest.raises(ValidationError):
        ModelSpec.model_validate({"source": source})


def test_s3_credentials_are_exclusive() -> None:
    with pytest.raises(ValidationError, match="at most one"):
        S3Config.model_validate({"secretRef": {"name": "s"}, "serviceAccountName": "sa"})


def test_autoscaling_bounds() -> None:
    with pytest.raises(ValidationError, match="minReplicas"):
        Autoscaling.model_validate({"minReplicas": 5, "maxReplicas": 2})


def _spec(**extra: Any) -> dict[str, Any]:
    return {
        "inputs": [{"name": "x", "dataType": "FP32", "dims": [1]}],
        "outputs": [{"name": "y", "dataType": "FP32", "dims": [1]}],
        "steps": [{"name": "a", "modelRef": {"name": "m"}, "inputMap": {"i": "x"}, "outputMap": {"o": "y"}}],
        **extra,
    }


def test_step_names_unique() -> None:
    step = {"name": "a", "modelRef": {"name": "m"}}
    with pytest.raises(ValidationError, match="step names must be unique: a"):
        EnsembleSpec.model_validate(_spec(steps=[step, step]))


def test_bad_data_type_rejected() -> None:
    with pytest.raises(ValidationError):
        EnsembleSpec.model_validate(_spec(inputs=[{"name": "x", "dataType": "FLOAT"}]))


def test_example_parses(models: dict[str, Model]) -> None:
    assert models["postprocess"].spec.version_policy.all_ is not None
    assert models["classifier"].spec.dynamic_batching is not None
