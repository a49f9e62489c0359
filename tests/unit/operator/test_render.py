"""Golden-manifest tests of the plan. Regenerate with ENSEMBLE_OPERATOR_UPDATE_GOLDEN=1 after a
deliberate change, then review the diff of tests/unit/operator/golden/."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from ensemble_contract.model_config import DATA_TYPES, model_config_message
from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.plan import ObjectKey, plan_ensemble
from ensemble_operator.render.common import (
    RESTART_HASH_ANNOTATION,
    NetworkPolicySettings,
    RuntimeDefaults,
    parse_bytes,
)
from ensemble_operator.render.control import control_token
from ensemble_operator.render.runtime_config import RepositoryConfig
from google.protobuf import text_format

GOLDEN = Path(__file__).parent / "golden"
OPERATOR_KEY = "test-operator-key"
POLICY = NetworkPolicySettings(
    enabled=True, operator_namespace="ops", operator_pod_labels={"app.kubernetes.io/name": "ensemble-operator"},
    extra_inference_peers=[{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}}],
)
# What the chart runs: control APIs behind the per-Ensemble token, and the NetworkPolicy on.
DEFAULTS = RuntimeDefaults(image="registry.example/ensemble-runtime:test", control_key=OPERATOR_KEY, network_policy=POLICY)
OPEN = dataclasses.replace(DEFAULTS, control_key="", network_policy=NetworkPolicySettings())


def _kinds(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in objs}


def _minimal(ensemble: Ensemble, models: dict[str, Model]) -> tuple[Ensemble, dict[str, Model]]:
    """No autoscaling, default resources, IRSA instead of a Secret, a directory source."""
    spec = ensemble.spec.model_copy(update={"autoscaling": None, "resources": None, "replicas": 1})
    irsa = {"serviceAccountName": "model-reader", "region": "eu-west-1"}
    changed = {
        name: m.model_copy(
            update={"spec": m.spec.model_copy(update={"s3": type(m.spec.s3).model_validate(irsa)})}
        )
        if m.spec.s3 is not None
        else m
        for name, m in models.items()
    }
    return ensemble.model_copy(update={"spec": spec}), changed


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings (repository.json, pbtxt) as literal blocks, so golden diffs are readable."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_LiteralDumper.add_representer(str, _str_presenter)


def _check_golden(name: str, objs: list[dict[str, Any]]) -> None:
    text = yaml.dump_all(objs, Dumper=_LiteralDumper, sort_keys=True, width=120)
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("ENSEMBLE_OPERATOR_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing; regenerate with ENSEMBLE_OPERATOR_UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{path.name} differs; review and regenerate with ENSEMBLE_OPERATOR_UPDATE_GOLDEN=1"
    )


def test_golden_full(ensemble: Ensemble, models: dict[str, Model]) -> None:
    plan = plan_ensemble(ensemble, models, DEFAULTS)
    assert plan.valid and plan.delete == []
    _check_golden("image-pipeline", plan.apply)


def test_golden_minimal(ensemble: Ensemble, models: dict[str, Model]) -> None:
    ens, mods = _minimal(ensemble, models)
    plan = plan_ensemble(ens, mods, OPEN)
    assert plan.valid
    assert plan.delete == [ObjectKey("autoscaling/v2", "HorizontalPodAutoscaler", "ml", "image-pipeline"),
                           ObjectKey("networking.k8s.io/v1", "NetworkPolicy", "ml", "image-pipeline-runtime")]
    _check_golden("image-pipeline-minimal", plan.apply)
    deployment = _kinds(plan.apply)["Deployment/image-pipeline"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "model-reader"
    container = pod["containers"][0]
    assert [e["name"] for e in container["env"]] == ["HOME", "ENSEMBLE_CPU_LIMIT"]
    assert container["env"][1]["valueFrom"] == {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1"}}
    assert container["args"][container["args"].index("--cpus") + 1] == "$(ENSEMBLE_CPU_LIMIT)"  # expanded by the kubelet
    assert deployment["spec"]["replicas"] == 1


def _age_flags(args: list[str]) -> list[str]:
    """The values --grpc-max-connection-age-secs is given in `args`, in either form."""
    flag = "--grpc-max-connection-age-secs"
    return [args[i + 1] if arg == flag else arg.split("=", 1)[1]
            for i, arg in enumerate(args) if arg == flag or arg.startswith(f"{flag}=")]


@pytest.mark.parametrize(
    ("extra_args", "default_age", "given"),
    [
        ([], 300, ["300"]),  # the operator's default (the chart's value)
        ([], 0, []),  # the operator's setting turned it off
        (["--grpc-max-connection-age-secs", "60"], 300, ["60"]),
        (["--grpc-max-connection-age-secs=0"], 300, ["0"]),  # the Ensemble turned it off
    ],
)
def test_grpc_connections_age_unless_the_ensemble_sets_it(
    ensemble: Ensemble, models: dict[str, Model], extra_args: list[str], default_age: int, given: list[str]
) -> None:
    """A gRPC client keeps its connection; with an age the runtime ends it with a GOAWAY, so that the client's next
    calls reach replicas added since. The Ensemble's own flag, in either form, wins and is passed once."""
    runtime = ensemble.spec.runtime.model_copy(update={"extra_args": extra_args})
    changed = ensemble.model_copy(update={"spec": ensemble.spec.model_copy(update={"runtime": runtime})})
    defaults = dataclasses.replace(DEFAULTS, grpc_max_connection_age_seconds=default_age)
    deployment = _kinds(plan_ensemble(changed, models, defaults).apply)["Deployment/image-pipeline"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert _age_flags(container["args"]) == given, container["args"]
    assert container["args"][len(container["args"]) - len(extra_args):] == extra_args  # the Ensemble's, last


def test_deployment_contract(ensemble: Ensemble, models: dict[str, Model]) -> None:
    objs = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)
    dep = objs["Deployment/image-pipeline"]
    assert "replicas" not in dep["spec"], "the HPA owns replicas when autoscaling is set"
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = c["args"]
    assert args[:2] == ["--repository-config", "/etc/ensemble/repository.json"]
    assert args[args.index("--memory-budget-bytes") + 1] == str(12 * 2**30)
    assert args[args.index("--memory-policy") + 1] == "drain-then-swap"
    assert args[args.index("--exit-timeout-secs") + 1] == "30"
    assert pod["terminationGracePeriodSeconds"] > 30
    assert {p["containerPort"] for p in c["ports"]} == {8000, 8001, 8002}
    assert c["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 1800
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert {"/var/cache/ensemble", "/tmp", "/etc/ensemble"} <= mounts
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    env = {e["name"]: e for e in c["env"]}
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "model-store-credentials"
    for obj in objs.values():
        (owner,) = obj["metadata"]["ownerReferences"]
        assert owner["uid"] == "uid-ensemble" and owner["controller"] is True
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "ensemble-operator"
    assert objs["Service/image-pipeline-pods"]["spec"]["clusterIP"] == "None"
    assert objs["HorizontalPodAutoscaler/image-pipeline"]["spec"]["maxReplicas"] == 6


def test_load_journal_outlives_a_container_restart(ensemble: Ensemble, models: dict[str, Model]) -> None:
    """The runtime's load journal is a file on an emptyDir (kept across container restarts, so a version that
    killed the runtime while loading is skipped after the restart instead of crash-looping the pod)."""
    pod = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)["Deployment/image-pipeline"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    args = container["args"]
    journal = args[args.index("--load-journal") + 1]
    mount = next(m for m in container["volumeMounts"] if journal.startswith(m["mountPath"].rstrip("/") + "/"))
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == mount["name"])
    assert "emptyDir" in volume and not mount.get("readOnly"), (mount, volume)


def test_control_token_is_in_a_secret_and_never_in_the_pod_spec(ensemble: Ensemble, models: dict[str, Model]) -> None:
    objs = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)
    token = control_token(OPERATOR_KEY, "ml", "image-pipeline")
    assert token != control_token(OPERATOR_KEY, "ml", "other") != control_token("another-key", "ml", "image-pipeline")
    secret = objs["Secret/image-pipeline-control"]
    assert secret["stringData"] == {"token": token}
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "uid-ensemble"
    assert list(objs).index("Secret/image-pipeline-control") < list(objs).index("Deployment/image-pipeline")
    deployment = objs["Deployment/image-pipeline"]
    assert token not in json.dumps(deployment) and OPERATOR_KEY not in json.dumps(deployment)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["ENSEMBLE_CONTROL_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "image-pipeline-control", "key": "token", "optional": False}
    restricted = "model-repository,shared-memory,trace,logging:x-ensemble-control=$(ENSEMBLE_CONTROL_TOKEN)"
    assert f"--http-restricted-api={restricted}" in container["args"]
    assert f"--grpc-restricted-protocol={restricted}" in container["args"]
    # without an operator key the pods stay as before: no Secret, no restriction
    open_objs = _kinds(plan_ensemble(ensemble, models, OPEN).apply)
    assert "Secret/image-pipeline-control" not in open_objs
    assert not any("restricted" in a for a in open_objs["Deployment/image-pipeline"]["spec"]["template"]["spec"][
        "containers"][0]["args"])


def test_rendered_restriction_parses_in_the_runtime(ensemble: Ensemble, models: dict[str, Model]) -> None:
    """What Kubernetes hands the runtime once it has expanded $(ENSEMBLE_CONTROL_TOKEN) and $(ENSEMBLE_CPU_LIMIT)."""
    from ensemble_runtime.restrictions import Category
    from ensemble_runtime.settings import parse_settings

    (container,) = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)["Deployment/image-pipeline"][
        "spec"]["template"]["spec"]["containers"]
    token = control_token(OPERATOR_KEY, "ml", "image-pipeline")
    expanded = [a.replace("$(ENSEMBLE_CONTROL_TOKEN)", token).replace("$(ENSEMBLE_CPU_LIMIT)", "3")
                for a in container["args"]]
    settings = parse_settings(expanded)
    assert settings.cpus == 3
    for restrictions, header in ((settings.http_restrictions(), "x-ensemble-control"),
                                 (settings.grpc_restrictions(), "triton-grpc-protocol-x-ensemble-control")):
        restriction = restrictions.get(Category.MODEL_REPOSITORY)
        assert restriction is not None and restriction.header == header and restriction.allows(token)
        assert restrictions.get(Category.INFERENCE) is None and restrictions.get(Category.STATISTICS) is None


@pytest.mark.parametrize("mutual", [False, True])
def test_grpc_tls_mounts_its_secrets_keys_where_the_runtimes_flags_read_them(
        ensemble: Ensemble, models: dict[str, Model], mutual: bool) -> None:
    from ensemble_runtime.settings import RuntimeSettings, build_parser

    wire = {**ensemble.spec.to_wire(), "grpcTls": {"secretName": "serving-cert", "mutual": mutual}}
    tls = ensemble.model_copy(update={"spec": type(ensemble.spec).model_validate(wire)})
    pod = _kinds(plan_ensemble(tls, models, DEFAULTS).apply)["Deployment/image-pipeline"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = [a.replace("$(ENSEMBLE_CONTROL_TOKEN)", "t").replace("$(ENSEMBLE_CPU_LIMIT)", "1") for a in container["args"]]
    settings = RuntimeSettings(**vars(build_parser().parse_args(args)))  # the runtime's flags, files not read
    assert (settings.grpc_use_ssl, settings.grpc_use_ssl_mutual) == (not mutual, mutual)
    files = {"tls.crt": settings.grpc_server_cert, "tls.key": settings.grpc_server_key,
             **({"ca.crt": settings.grpc_root_cert} if mutual else {})}
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == "serving-cert"
    assert volume["secret"]["defaultMode"] == 0o440  # the pod's group (fsGroup) reads them, no one else
    assert [item["key"] for item in volume["secret"]["items"]] == list(files)
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["readOnly"] is True
    for key, path in files.items():
        item = next(i for i in volume["secret"]["items"] if i["key"] == key)
        assert str(path) == f"{mount['mountPath']}/{item['path']}"
    assert settings.grpc_root_cert is None or mutual
    # the probes stay plaintext HTTP
    assert all("httpGet" in container[p] for p in ("startupProbe", "readinessProbe", "livenessProbe"))


def test_network_policy_shape(ensemble: Ensemble, models: dict[str, Model]) -> None:
    policy = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)["NetworkPolicy/image-pipeline-runtime"]
    spec = policy["spec"]
    assert spec["podSelector"]["matchLabels"]["serving.ensemble.dev/ensemble"] == "image-pipeline"
    assert spec["policyTypes"] == ["Ingress"]
    serving, metrics = spec["ingress"]
    assert [p["port"] for p in serving["ports"]] == [8000, 8001]
    assert serving["from"] == [
        {"podSelector": {}},  # the Ensemble's namespace
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
         "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ensemble-operator"}}},
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway"}}},
    ]
    assert metrics == {"ports": [{"port": 8002, "protocol": "TCP"}]}


def test_repository_json_matches_schema(ensemble: Ensemble, models: dict[str, Model]) -> None:
    cm = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)["ConfigMap/image-pipeline-repository"]
    doc = json.loads(cm["data"]["repository.json"])
    config = RepositoryConfig.model_validate(doc)
    _check_golden("image-pipeline.repository", [doc])
    assert [m.name for m in config.models] == ["classifier", "postprocess", "preprocess"]
    assert config.s3 is not None and config.s3.endpoint_url == "http://minio.storage.svc:9000"
    (ens,) = config.ensembles
    ensemble_config = _parsed(ens.config_pbtxt)
    assert ensemble_config.platform == "ensemble"
    steps = ensemble_config.ensemble_scheduling.step
    assert [s.model_name for s in steps] == ["preprocess", "classifier", "postprocess"]
    assert dict(steps[1].input_map) == {"input": "pixels"}
    classifier = _parsed(config.models[0].config_pbtxt or "")
    assert classifier.version_policy.WhichOneof("policy_choice") == "latest"
    assert classifier.version_policy.latest.num_versions == 2
    assert [t.data_type for t in classifier.input] == [DATA_TYPES.index("TYPE_FP32")]
    assert list(classifier.dynamic_batching.preferred_batch_size) == [4, 8]
    assert classifier.dynamic_batching.max_queue_delay_microseconds == 500


def _parsed(text: str) -> Any:
    """config.pbtxt text read back into the ModelConfig message it was written from."""
    return text_format.Parse(text, model_config_message({}))


def _restart_hash(ensemble: Ensemble, models: dict[str, Model]) -> str:
    dep = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)["Deployment/image-pipeline"]
    return str(dep["spec"]["template"]["metadata"]["annotations"][RESTART_HASH_ANNOTATION])


def _config(ensemble: Ensemble, models: dict[str, Model]) -> str:
    cm = _kinds(plan_ensemble(ensemble, models, DEFAULTS).apply)["ConfigMap/image-pipeline-repository"]
    return str(cm["data"]["repository.json"])


def test_model_changes_do_not_roll_pods(ensemble: Ensemble, models: dict[str, Model]) -> None:
    before_hash, before_cfg = _restart_hash(ensemble, models), _config(ensemble, models)
    cls = models["classifier"]
    pinned = cls.spec.model_copy(
        update={
            "version_policy": type(cls.spec.version_policy).model_validate({"specific": {"versions": [3]}})
        }
    )
    changed = {**models, "classifier": cls.model_copy(update={"spec": pinned})}
    assert _config(ensemble, changed) != before_cfg
    assert _restart_hash(ensemble, changed) == before_hash
    step_pinned = ensemble.spec.model_copy(
        update={
            "steps": [
                s.model_copy(update={"model_version": 3}) if s.name == "classify" else s
                for s in ensemble.spec.steps
            ]
        }
    )
    assert _restart_hash(ensemble.model_copy(update={"spec": step_pinned}), models) == before_hash


@pytest.mark.parametrize(
    "change",
    [
        {"runtime": {"image": "registry.example/ensemble-runtime:other"}},
        {"resources": {"limits": {"nvidia.com/gpu": 2}}},
        {"scheduling": {"nodeSelector": {"pool": "a100"}}},
        {"runtime": {"pollIntervalSeconds": 60}},
        {"grpcTls": {"secretName": "serving-cert"}},
    ],
)
def test_workload_changes_roll_pods(
    ensemble: Ensemble, models: dict[str, Model], change: dict[str, Any]
) -> None:
    wire = ensemble.spec.to_wire()
    for key, value in change.items():
        wire[key] = {**wire.get(key, {}), **value}
    changed = ensemble.model_copy(update={"spec": type(ensemble.spec).model_validate(wire)})
    assert _restart_hash(changed, models) != _restart_hash(ensemble, models)


def test_invalid_ensemble_plans_no_writes(ensemble: Ensemble, models: dict[str, Model]) -> None:
    plan = plan_ensemble(ensemble, {k: m for k, m in models.items() if k != "classifier"}, DEFAULTS)
    assert not plan.valid and plan.apply == [] and plan.delete == []


@pytest.mark.parametrize(
    ("q", "n"), [("12Gi", 12 * 2**30), ("500M", 500 * 10**6), (1024, 1024), ("1.5Ki", 1536)]
)
def test_parse_bytes(q: int | str, n: int) -> None:
    assert parse_bytes(q) == n


def test_parse_bytes_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        parse_bytes("12 gigs")
