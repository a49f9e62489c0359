"""The admission rules on credentials, images and runtime flags (pure; the API server's answer is a table)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from ensemble_operator.access import (
    AccessGate,
    Decision,
    Host,
    Permission,
    Podmate,
    UserInfo,
    image_repository,
    runtime_policy,
)
from ensemble_operator.api.v1alpha1 import EnsembleSpec, Model, ModelSpec
from ensemble_operator.settings import Settings

NS = "ml"
ALICE = UserInfo("alice", "u-1", ("team",), {"scopes": ("a",)})
POLICY = runtime_policy("ghcr.io/ensemble-operator/ensemble-runtime:0.1.0", flags=["--extra-tunable"])


class Table:
    """An authorizer that grants what it was given and records what it was asked."""

    def __init__(self, *granted: Permission) -> None:
        self.granted = set(granted)
        self.asked: list[tuple[UserInfo, Permission]] = []

    def __call__(self, user: UserInfo, permission: Permission) -> Decision:
        self.asked.append((user, permission))
        return Decision(permission in self.granted)


def _model(secret: str | None = None, account: str | None = None, source: str = "s3://bucket/m") -> ModelSpec:
    s3: dict[str, object] = {"endpointUrl": "http://store:9000"}
    if secret:
        s3["secretRef"] = {"name": secret}
    if account:
        s3["serviceAccountName"] = account
    return ModelSpec.model_validate({"source": source, "s3": s3})


def _ensemble(models: Sequence[str], image: str | None = None, args: Sequence[str] = (),
              tls: str | None = None) -> EnsembleSpec:
    steps = [{"name": f"s{i}", "modelRef": {"name": m}} for i, m in enumerate(models)]
    runtime: dict[str, object] = {"extraArgs": list(args)}
    if image:
        runtime["image"] = image
    tensors = [{"name": "x", "dataType": "FP32"}]
    spec: dict[str, object] = {"inputs": tensors, "outputs": tensors, "steps": steps, "runtime": runtime}
    if tls:
        spec["grpcTls"] = {"secretName": tls}
    return EnsembleSpec.model_validate(spec)


GET_CREDS = Permission("get", "secrets", "creds", NS)
USE_READER = Permission("impersonate", "serviceaccounts", "reader", NS)


@pytest.mark.parametrize(
    ("image", "repository"),
    [
        ("ghcr.io/ensemble-operator/ensemble-runtime:0.1.0", "ghcr.io/ensemble-operator/ensemble-runtime"),
        ("localhost:5000/runtime@sha256:" + "a" * 64, "localhost:5000/runtime"),
        ("busybox", "busybox"),
        ("registry.example/ml/runtime:1.0@sha256:" + "b" * 64, "registry.example/ml/runtime"),
        ("Registry.Example/UPPER:1", None),
        ("ghcr.io/x/y:1 ; rm", None),
        ("", None),
        ("a" * 600, None),
    ],
)
def test_image_repository(image: str, repository: str | None) -> None:
    assert image_repository(image) == repository


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("ghcr.io/ensemble-operator/ensemble-runtime:0.2.0", True),
        ("ghcr.io/ensemble-operator/ensemble-runtime@sha256:" + "c" * 64, True),
        ("ghcr.io/ensemble-operator/ensemble-runtime-evil:1", False),
        ("ghcr.io/ensemble-operator/ensemble-runtime/evil:1", False),
        ("docker.io/attacker/runtime:1", False),
    ],
)
def test_images_outside_the_allowlist_are_refused(image: str, allowed: bool) -> None:
    refusal = POLICY.image_refusal(image)
    assert (refusal is None) == allowed
    if refusal:
        assert refusal.startswith("spec.runtime.image: ")


def test_a_prefix_entry_allows_what_is_under_it() -> None:
    policy = runtime_policy("x", images=["registry.example/ml/"])
    assert policy.image_refusal("registry.example/ml/runtime:1") is None
    assert policy.image_refusal("registry.example/mlx/runtime:1") is not None


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["--log-verbose", "1", "--memory-factor=1.5", "--extra-tunable", "-3"], []),
        (["--model-control-mode", "explicit"], [0]),
        (["--log-verbose=1", "--model-control=explicit"], [1]),  # an abbreviation argparse would expand
        (["--model-repository=/etc", "--repository-config", "/tmp/x.json"], [0, 1]),
        (["--http-address=0.0.0.0", "--grpc-port=1", "--model-cache-dir=/tmp"], [0, 1, 2]),
        (["--s3-endpoint-url=http://evil", "-h", "--", "--http-restricted-api=x:y=z"], [0, 1, 2, 3]),
    ],
)
def test_extra_args_only_from_the_allowlist(args: list[str], refused: list[int]) -> None:
    refusals = POLICY.flag_refusals(args)
    assert [int(r.split("[", 1)[1].split("]", 1)[0]) for r in refusals] == refused
    for r in refusals:
        assert "may not be set by an Ensemble" in r


def test_model_credentials_need_get_and_impersonate() -> None:
    table = Table()
    gate = AccessGate(POLICY, table)
    refusals = gate.model(ALICE, NS, _model(secret="creds"), None, list)
    assert refusals == [
        "spec.s3.secretRef.name: user 'alice' may not use Secret 'creds': missing RBAC permission 'get' on "
        "secrets/creds in namespace 'ml'"
    ]
    assert table.asked == [(ALICE, GET_CREDS)]
    refusals = gate.model(ALICE, NS, _model(account="reader"), None, list)
    assert refusals == [
        "spec.s3.serviceAccountName: user 'alice' may not use ServiceAccount 'reader': missing RBAC permission "
        "'impersonate' on serviceaccounts/reader in namespace 'ml'"
    ]
    granted = AccessGate(POLICY, Table(GET_CREDS, USE_READER))
    assert granted.model(ALICE, NS, _model(secret="creds"), None, list) == []
    assert granted.model(ALICE, NS, _model(account="reader"), None, list) == []


def test_the_default_service_account_and_no_credentials_need_nothing() -> None:
    table = Table()
    gate = AccessGate(POLICY, table)
    assert gate.model(ALICE, NS, _model(account="default"), None, list) == []
    assert gate.model(ALICE, NS, ModelSpec.model_validate({"source": "/models/m"}), None, list) == []
    assert table.asked == []


def test_model_updates_are_checked_when_the_spec_changes() -> None:
    table = Table()
    gate = AccessGate(POLICY, table)
    spec = _model(secret="creds")
    assert gate.model(ALICE, NS, spec, spec, list) == []  # metadata only (finalizers, labels)
    assert table.asked == []
    moved = _model(secret="creds", source="s3://elsewhere/m")  # same Secret, other code: checked again
    assert gate.model(ALICE, NS, moved, spec, list)
    assert gate.model(ALICE, NS, _model(secret="other"), spec, list)


def test_a_model_is_checked_for_the_credentials_of_its_podmates() -> None:
    table = Table()
    gate = AccessGate(POLICY, table)
    mates = [Podmate("pipe", "trusted", _model(secret="creds"))]
    refusals = gate.model(ALICE, NS, ModelSpec.model_validate({"source": "s3://mine-bucket/m"}), None, lambda: mates)
    assert refusals == [
        "spec: this Model runs in the pods of Ensemble 'pipe', which carry Secret 'creds' (Model 'trusted' "
        "spec.s3.secretRef.name); user 'alice' may not use Secret 'creds': missing RBAC permission 'get' on "
        "secrets/creds in namespace 'ml'"
    ]
    assert AccessGate(POLICY, Table(GET_CREDS)).model(ALICE, NS, _model(), None, lambda: mates) == []


def test_an_ensemble_is_checked_for_its_models_credentials_each_once() -> None:
    models = {
        "a": Model.model_validate({"metadata": {"name": "a"}, "spec": _model(secret="creds").to_wire()}),
        "b": Model.model_validate({"metadata": {"name": "b"}, "spec": _model(secret="creds").to_wire()}),
        "c": Model.model_validate({"metadata": {"name": "c"}, "spec": {"source": "/m"}}),
    }
    table = Table()
    refusals = AccessGate(POLICY, table).ensemble(ALICE, NS, _ensemble(["a", "b", "c"]), None, models)
    assert refusals == [
        "spec.steps[0].modelRef.name: Model 'a' brings Secret 'creds' (spec.s3.secretRef.name) into the runtime "
        "pods; user 'alice' may not use Secret 'creds': missing RBAC permission 'get' on secrets/creds in "
        "namespace 'ml'"
    ]
    assert table.asked == [(ALICE, GET_CREDS)]
    # An update that adds no Model (scale, image) asks nothing; one that adds a Model asks for all of them.
    table.asked.clear()
    gate = AccessGate(POLICY, table)
    assert gate.ensemble(ALICE, NS, _ensemble(["a", "c"]), _ensemble(["a", "b", "c"]), models) == []
    assert table.asked == []
    assert gate.ensemble(ALICE, NS, _ensemble(["a", "c"]), _ensemble(["c"]), models)
    assert table.asked == [(ALICE, GET_CREDS)]


def test_an_ensemble_update_checks_a_changed_image_and_changed_args() -> None:
    gate = AccessGate(POLICY, Table())
    old = _ensemble(["c"], image="registry.invalid/runtime:1", args=["--grpc-port=1"])  # admitted earlier
    assert gate.ensemble(ALICE, NS, old, old, {}) == []
    (refusal,) = gate.ensemble(ALICE, NS, _ensemble(["c"], image="registry.invalid/runtime:2"), old, {})
    assert refusal.startswith("spec.runtime.image: image repository 'registry.invalid/runtime' is not in")
    (refusal,) = gate.ensemble(ALICE, NS, _ensemble(["c"], args=["--http-port=2"]), None, {})
    assert refusal.startswith("spec.runtime.extraArgs[0]: flag '--http-port'")


GET_CERT = Permission("get", "secrets", "serving-cert", NS)


def test_an_ensembles_tls_secret_needs_get_where_named_anew_or_where_a_model_joins_it() -> None:
    table = Table()
    gate = AccessGate(POLICY, table)
    (refusal,) = gate.ensemble(ALICE, NS, _ensemble(["c"], tls="serving-cert"), None, {})
    assert refusal == ("spec.grpcTls.secretName: user 'alice' may not use Secret 'serving-cert': missing RBAC "
                       "permission 'get' on secrets/serving-cert in namespace 'ml'")
    assert AccessGate(POLICY, Table(GET_CERT)).ensemble(ALICE, NS, _ensemble(["c"], tls="serving-cert"), None, {}) == []
    table.asked.clear()
    assert gate.ensemble(ALICE, NS, _ensemble(["c"], tls="serving-cert"), _ensemble(["c"], tls="serving-cert"), {}) == []
    assert table.asked == []  # scaled, say: the same Secret, no Model added
    assert gate.ensemble(ALICE, NS, _ensemble(["c"], tls="serving-cert"), _ensemble(["c"]), {})  # TLS turned on
    assert gate.ensemble(ALICE, NS, _ensemble(["c"], tls="serving-cert"), _ensemble(["c"], tls="old-cert"), {})
    assert gate.ensemble(ALICE, NS, _ensemble(["c", "d"], tls="serving-cert"), _ensemble(["c"], tls="serving-cert"), {})


def test_a_model_is_checked_for_the_tls_secret_of_the_ensembles_serving_it() -> None:
    hosts = [Host("pipe", _ensemble(["mine"], tls="serving-cert")), Host("plain", _ensemble(["mine"]))]
    refusals = AccessGate(POLICY, Table()).model(ALICE, NS, _model(), None, list, lambda: hosts)
    assert refusals == [
        "spec: this Model runs in the pods of Ensemble 'pipe', which carry Secret 'serving-cert' "
        "(spec.grpcTls.secretName); user 'alice' may not use Secret 'serving-cert': missing RBAC permission 'get' "
        "on secrets/serving-cert in namespace 'ml'"
    ]
    assert AccessGate(POLICY, Table(GET_CERT)).model(ALICE, NS, _model(), None, list, lambda: hosts) == []


def test_a_failed_review_refuses_and_says_why() -> None:
    gate = AccessGate(POLICY, lambda user, p: Decision(False, error="access review failed: HTTP 403"))
    (refusal,) = gate.model(ALICE, NS, _model(secret="creds"), None, list)
    assert refusal == (
        "spec.s3.secretRef.name: could not check that user 'alice' may use Secret 'creds': "
        "access review failed: HTTP 403"
    )


def test_user_info_from_an_admission_request() -> None:
    info = {"username": "alice", "uid": "u-1", "groups": ["team"], "extra": {"scopes": ["a"]}}
    assert UserInfo.from_admission(info) == ALICE


def test_settings_policy_defaults_to_the_default_image_repository() -> None:
    settings = Settings(default_runtime_image="registry.example/ml/runtime:2")
    policy = settings.runtime_policy()
    assert policy.allowed_images == ("registry.example/ml/runtime",)
    assert "--log-verbose" in policy.allowed_flags
    wider = Settings(allowed_runtime_images=["a.example/"], allowed_runtime_flags=["--x"]).runtime_policy()
    assert wider.allowed_images == ("a.example/",) and "--x" in wider.allowed_flags
