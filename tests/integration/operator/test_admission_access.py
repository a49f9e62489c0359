"""Who may make runtime pods carry which credentials and run which image, on the real control plane: the API
server (RBAC authorization) calls the operator's webhook, which asks it with access reviews for the user of
the request. The user is "alice", impersonated by the admin client (kubectl --as / --as-group), who may
create and change Models and Ensembles in the namespace but holds only the further rights a test grants."""

from __future__ import annotations

import copy
import uuid

import pytest

from tests.infra.controlplane import ControlPlane

from .support import JSON, OperatorProcess, apply, cpu_ensemble, example_models, get, namespace_with, wait_for
from .test_admission import kubectl_apply

pytestmark = pytest.mark.controlplane

USER, GROUP = "alice", "ml-authors"
AS_ALICE = (f"--as={USER}", f"--as-group={GROUP}")
MODEL_DENIED = 'admission webhook "validate-model.serving.ensemble.dev" denied the request'
ENSEMBLE_DENIED = 'admission webhook "validate-ensemble.serving.ensemble.dev" denied the request'
EXAMPLE_SECRET = "model-store-credentials"  # what the example Models name


def _role(cp: ControlPlane, ns: str, rules: list[JSON]) -> None:
    """A Role with `rules`, bound to alice."""
    name = f"alice-{uuid.uuid4().hex[:6]}"
    cp.api("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": name}, "rules": rules,
    })  # fmt: skip
    cp.api("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
    })  # fmt: skip


def _grant(cp: ControlPlane, ns: str, verb: str, resource: str, name: str) -> None:
    _role(cp, ns, [{"apiGroups": [""], "resources": [resource], "verbs": [verb], "resourceNames": [name]}])


@pytest.fixture
def ns(audited_control_plane: ControlPlane, operator: OperatorProcess) -> str:
    """A namespace with the example Models and their Secret (applied by the admin), and alice's author Role."""
    cp = audited_control_plane
    name = namespace_with(cp, "access")
    verbs = ["get", "list", "watch", "create", "update", "patch"]
    _role(cp, name, [{"apiGroups": ["serving.ensemble.dev"], "resources": ["models", "ensembles"], "verbs": verbs}])
    cp.api("POST", f"/api/v1/namespaces/{name}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
        "stringData": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key", "db-password": "hunter2"},
    })  # fmt: skip
    wait_for(lambda: _as_alice_allowed(cp, name), "alice's Role to take effect", timeout=30)
    return name


def _as_alice_allowed(cp: ControlPlane, ns: str) -> bool:
    proc = cp.kubectl("auth", "can-i", "create", "models.serving.ensemble.dev", "-n", ns, *AS_ALICE, check=False)
    return proc.stdout.strip() == "yes"


def _model(name: str, s3: JSON, source: str = "s3://models/image-pipeline/classifier") -> JSON:
    doc = copy.deepcopy(
        next(m for m in example_models() if m["kind"] == "Model" and m["metadata"]["name"] == "classifier")
    )
    doc["metadata"] = {"name": name}
    doc["spec"]["source"] = source
    doc["spec"]["s3"] = {"endpointUrl": "http://attacker.example:9000", **s3}
    return doc


def _model_exists(cp: ControlPlane, ns: str, name: str) -> bool:
    return get(cp, f"/apis/serving.ensemble.dev/v1alpha1/namespaces/{ns}/models/{name}") is not None


def _accepted_once_granted(cp: ControlPlane, ns: str, doc: JSON) -> str:
    """Apply as alice until accepted (RBAC caches take a moment to see a new Role); the last output."""
    last: list[str] = [""]

    def attempt() -> bool:
        code, last[0] = kubectl_apply(cp, ns, doc, *AS_ALICE)
        return code == 0

    wait_for(attempt, f"{doc['kind']} {doc['metadata']['name']} accepted for alice", timeout=30, detail=lambda: last[0])
    return last[0]


def test_a_secret_the_author_may_not_read_is_refused(audited_control_plane: ControlPlane, ns: str) -> None:
    cp = audited_control_plane
    doc = _model("exfil", {"secretRef": {"name": "creds", "accessKeyIdKey": "db-password"}})
    code, output = kubectl_apply(cp, ns, doc, *AS_ALICE)
    assert code != 0, output
    assert MODEL_DENIED in output
    assert "spec.s3.secretRef.name: user 'alice' may not use Secret 'creds'" in output
    assert "missing RBAC permission 'get' on secrets/creds in namespace" in output
    assert not _model_exists(cp, ns, "exfil")

    _grant(cp, ns, "get", "secrets", "creds")
    _accepted_once_granted(cp, ns, doc)
    assert _model_exists(cp, ns, "exfil")


def test_a_service_account_the_author_may_not_use_is_refused(audited_control_plane: ControlPlane, ns: str) -> None:
    cp = audited_control_plane
    doc = _model("irsa", {"serviceAccountName": "bucket-reader"})
    code, output = kubectl_apply(cp, ns, doc, *AS_ALICE)
    assert code != 0, output
    assert MODEL_DENIED in output
    assert "spec.s3.serviceAccountName: user 'alice' may not use ServiceAccount 'bucket-reader'" in output
    assert "missing RBAC permission 'impersonate' on serviceaccounts/bucket-reader" in output

    _grant(cp, ns, "impersonate", "serviceaccounts", "bucket-reader")
    _accepted_once_granted(cp, ns, doc)
    # The service account every pod gets anyway needs nothing.
    code, output = kubectl_apply(cp, ns, _model("plain", {"serviceAccountName": "default"}), *AS_ALICE)
    assert code == 0, output


def test_an_update_is_checked_again(audited_control_plane: ControlPlane, ns: str) -> None:
    """The admin made a Model with the Secret; alice may edit Models but not read the Secret."""
    cp = audited_control_plane
    doc = _model("shared", {"secretRef": {"name": "creds"}})
    apply(cp, ns, doc)
    # Pointing the credentials elsewhere, or the code that runs with them, is a new use of the Secret.
    for change in ({"source": "s3://attacker-bucket/model"}, {"s3": {"endpointUrl": "http://evil.example"}}):
        edited = copy.deepcopy(doc)
        for key, value in change.items():
            edited["spec"][key] = {**edited["spec"][key], **value} if isinstance(value, dict) else value
        code, output = kubectl_apply(cp, ns, edited, *AS_ALICE)
        assert code != 0, output
        assert "spec.s3.secretRef.name: user 'alice' may not use Secret 'creds'" in output
    # A change that leaves the spec alone (a label) is not.
    labelled = copy.deepcopy(doc)
    labelled["metadata"]["labels"] = {"team": "vision"}
    code, output = kubectl_apply(cp, ns, labelled, *AS_ALICE)
    assert code == 0, output


def test_an_ensemble_that_pulls_in_a_secret_is_checked(audited_control_plane: ControlPlane, ns: str) -> None:
    """The example Models (the admin's) name the example Secret; alice's Ensemble would put it in its pods."""
    cp = audited_control_plane
    doc = cpu_ensemble("alices", replicas=1)
    code, output = kubectl_apply(cp, ns, doc, *AS_ALICE, "--dry-run=server")
    assert code != 0, output
    assert ENSEMBLE_DENIED in output
    assert (
        f"spec.steps[0].modelRef.name: Model 'preprocess' brings Secret '{EXAMPLE_SECRET}' "
        "(spec.s3.secretRef.name) into the runtime pods; user 'alice' may not use" in output
    )
    _grant(cp, ns, "get", "secrets", EXAMPLE_SECRET)
    _accepted_once_granted(cp, ns, doc)


def test_a_model_joining_an_ensemble_with_secrets_is_checked(audited_control_plane: ControlPlane, ns: str) -> None:
    """alice's Model, served beside the admin's, would run her code in pods that carry the admin's Secret."""
    cp = audited_control_plane
    apply(cp, ns, cpu_ensemble("admins", replicas=1))
    mine = copy.deepcopy(
        next(m for m in example_models() if m["kind"] == "Model" and m["metadata"]["name"] == "postprocess")
    )
    mine["spec"].pop("s3")  # alice's own code, no credentials of its own
    mine["spec"]["source"] = "s3://alices-bucket/postprocess"
    code, output = kubectl_apply(cp, ns, mine, *AS_ALICE)
    assert code != 0, output
    assert MODEL_DENIED in output
    assert (
        "spec: this Model runs in the pods of Ensemble 'admins', which carry Secret "
        f"'{EXAMPLE_SECRET}' (Model 'classifier' spec.s3.secretRef.name); user 'alice' may not use" in output
    )


def test_an_ensembles_tls_secret_is_checked_for_it_and_for_models_joining_it(
        audited_control_plane: ControlPlane, ns: str) -> None:
    """spec.grpcTls mounts a Secret's key in the pods: naming it takes `get` on it, and so does a Model whose code
    would run beside it."""
    cp = audited_control_plane
    alices = cpu_ensemble("alices-tls", replicas=1)
    alices["spec"]["grpcTls"] = {"secretName": "serving-cert", "mutual": True}
    code, output = kubectl_apply(cp, ns, alices, *AS_ALICE, "--dry-run=server")
    assert code != 0, output
    assert ENSEMBLE_DENIED in output
    assert ("spec.grpcTls.secretName: user 'alice' may not use Secret 'serving-cert': missing RBAC permission "
            "'get' on secrets/serving-cert in namespace" in output)
    admins = cpu_ensemble("admins-tls", replicas=1)
    admins["spec"]["grpcTls"] = {"secretName": "serving-cert"}
    apply(cp, ns, admins)
    mine = copy.deepcopy(
        next(m for m in example_models() if m["kind"] == "Model" and m["metadata"]["name"] == "postprocess")
    )
    mine["spec"].pop("s3")
    mine["spec"]["source"] = "s3://alices-bucket/postprocess"
    code, output = kubectl_apply(cp, ns, mine, *AS_ALICE)
    assert code != 0, output
    assert MODEL_DENIED in output
    assert ("spec: this Model runs in the pods of Ensemble 'admins-tls', which carry Secret 'serving-cert' "
            "(spec.grpcTls.secretName); user 'alice' may not use" in output)
    _grant(cp, ns, "get", "secrets", "serving-cert")
    _grant(cp, ns, "get", "secrets", EXAMPLE_SECRET)
    _accepted_once_granted(cp, ns, alices)


def test_an_image_outside_the_allowlist_is_refused(audited_control_plane: ControlPlane, ns: str) -> None:
    cp = audited_control_plane
    doc = cpu_ensemble("imaged", replicas=1, image="docker.io/attacker/runtime:1")
    code, output = kubectl_apply(cp, ns, doc, "--dry-run=server")  # even for the admin
    assert code != 0, output
    assert ENSEMBLE_DENIED in output
    assert (
        "spec.runtime.image: image repository 'docker.io/attacker/runtime' is not in the operator's allowed" in output
    )
    allowed = cpu_ensemble("imaged", replicas=1, image="ghcr.io/ensemble-operator/ensemble-runtime:0.2.0")
    code, output = kubectl_apply(cp, ns, allowed, "--dry-run=server")
    assert code == 0, output


@pytest.mark.parametrize(
    ("args", "bad"),
    [
        (["--model-control-mode", "explicit"], 0),
        (["--log-verbose=1", "--model-repository=/etc"], 1),
        (["--model-control=explicit"], 0),  # argparse would expand the abbreviation
    ],
)
def test_extra_args_may_not_override_the_operators_flags(
    audited_control_plane: ControlPlane, ns: str, args: list[str], bad: int
) -> None:
    cp = audited_control_plane
    doc = cpu_ensemble("flagged", replicas=1)
    doc["spec"]["runtime"]["extraArgs"] = args
    code, output = kubectl_apply(cp, ns, doc, "--dry-run=server")
    assert code != 0, output
    assert ENSEMBLE_DENIED in output
    assert f"spec.runtime.extraArgs[{bad}]: flag '{args[bad].split('=')[0]}' may not be set by an Ensemble" in output
    doc["spec"]["runtime"]["extraArgs"] = ["--log-verbose", "1"]
    code, output = kubectl_apply(cp, ns, doc, "--dry-run=server")
    assert code == 0, output
