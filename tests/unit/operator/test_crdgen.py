from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from ensemble_operator.api import crdgen
from ensemble_operator.api.schema import find_violations, structural_schema
from pydantic import BaseModel


def _crd(kind: str) -> dict[str, Any]:
    (info,) = [i for i in crdgen.crd_infos() if i.kind == kind]
    return crdgen.build_crd(info)


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = _crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crds_are_up_to_date(repo_root: Path) -> None:
    for rel, text in crdgen.generated_files().items():
        path = repo_root / rel
        assert path.exists(), f"{rel} missing: run python -m ensemble_operator.api.crdgen"
        assert path.read_text() == text, f"{rel} is stale: run python -m ensemble_operator.api.crdgen"


def test_check_mode_detects_drift(tmp_path: Path) -> None:
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 1
    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 0
    target = tmp_path / "crds" / "models.serving.ensemble.dev.yaml"
    target.write_text(target.read_text() + "# edited by hand\n")
    assert crdgen.main(["--root", str(tmp_path), "--check"]) == 1


@pytest.mark.parametrize("kind", ["Model", "Ensemble"])
def test_schemas_are_structural(kind: str) -> None:
    schema = _schema(kind)
    assert find_violations(schema) == []
    assert "$ref" not in yaml.safe_dump(schema)
    assert "nullable" not in yaml.safe_dump(schema)


@pytest.mark.parametrize(("kind", "short"), [("Model", "mdl"), ("Ensemble", "ens")])
def test_names_subresources_and_columns(kind: str, short: str) -> None:
    crd = _crd(kind)
    assert short in crd["spec"]["names"]["shortNames"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["Age"] == ".metadata.creationTimestamp"
    if kind == "Ensemble":
        assert columns["Ready"] == ".status.readyReplicas"
        assert columns["Served"] == ".status.servedVersionsSummary"
    else:
        assert columns["Policy"] == ".status.policy"
        assert columns["Versions"] == ".status.versionsFound"


def test_cel_rules_and_defaults() -> None:
    spec = _schema("Ensemble")["properties"]["spec"]["properties"]
    assert "step names must be unique" in str(spec["steps"]["x-kubernetes-validations"])
    assert "minReplicas <= self.maxReplicas" in str(spec["autoscaling"]["x-kubernetes-validations"])
    assert spec["steps"]["items"]["properties"]["modelVersion"]["default"] == -1
    assert spec["scheduling"]["properties"]["affinity"]["x-kubernetes-preserve-unknown-fields"] is True
    assert spec["rollout"]["properties"]["maxSurge"]["x-kubernetes-int-or-string"] is True
    gpu = spec["resources"]["properties"]["limits"]["additionalProperties"]
    assert gpu["x-kubernetes-int-or-string"] is True
    model_spec = _schema("Model")["properties"]["spec"]["properties"]
    policy = model_spec["versionPolicy"]
    assert policy["default"] == {"latest": {"numVersions": 1}}
    assert "exactly one" in policy["x-kubernetes-validations"][0]["message"]
    assert "x-kubernetes-validations" in model_spec["s3"]
    conditions = _schema("Ensemble")["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"


def test_preserve_unknown_fields_only_where_needed() -> None:
    text = yaml.safe_dump(_schema("Ensemble")) + yaml.safe_dump(_schema("Model"))
    assert text.count("x-kubernetes-preserve-unknown-fields") == 1


def test_unsupported_union_is_rejected() -> None:
    class Bad(BaseModel):
        value: int | list[int]

    with pytest.raises(ValueError, match="structural"):
        structural_schema(Bad)
