"""Chart checks: values.schema.json vs values.yaml (pure Python), and helm lint/template when a helm
binary exists (built from source by tools/build-tools.sh into ~/.cache/ensemble-operator/tools)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

CHART = Path(__file__).resolve().parents[3] / "charts" / "ensemble-operator"


def _values() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return data


def _schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return data


def test_values_schema_accepts_values_yaml() -> None:
    jsonschema.Draft7Validator.check_schema(_schema())
    jsonschema.validate(_values(), _schema())


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        (("logLevel",), "LOUD"),
        (("replicaCount",), 0),
        (("watchNamespaces",), ["Not_A_Namespace"]),
        (("webhook", "failurePolicy"), "Maybe"),
        (("runtime", "resources", "limits", "memory"), "lots"),
        (("typoKey",), True),
        (("runtime", "grpcMaxConnectionAgeSeconds"), -1),
        (("runtime", "grpcMaxConnectionAgeSeconds"), "5m"),
    ],
)
def test_values_schema_rejects_bad_values(path: tuple[str, ...], bad: Any) -> None:
    values = _values()
    node = values
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(values, _schema())


def test_chart_crds_are_the_generated_ones() -> None:
    names = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert names == [
        "ensembles.serving.ensemble.dev.yaml",
        "kopf-peering.yaml",
        "models.serving.ensemble.dev.yaml",
    ]


def find_helm() -> str | None:
    found = shutil.which("helm")
    if found:
        return found
    cache = Path(os.environ.get("HOME", "/root")) / ".cache" / "ensemble-operator" / "tools"
    candidates = sorted(cache.glob("helm-*/helm"))
    return str(candidates[-1]) if candidates else None


@pytest.fixture
def helm() -> str:
    path = find_helm()
    if path is None:
        pytest.skip(
            "no helm binary on PATH or at ~/.cache/ensemble-operator/tools/helm-*/helm (built by tools/)"
        )
    return path


def _run(helm: str, *args: str) -> str:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_helm_lint(helm: str) -> None:
    _run(helm, "lint", "--strict", str(CHART))


@pytest.mark.parametrize("namespaces", [[], ["ml", "ml-staging"]])
def test_helm_template(helm: str, namespaces: list[str], tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"watchNamespaces": namespaces}))
    out = _run(helm, "template", "ens", str(CHART), "--namespace", "ops", "-f", str(values), "--include-crds")
    docs = [d for d in yaml.safe_load_all(out) if d]
    kinds = [d["kind"] for d in docs]
    assert kinds.count("CustomResourceDefinition") == 4
    assert "ValidatingWebhookConfiguration" in kinds
    if namespaces:
        assert kinds.count("Role") == len(namespaces) and "ClusterRole" not in kinds
    else:
        assert "ClusterRole" in kinds and "Role" not in kinds
    (vwc,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    assert all(w["clientConfig"]["caBundle"] for w in vwc["webhooks"])


@pytest.mark.parametrize("namespaces", [[], ["ml"]])
def test_helm_template_admission_policy(helm: str, namespaces: list[str], tmp_path: Path) -> None:
    """The operator may create access reviews in every mode (no cluster role needed for a namespaced
    install), and gets the allowed runtime images and flags from the values."""
    values = tmp_path / "values.yaml"
    policy = {"allowedImages": ["registry.example/ml/"], "allowedExtraArgs": ["--some-tunable"]}
    values.write_text(yaml.safe_dump({"watchNamespaces": namespaces, "runtime": {**_values()["runtime"], **policy}}))
    out = _run(helm, "template", "ens", str(CHART), "--namespace", "ops", "-f", str(values))
    docs = [d for d in yaml.safe_load_all(out) if d]
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert roles and all(
        any(
            r["apiGroups"] == ["authorization.k8s.io"] and r["resources"] == ["localsubjectaccessreviews"]
            and r["verbs"] == ["create"]
            for r in role["rules"]
        )
        for role in roles
    )
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["ENSEMBLE_OPERATOR_ALLOWED_RUNTIME_IMAGES"]) == ["registry.example/ml/"]
    assert json.loads(env["ENSEMBLE_OPERATOR_ALLOWED_RUNTIME_FLAGS"]) == ["--some-tunable"]


def test_helm_template_control_key_rbac_and_network_policy_setting(
    helm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"networkPolicy": {"enabled": True, "extraInferenceFrom": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}}]}}))
    out = _run(helm, "template", "ens", str(CHART), "--namespace", "ops", "-f", str(values))
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}
    key = docs[("Secret", "ens-ensemble-operator-control-key")]
    assert len(key["data"]["key"]) >= 64
    (container,) = docs[("Deployment", "ens-ensemble-operator")]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["ENSEMBLE_OPERATOR_CONTROL_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "ens-ensemble-operator-control-key", "key": "key"}
    assert env["ENSEMBLE_OPERATOR_NETWORK_POLICY_ENABLED"]["value"] == "true"
    assert json.loads(env["ENSEMBLE_OPERATOR_NETWORK_POLICY_OPERATOR_LABELS"]["value"]) == {
        "app.kubernetes.io/name": "ensemble-operator", "app.kubernetes.io/instance": "ens"}
    assert json.loads(env["ENSEMBLE_OPERATOR_NETWORK_POLICY_EXTRA_PEERS"]["value"])[0]["namespaceSelector"]
    rules = docs[("ClusterRole", "ens-ensemble-operator")]["rules"]
    secrets = [r for r in rules if "secrets" in r["resources"]]
    assert secrets == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "patch"]}], secrets
    assert any("networkpolicies" in r["resources"] for r in rules)
    # the operator's settings read what the chart sets
    from ensemble_operator.settings import Settings

    for name, e in env.items():
        if "value" in e:
            monkeypatch.setenv(name, e["value"])
    monkeypatch.setenv("ENSEMBLE_OPERATOR_POD_NAMESPACE", "ops")
    settings = Settings()
    policy = settings.runtime_defaults().network_policy
    assert policy.enabled and policy.operator_namespace == "ops"
    assert policy.operator_pod_labels["app.kubernetes.io/instance"] == "ens"
    assert settings.runtime_defaults().grpc_max_connection_age_seconds == 300  # the chart's default, as a value
