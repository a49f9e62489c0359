"""The chart installed by Helm and the operator running with its ServiceAccount against a real control
plane: objects, status, rollouts, no-op reconciles, deletion, scheduling failures."""

from __future__ import annotations

import base64
import copy
import json
import time
from typing import Any

import pytest
import yaml
from ensemble_contract.model_config import model_config_message
from google.protobuf import text_format

from tests.infra.controlplane import GPU_NODE, ControlPlane

from .support import (
    CHART,
    FULLNAME,
    GROUP_PATH,
    JSON,
    RELEASE,
    RELEASE_NAMESPACE,
    AuditLog,
    OperatorProcess,
    Release,
    apply,
    condition,
    cpu_ensemble,
    describe,
    epoch,
    example_models,
    get,
    gpu_ensemble,
    namespace_with,
    phase_is,
    wait_ensemble,
    wait_for,
)

pytestmark = pytest.mark.controlplane


def _specific_versions(config_pbtxt: str) -> list[int] | None:
    """The versions a rendered config.pbtxt pins (`version_policy.specific`); None under another policy."""
    config: Any = text_format.Parse(config_pbtxt, model_config_message({}))  # a message of the subset's own pool
    policy = config.version_policy
    return list(policy.specific.versions) if policy.WhichOneof("policy_choice") == "specific" else None


def _owned_by(obj: JSON, owner: JSON) -> bool:
    refs = obj["metadata"].get("ownerReferences", [])
    return any(r["uid"] == owner["metadata"]["uid"] and r["kind"] == "Ensemble" and r.get("controller") for r in refs)


def _children(ns: str, name: str) -> dict[str, str]:
    return {
        "ConfigMap": f"/api/v1/namespaces/{ns}/configmaps/{name}-repository",
        "Service": f"/api/v1/namespaces/{ns}/services/{name}",
        "headless Service": f"/api/v1/namespaces/{ns}/services/{name}-pods",
        "Deployment": f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
        "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
        "control Secret": f"/api/v1/namespaces/{ns}/secrets/{name}-control",  # written with create/patch only
    }


def _pods(cp: ControlPlane, ns: str, name: str) -> list[JSON]:
    items: list[JSON] = cp.api(
        "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=serving.ensemble.dev/ensemble%3D{name}"
    )["items"]
    return items


def _ready(pod: JSON) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _deploy(cp: ControlPlane, ns: str, name: str) -> JSON:
    return cp.api("GET", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")


# ---------------------------------------------------------------- 1. the chart


def test_chart_lints_renders_and_installs(audited_control_plane: ControlPlane, release: Release) -> None:
    cp = audited_control_plane
    for extra in ([], ["--set", "webhook.url=https://127.0.0.1:9443"], ["--set", "watchNamespaces={a,b}"]):
        cp.helm("lint", "--strict", str(CHART), *extra)
        docs = [d for d in yaml.safe_load_all(cp.helm("template", "t", str(CHART), "-n", "ops", *extra).stdout) if d]
        (vwc,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
        configs = [w["clientConfig"] for w in vwc["webhooks"]]
        assert all(c["caBundle"] for c in configs)
        if extra and "webhook.url" in extra[1]:
            assert [c["url"] for c in configs] == [
                "https://127.0.0.1:9443/validate-ensemble",
                "https://127.0.0.1:9443/validate-model",
            ]
            assert "Service" not in [d["kind"] for d in docs]
        else:
            assert all(c["service"]["path"].startswith("/validate-") for c in configs)

    status = json.loads(cp.helm("status", RELEASE, "-n", RELEASE_NAMESPACE, "-o", "json").stdout)
    assert status["info"]["status"] == "deployed"
    for crd in ("ensembles.serving.ensemble.dev", "models.serving.ensemble.dev", "clusterkopfpeerings.kopf.dev"):
        got = cp.api("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
        assert any(c["type"] == "Established" and c["status"] == "True" for c in got["status"]["conditions"])
    vwc = cp.api("GET", f"/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/{FULLNAME}")
    assert vwc["webhooks"][0]["clientConfig"]["url"] == f"https://127.0.0.1:{release.webhook_port}/validate-ensemble"

    # The operator's RBAC is the chart's: what it needs, nothing more.
    def can(*args: str) -> bool:
        proc = cp.kubectl("auth", "can-i", *args, check=False, kubeconfig=release.kubeconfig)
        return proc.stdout.strip() == "yes"

    assert can("patch", "deployments.apps", "-n", "anywhere")
    assert can("patch", "ensembles.serving.ensemble.dev/status", "-n", "anywhere")
    assert can("patch", "clusterkopfpeerings.kopf.dev")
    assert not can("get", "secrets", "-n", "anywhere")
    assert not can("delete", "deployments.apps", "-n", "anywhere")


# ---------------------------------------------------------------- 2. objects and status


def test_ensemble_gets_its_objects_and_status(audited_control_plane: ControlPlane, operator: OperatorProcess) -> None:
    cp = audited_control_plane
    name = "image-pipeline"
    ns = namespace_with(cp, "objects", gpu_ensemble(name))
    ens = wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)

    children: dict[str, JSON] = {}
    for kind, path in _children(ns, name).items():
        obj = get(cp, path)
        assert obj is not None, f"{kind} missing"
        assert _owned_by(obj, ens), f"{kind} has no controller ownerReference to the Ensemble"
        children[kind] = obj
    repository = json.loads(children["ConfigMap"]["data"]["repository.json"])
    assert "classifier" in json.dumps(repository)
    assert children["Service"]["spec"]["type"] == "ClusterIP"
    assert children["Service"]["spec"]["clusterIP"] not in ("", "None")
    assert children["headless Service"]["spec"]["clusterIP"] == "None"

    deployment = children["Deployment"]
    assert deployment is not None
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod_spec = deployment["spec"]["template"]["spec"]
    (container,) = pod_spec["containers"]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "http"
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod_spec["securityContext"]["runAsUser"] == 1000
    token = base64.b64decode(children["control Secret"]["data"]["token"]).decode()
    assert len(token) == 64 and token not in json.dumps(deployment)
    assert any(a.startswith("--http-restricted-api=model-repository") for a in container["args"])
    (pod,) = _pods(cp, ns, name)
    assert pod["spec"]["nodeName"] == GPU_NODE.name

    status = ens["status"]
    assert status["observedGeneration"] == ens["metadata"]["generation"]
    assert status["endpoint"] == f"{name}.{ns}.svc:8001"
    assert status["replicas"] == 1 and status["readyReplicas"] == 1
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True",
        "Progressing": "False",
        "Degraded": "False",
    }
    model_path = f"{GROUP_PATH}/namespaces/{ns}/models/classifier"
    wait_for(  # the Model's status timer notices its new user
        lambda: name in ((condition(get(cp, model_path), "Accepted") or {}).get("message") or ""),
        "the Model's Accepted condition to name the Ensemble using it",
        timeout=30,
    )

    table = cp.kubectl("get", "ensembles", "-n", ns).stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "READY", "REPLICAS", "SERVED", "AGE"]
    assert table[1].split()[:4] == [name, "Ready", "1", "1"]
    wide = cp.kubectl("get", "ens", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "PHASE", "READY", "REPLICAS", "SERVED", "ENDPOINT", "AGE"]
    assert f"{name}.{ns}.svc:8001" in wide[1]


# ---------------------------------------------------------------- 4. Model change vs image change


def test_model_change_updates_the_config_map_not_the_pods(
    audited_control_plane: ControlPlane, operator: OperatorProcess
) -> None:
    cp = audited_control_plane
    name = "pipeline"
    ns = namespace_with(cp, "modelchange", cpu_ensemble(name))
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)
    before = _deploy(cp, ns, name)
    config_path = _children(ns, name)["ConfigMap"]
    config_before = cp.api("GET", config_path)["data"]["repository.json"]

    (classifier,) = [copy.deepcopy(m) for m in example_models() if m["metadata"]["name"] == "classifier"]
    classifier["spec"]["versionPolicy"] = {"specific": {"versions": [1, 2]}}
    apply(cp, ns, classifier)
    config_after = wait_for(
        lambda: (text := cp.api("GET", config_path)["data"]["repository.json"]) != config_before and text,
        "repository.json to follow the Model's version policy",
    )
    (entry,) = [m for m in json.loads(config_after)["models"] if m["name"] == "classifier"]
    assert _specific_versions(entry["config_pbtxt"]) == [1, 2]
    after = _deploy(cp, ns, name)
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert after["spec"]["template"] == before["spec"]["template"]


def test_models_changed_together_reach_the_pods_in_one_config_write(
    audited_control_plane: ControlPlane, operator: OperatorProcess, audit_log: AuditLog
) -> None:
    """Two Models' version policies changed 0.5 s apart (one user's batch, within the operator's 1 s settle):
    the ConfigMap is written once, with both. Written after the first alone, a pod that synced in between
    would run one step on its new policy and the other on its old one, a version set nobody asked for."""
    cp = audited_control_plane
    name = "together"
    ns = namespace_with(cp, "together", cpu_ensemble(name))
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)
    config_path = _children(ns, name)["ConfigMap"]
    names = ("classifier", "postprocess")
    pinned = [1]

    def entries() -> dict[str, str]:
        document = json.loads(cp.api("GET", config_path)["data"]["repository.json"])
        return {m["name"]: m["config_pbtxt"] for m in document["models"]}

    assert not any(_specific_versions(text) == pinned for text in entries().values())

    def quiet() -> int | None:
        """The audit log's length once the operator has written nothing here for 3 s (the Models' own create
        handlers wait the settle time too; their writes must not fall into the window measured below)."""
        mark = audit_log.mark()
        writes = audit_log.since(0, ns, writes=True)
        return mark if writes and time.time() - epoch(writes[-1]["stageTimestamp"]) > 3 else None

    mark = wait_for(quiet, "the operator's writes to settle", timeout=60)
    for model in names:  # updates straight to the API (a kubectl process may take longer than the gap here)
        path = f"{GROUP_PATH}/namespaces/{ns}/models/{model}"
        body = cp.api("GET", path)
        body["spec"]["versionPolicy"] = {"specific": {"versions": [1]}}
        cp.api("PUT", path, body)
        time.sleep(0.5)
    wait_for(lambda: all(_specific_versions(entries()[m]) == pinned for m in names) or None, "both pins written")
    time.sleep(2.0)  # the second Model's handler, had it written again, has by now
    writes = [e for e in audit_log.since(mark, ns, writes=True) if e.get("objectRef", {}).get("resource") == "configmaps"]
    assert len(writes) == 1, [describe(e) for e in writes]


def test_image_change_rolls_pods_without_losing_capacity(
    audited_control_plane: ControlPlane, operator: OperatorProcess
) -> None:
    cp = audited_control_plane
    name = "rolling"
    ns = namespace_with(cp, "rollout", cpu_ensemble(name, replicas=2, image="registry.invalid/runtime:1"))
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)
    old_pods = {p["metadata"]["name"] for p in _pods(cp, ns, name)}
    assert len(old_pods) == 2

    apply(cp, ns, cpu_ensemble(name, replicas=2, image="registry.invalid/runtime:2"))
    min_ready = 2
    deadline = time.monotonic() + 90
    while True:  # sample the rollout: with maxUnavailable 0, two pods are ready throughout
        pods = _pods(cp, ns, name)
        ready = [p for p in pods if _ready(p) and not p["metadata"].get("deletionTimestamp")]
        min_ready = min(min_ready, len(ready))
        deployment = _deploy(cp, ns, name)
        st = deployment["status"]
        images = {p["spec"]["containers"][0]["image"] for p in ready}
        if (
            st.get("observedGeneration") == deployment["metadata"]["generation"]
            and st.get("updatedReplicas") == st.get("replicas") == st.get("readyReplicas") == 2
            and images == {"registry.invalid/runtime:2"}
            and len(pods) == 2
        ):
            break
        assert time.monotonic() < deadline, f"rollout did not complete: {json.dumps(st)}"
        time.sleep(0.1)  # sampling interval of a bounded poll, not synchronisation
    assert min_ready >= 2
    assert not old_pods & {p["metadata"]["name"] for p in _pods(cp, ns, name)}
    sets = cp.api("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]
    assert len(sets) == 2
    assert sorted(int(s["spec"].get("replicas", 0)) for s in sets) == [0, 2]
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready after the rollout", timeout=60)


# ---------------------------------------------------------------- 5. no-op reconciles write nothing


def test_reconciling_an_unchanged_ensemble_writes_nothing(
    audited_control_plane: ControlPlane, operator: OperatorProcess, audit_log: AuditLog
) -> None:
    cp = audited_control_plane
    name = "quiet"
    ns = namespace_with(cp, "noop", cpu_ensemble(name, replicas=1))
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)

    def quiet() -> int | None:
        """The audit log's length once the operator's last write here is 3 timer periods (6 s) old."""
        mark = audit_log.mark()
        writes = audit_log.since(0, ns, writes=True)
        return mark if writes and time.time() - epoch(writes[-1]["stageTimestamp"]) > 6 else None

    mark = wait_for(quiet, "the operator's writes to settle", timeout=60)
    # Every full reconcile (the resync, every 2 s here) GETs the Deployment: wait for five more of them; the
    # pod reports (every 2 s) and pod events in between read nothing.
    wait_for(lambda: len(audit_log.deployment_reads(mark, ns)) >= 5, "five more full reconciles", timeout=60)
    writes = audit_log.since(mark, ns, writes=True)
    assert not writes, "no-op reconciles wrote:\n" + "\n".join(describe(e) for e in writes)


# ---------------------------------------------------------------- 6. deletion


def test_deleting_the_ensemble_removes_everything_and_models_in_use_are_held(
    audited_control_plane: ControlPlane, operator: OperatorProcess
) -> None:
    cp = audited_control_plane
    name = "doomed"
    ns = namespace_with(cp, "delete", cpu_ensemble(name, replicas=1))
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)

    cp.kubectl("delete", "model", "classifier", "-n", ns, "--wait=false")
    model_path = f"{GROUP_PATH}/namespaces/{ns}/models/classifier"

    def refusal() -> str | None:
        events = cp.api("GET", f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3Dclassifier")
        return next((e["message"] for e in events["items"] if "is used by Ensemble" in e["message"]), None)

    message = wait_for(
        refusal,
        "an Event explaining why the Model stays",
        timeout=30,
        detail=lambda: "\n".join(
            f"{e['involvedObject']['name']}: {e['type']} {e['reason']}: {e['message']}"
            for e in cp.api("GET", f"/api/v1/namespaces/{ns}/events")["items"]
        ),
    )
    assert name in message
    held = get(cp, model_path)
    assert held is not None and held["metadata"].get("deletionTimestamp")
    blocked = condition(held, "DeletionBlocked")
    assert blocked is not None and blocked["status"] == "True" and blocked["reason"] == "InUse"
    assert f"used by Ensemble(s) {name}" in blocked["message"]

    cp.kubectl("delete", "ensemble", name, "-n", ns, "--wait=false")
    paths = {**_children(ns, name), "Ensemble": f"{GROUP_PATH}/namespaces/{ns}/ensembles/{name}"}
    wait_for(
        lambda: (
            all(get(cp, p) is None for p in paths.values())
            and not _pods(cp, ns, name)
            and not cp.api("GET", f"/apis/apps/v1/namespaces/{ns}/replicasets")["items"]
        ),
        "the garbage collector to remove the Ensemble's objects",
        timeout=60,
        detail=lambda: str({k: get(cp, p) is not None for k, p in paths.items()}),
    )
    # No longer in use: the operator's retry lets the Model go.
    wait_for(lambda: get(cp, model_path) is None, "the Model's deletion to complete", timeout=40)


# ---------------------------------------------------------------- 8. status explains scheduling failures


def test_status_explains_unschedulable_pods(audited_control_plane: ControlPlane, operator: OperatorProcess) -> None:
    cp = audited_control_plane
    name = "greedy"
    greedy = gpu_ensemble(name)
    greedy["spec"]["resources"] = {"requests": {"nvidia.com/gpu": 2}, "limits": {"nvidia.com/gpu": 2}}
    ns = namespace_with(cp, "unsched", greedy)
    ens = wait_ensemble(cp, ns, name, phase_is("Degraded"), "phase Degraded", timeout=60)
    degraded = condition(ens, "Degraded")
    assert degraded is not None and degraded["status"] == "True"
    assert degraded["reason"] == "PodsUnschedulable"
    assert "Unschedulable" in degraded["message"]
    assert "Insufficient nvidia.com/gpu" in degraded["message"]
