"""Reconcile against an in-memory API: unchanged objects write nothing, Model changes touch only config."""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping
from typing import Any

import pytest
from ensemble_contract.status import StorageStatus
from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.found import FoundVersions
from ensemble_operator.kube import KubeClient, object_path
from ensemble_operator.reconcile import Reconciler
from ensemble_operator.render.common import CONFIG_HASH_ANNOTATION, CONFIG_REFRESH_ANNOTATION, RuntimeDefaults
from ensemble_operator.render.control import control_token
from ensemble_operator.status import versions_found

from tests.unit.operator.fake_api import FakeApi, observe, reconcile

NS = "ml"


# What each pod's storage listing shows: the two pods saw different versions of classifier (one listed
# while version 3 was being uploaded); "image-pipeline" is the ensemble, not a Model.
FOUND = {
    "10.0.0.0": {"classifier": [1, 2], "preprocess": [1], "postprocess": [1], "image-pipeline": []},
    "10.0.0.1": {"classifier": [2, 3], "preprocess": [1], "image-pipeline": []},
}


def _served(url: str, timeout: float, headers: Mapping[str, str] | None = None) -> Any:
    if url.endswith("/v2/repository/status"):
        return StorageStatus(reachable=True, models=FOUND[url.split("//")[1].split(":")[0]]).model_dump(mode="json")
    assert url.endswith("/v2/ensembles/image-pipeline/versions")
    return {"ensemble": "image-pipeline", "versions": {"classifier": 2, "preprocess": 1, "postprocess": 1}}


def _index(url: str, body: bytes, timeout: float, headers: Mapping[str, str] | None = None) -> Any:
    assert url.endswith("/v2/repository/index")
    return [{"name": "classifier", "version": "2", "state": "READY"}]


@pytest.fixture
def world(ensemble: Ensemble, models: dict[str, Model]) -> tuple[FakeApi, Reconciler]:
    api = FakeApi()
    for m in models.values():
        api.put(
            object_path(m.api_version, "Model", NS, m.metadata.name), m.model_dump(mode="json", by_alias=True)
        )
    api.put(object_path(ensemble.api_version, "Ensemble", NS, "image-pipeline"), ensemble.to_wire())
    kube = KubeClient(api, http_get=_served, http_post=_index)
    return api, Reconciler(kube=kube, defaults=RuntimeDefaults(), clock=lambda: "2026-01-01T00:00:00Z")


def _ensemble_body(api: FakeApi) -> dict[str, Any]:
    return api.objects[object_path("serving.ensemble.dev/v1alpha1", "Ensemble", NS, "image-pipeline")]


def _mark_deployment_ready(api: FakeApi) -> None:
    path = object_path("apps/v1", "Deployment", NS, "image-pipeline")
    dep = api.objects[path]
    dep["metadata"]["generation"] = 1
    dep["status"] = {"observedGeneration": 1, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}
    dep["spec"]["replicas"] = 2
    for i in range(2):
        api.put(
            object_path("v1", "Pod", NS, f"image-pipeline-{i}"),
            {
                "metadata": {"name": f"image-pipeline-{i}", "labels": dep["spec"]["selector"]["matchLabels"]},
                "status": {"podIP": f"10.0.0.{i}", "conditions": [{"type": "Ready", "status": "True"}]},
            },
        )


def test_second_reconcile_writes_nothing(world: tuple[FakeApi, Reconciler]) -> None:
    api, rec = world
    assert reconcile(rec, api, _ensemble_body(api)) == "Progressing"
    first = rec.kube.stats.writes
    assert rec.kube.stats.applies == 6  # ConfigMap, 2 Services, Deployment, PDB, HPA
    _mark_deployment_ready(api)
    assert reconcile(rec, api, _ensemble_body(api)) == "Ready"
    status = _ensemble_body(api)["status"]
    assert status["servedVersions"] == {"classifier": 2, "preprocess": 1, "postprocess": 1}
    assert status["endpoint"] == "image-pipeline.ml.svc:8001"
    settled, seen = rec.kube.stats.writes, len(api.requests)
    assert settled > first
    reconcile(rec, api, _ensemble_body(api))
    reconcile(rec, api, _ensemble_body(api))
    assert rec.kube.stats.writes == settled, "an unchanged reconcile must write nothing"
    assert [m for m, _ in api.requests[seen:]] == ["GET"] * (len(api.requests) - seen)


def test_restricted_pods_get_their_token_and_secrets_are_never_read(world: tuple[FakeApi, Reconciler]) -> None:
    """With an operator key: a Secret per Ensemble written without reading Secrets back, the header on every
    call to the pods, and still nothing written by an unchanged reconcile."""
    api, _ = world
    sent: list[tuple[str, Mapping[str, str]]] = []

    def served(url: str, timeout: float, headers: Mapping[str, str]) -> Any:
        sent.append((url, headers))
        return _served(url, timeout)

    def index(url: str, body: bytes, timeout: float, headers: Mapping[str, str]) -> Any:
        sent.append((url, headers))
        return _index(url, body, timeout)

    key = "operator-key"
    rec = Reconciler(kube=KubeClient(api, http_get=served, http_post=index, control_key=key),
                     defaults=RuntimeDefaults(control_key=key), clock=lambda: "2026-01-01T00:00:00Z")
    reconcile(rec, api, _ensemble_body(api))
    secret = api.objects[object_path("v1", "Secret", NS, "image-pipeline-control")]
    token = control_token(key, NS, "image-pipeline")
    assert secret["stringData"] == {"token": token}
    _mark_deployment_ready(api)
    assert reconcile(rec, api, _ensemble_body(api)) == "Ready"
    assert len(sent) == 6 and all(headers == {"x-ensemble-control": token} for _, headers in sent), sent
    settled = rec.kube.stats.writes
    reconcile(rec, api, _ensemble_body(api))
    assert rec.kube.stats.writes == settled, "an unchanged reconcile must write nothing"
    assert not [p for m, p in api.requests if m == "GET" and "/secrets" in p], "the operator read a Secret"


def _model_status(api: FakeApi, name: str) -> dict[str, Any]:
    model = api.objects[object_path("serving.ensemble.dev/v1alpha1", "Model", NS, name)]
    status: dict[str, Any] = model.get("status", {})
    return status


def _model_pass(api: FakeApi, rec: Reconciler, found: FoundVersions) -> int:
    """What the Model workers do after an Ensemble reconcile recorded its pods' findings: write each Model's
    status (one writer). Returns the number of Models written."""
    written = 0
    for name in ("classifier", "preprocess", "postprocess"):
        body = api.objects[object_path("serving.ensemble.dev/v1alpha1", "Model", NS, name)]
        written += rec.model_status(body, ["image-pipeline"], found.union(NS, name)) is not None
    return written


def test_versions_found_recorded_once_then_pinned_versions_checked(world: tuple[FakeApi, Reconciler]) -> None:
    api, rec = world
    found = FoundVersions()
    outcome = rec.ensemble(_ensemble_body(api), observe(api, _ensemble_body(api)))
    assert found.record(NS, "image-pipeline", versions_found(outcome.pods, ["classifier"])) == []
    _model_pass(api, rec, found)
    assert _model_status(api, "classifier").get("versionsFound") is None  # no pod has reported yet
    _mark_deployment_ready(api)
    outcome = rec.ensemble(_ensemble_body(api), observe(api, _ensemble_body(api)))
    assert outcome.phase == "Ready"
    names = ["classifier", "preprocess", "postprocess"]
    assert found.record(NS, "image-pipeline", versions_found(outcome.pods, names)) == sorted(names)
    patches = rec.kube.stats.status_patches
    assert _model_pass(api, rec, found) == 3
    assert _model_status(api, "classifier")["versionsFound"] == [1, 2, 3]  # the union over ready pods
    assert _model_status(api, "preprocess")["versionsFound"] == [1]
    assert _model_status(api, "postprocess")["versionsFound"] == [1]
    assert rec.kube.stats.status_patches == patches + 3
    settled = rec.kube.stats.writes
    reconcile(rec, api, _ensemble_body(api))
    assert _model_pass(api, rec, found) == 0
    assert rec.kube.stats.writes == settled, "unchanged versions found must not be written again"
    classifier = api.objects[object_path("serving.ensemble.dev/v1alpha1", "Model", NS, "classifier")]
    rec.model_status(classifier, ["image-pipeline"])  # after a restart (nothing reported yet): kept as it is
    assert _model_status(api, "classifier")["versionsFound"] == [1, 2, 3]

    # a pinned version storage has not listed is reported, but does not block the rollout: the listing may
    # be stale (a new source, a poll not yet run) and the runtime itself refuses a version that is missing
    _ensemble_body(api)["spec"]["steps"][1]["modelVersion"] = 7
    assert reconcile(rec, api, _ensemble_body(api)) == "Degraded"  # not Invalid: the spec is applied
    degraded = {c["type"]: c for c in _ensemble_body(api)["status"]["conditions"]}["Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == "VersionNotFound"
    assert "pins version 7 of Model 'classifier'" in degraded["message"] and "[1, 2, 3]" in degraded["message"]
    _ensemble_body(api)["spec"]["steps"][1]["modelVersion"] = 3
    assert reconcile(rec, api, _ensemble_body(api)) == "Ready"
    degraded = {c["type"]: c for c in _ensemble_body(api)["status"]["conditions"]}["Degraded"]
    assert degraded["status"] == "False"


def test_model_change_rewrites_only_the_config_map(world: tuple[FakeApi, Reconciler]) -> None:
    api, rec = world
    reconcile(rec, api, _ensemble_body(api))
    _mark_deployment_ready(api)
    reconcile(rec, api, _ensemble_body(api))
    annotated = rec.kube.stats.pod_annotations
    old_hash = _pod_hashes(api)[0]
    assert old_hash is not None and _pod_hashes(api) == [old_hash, old_hash]
    dep_before = api.objects[object_path("apps/v1", "Deployment", NS, "image-pipeline")]["spec"]["template"]
    model_path = object_path("serving.ensemble.dev/v1alpha1", "Model", NS, "classifier")
    api.objects[model_path]["spec"]["versionPolicy"] = {"specific": {"versions": [1]}}
    applies = rec.kube.stats.applies
    rec.model_status(api.objects[model_path], ["image-pipeline"])  # the Model's worker
    reconcile(rec, api, _ensemble_body(api))  # the Ensemble's worker, marked by the Model's change
    assert rec.kube.stats.applies == applies + 1
    assert api.objects[model_path]["status"]["policy"] == "specific(1)"
    assert (
        api.objects[object_path("apps/v1", "Deployment", NS, "image-pipeline")]["spec"]["template"]
        == dep_before
    )
    config_map = api.objects[object_path("v1", "ConfigMap", NS, "image-pipeline-repository")]
    assert '"num_versions"' not in str(config_map)
    # every pod is marked with the new config's hash: a pod update makes the kubelet refresh the mount now
    new_hash = config_map["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    assert _pod_hashes(api) == [new_hash, new_hash]
    assert rec.kube.stats.pod_annotations == annotated + 2


def _pod_annotations(api: FakeApi, key: str) -> list[str | None]:
    """Annotation `key` of the two pods, in order."""
    return [
        api.objects[object_path("v1", "Pod", NS, f"image-pipeline-{i}")]["metadata"].get("annotations", {}).get(key)
        for i in range(2)
    ]


def _pod_hashes(api: FakeApi) -> list[str | None]:
    return _pod_annotations(api, CONFIG_HASH_ANNOTATION)


def test_invalid_ensemble_reports_and_keeps_serving(world: tuple[FakeApi, Reconciler]) -> None:
    api, rec = world
    reconcile(rec, api, _ensemble_body(api))
    del api.objects[object_path("serving.ensemble.dev/v1alpha1", "Model", NS, "classifier")]
    applies = rec.kube.stats.applies
    assert reconcile(rec, api, _ensemble_body(api)) == "Invalid"
    assert rec.kube.stats.applies == applies
    ready = {c["type"]: c for c in _ensemble_body(api)["status"]["conditions"]}["Ready"]
    assert ready["reason"] == "InvalidSpec" and "'classifier'" in ready["message"]
    assert rec.kube.stats.events >= 1


def test_removing_autoscaling_deletes_the_hpa(world: tuple[FakeApi, Reconciler]) -> None:
    api, rec = world
    reconcile(rec, api, _ensemble_body(api))
    hpa = object_path("autoscaling/v2", "HorizontalPodAutoscaler", NS, "image-pipeline")
    assert hpa in api.objects
    del _ensemble_body(api)["spec"]["autoscaling"]
    reconcile(rec, api, _ensemble_body(api))
    assert hpa not in api.objects and rec.kube.stats.deletes == 1


def test_model_in_use_is_reported(world: tuple[FakeApi, Reconciler]) -> None:
    _, rec = world
    assert [e["metadata"]["name"] for e in rec.ensembles_using(NS, "classifier")] == ["image-pipeline"]
    assert rec.ensembles_using(NS, "unused") == []


def test_admission_splits_errors_and_warnings(world: tuple[FakeApi, Reconciler], ensemble: Ensemble) -> None:
    _, rec = world
    spec = ensemble.spec.to_wire()
    assert rec.admission_issues(NS, spec) == ([], [])
    spec["steps"][1]["modelRef"]["name"] = "not-yet-created"
    errors, warnings = rec.admission_issues(NS, spec)
    assert warnings == [] and len(errors) == 1 and "'not-yet-created'" in errors[0]
    spec["steps"][1]["inputMap"] = {"input": "nowhere"}
    errors, _ = rec.admission_issues(NS, spec)
    assert any("'nowhere'" in e for e in errors)


def test_admission_reads_only_the_models_a_spec_names(
    world: tuple[FakeApi, Reconciler], ensemble: Ensemble, models: dict[str, Model]
) -> None:
    """A namespace of many Models: an Ensemble's admission GETs the Models its steps name, never LISTs them all
    (with a thousand Models each admission outlasted the webhook timeout); so does a Model's podmates check."""
    api, rec = world
    some = next(iter(models.values()))
    for i in range(40):
        body = some.model_dump(mode="json", by_alias=True)
        body["metadata"] = {**body["metadata"], "name": f"bystander-{i}"}
        api.put(object_path(some.api_version, "Model", NS, f"bystander-{i}"), body)
    spec = ensemble.spec.to_wire()
    seen = len(api.requests)
    assert rec.admission_issues(NS, spec) == ([], [])
    named = {s["modelRef"]["name"] for s in spec["steps"]}
    asked = api.requests[seen:]
    assert sorted(asked) == sorted(("GET", object_path(some.api_version, "Model", NS, n)) for n in named)

    seen = len(api.requests)
    mates = rec.podmates(NS, "classifier")
    assert {m.model for m in mates} == named - {"classifier"}
    model_reads = [p for m, p in api.requests[seen:] if "/models" in p]
    assert all(not p.endswith("/models") for p in model_reads), model_reads
    assert not any("bystander" in p for p in model_reads)


def test_pods_still_on_an_older_config_are_nudged_again(ensemble: Ensemble, models: dict[str, Model]) -> None:
    """Pods marked with the config's hash that keep reporting another repository.json digest (the kubelet
    refreshed from a stale cache) get a config-refresh annotation, at most once per interval."""
    api = FakeApi()
    for m in models.values():
        api.put(object_path(m.api_version, "Model", NS, m.metadata.name), m.model_dump(mode="json", by_alias=True))
    api.put(object_path(ensemble.api_version, "Ensemble", NS, "image-pipeline"), ensemble.to_wire())
    digests = {"10.0.0.0": "stale", "10.0.0.1": None}  # pod 1: a runtime that does not report one

    def served(url: str, timeout: float, headers: Mapping[str, str]) -> Any:
        doc = _served(url, timeout)
        ip = url.split("//")[1].split(":")[0]
        if url.endswith("/v2/repository/status"):
            doc["config_digest"] = digests[ip]
        return doc

    clock = ["2026-01-01T00:00:00Z"]
    rec = Reconciler(kube=KubeClient(api, http_get=served, http_post=_index), defaults=RuntimeDefaults(),
                     clock=lambda: clock[0])
    reconcile(rec, api, _ensemble_body(api))
    _mark_deployment_ready(api)
    reconcile(rec, api, _ensemble_body(api))  # marks both pods with the hash and the time
    assert _refresh_marks(api) == ["2026-01-01T00:00:00Z"] * 2
    writes = rec.kube.stats.writes
    clock[0] = "2026-01-01T00:00:10Z"
    reconcile(rec, api, _ensemble_body(api))  # pod 0 reports another file, but the runtime may not have polled yet
    assert rec.kube.stats.writes == writes, "nudged again within the interval"
    clock[0] = "2026-01-01T00:01:00Z"
    reconcile(rec, api, _ensemble_body(api))  # still another file a minute later: nudged again
    assert _refresh_marks(api) == ["2026-01-01T00:01:00Z", "2026-01-01T00:00:00Z"]
    cm = api.objects[object_path("v1", "ConfigMap", NS, "image-pipeline-repository")]
    digests["10.0.0.0"] = hashlib.sha256(cm["data"]["repository.json"].encode()).hexdigest()  # caught up
    clock[0] = "2026-01-01T00:05:00Z"
    writes = rec.kube.stats.writes
    reconcile(rec, api, _ensemble_body(api))
    assert rec.kube.stats.writes == writes


def _refresh_marks(api: FakeApi) -> list[str | None]:
    return _pod_annotations(api, CONFIG_REFRESH_ANNOTATION)


def test_a_version_that_killed_the_runtime_reaches_the_status_and_an_event(ensemble: Ensemble,
                                                                          models: dict[str, Model]) -> None:
    """The runtime's index marks a version its load journal skipped; the Degraded condition and a Warning
    event carry that reason (the pods stay ready: the previous version serves)."""
    died = "the runtime died while loading this version"  # the runtime's load_journal.DIED_LOADING

    def index(url: str, body: bytes, timeout: float, headers: Mapping[str, str]) -> Any:
        return [{"name": "classifier", "version": "2", "state": "READY", "reason": ""},
                {"name": "classifier", "version": "3", "state": "UNAVAILABLE", "reason": died}]

    api = FakeApi()
    for m in models.values():
        api.put(object_path(m.api_version, "Model", NS, m.metadata.name), m.model_dump(mode="json", by_alias=True))
    api.put(object_path(ensemble.api_version, "Ensemble", NS, "image-pipeline"), ensemble.to_wire())
    rec = Reconciler(kube=KubeClient(api, http_get=_served, http_post=index), defaults=RuntimeDefaults(),
                     clock=lambda: "2026-01-01T00:00:00Z")
    reconcile(rec, api, _ensemble_body(api))
    _mark_deployment_ready(api)
    assert reconcile(rec, api, _ensemble_body(api)) == "Degraded"
    degraded = {c["type"]: c for c in _ensemble_body(api)["status"]["conditions"]}["Degraded"]
    assert degraded["reason"] == "VersionLoadFailed"
    assert f"classifier 3: {died}" in degraded["message"], degraded
    events = [b for b in api.posted if isinstance(b, dict) and b.get("kind") == "Event"]
    assert events[-1]["type"] == "Warning" and f"classifier 3: {died}" in events[-1]["message"], events


def test_a_namespace_being_deleted_refuses_events_and_the_reconcile_still_writes_its_status(
    world: tuple[FakeApi, Reconciler],
) -> None:
    """`kubectl delete namespace` refuses every new object there, Events too (403); the phase event is dropped,
    the status is written all the same (the reconcile used to fail and retry until the namespace was gone)."""
    api, rec = world
    api.terminating.add(NS)
    assert reconcile(rec, api, _ensemble_body(api)) == "Progressing"
    assert _ensemble_body(api)["status"]["phase"] == "Progressing"
    assert rec.kube.stats.events == 0 and rec.kube.stats.events_dropped >= 1 and not api.posted


def test_a_blocked_model_deletion_in_a_namespace_being_deleted_says_why(world: tuple[FakeApi, Reconciler]) -> None:
    """The deletion handler turns the reason into kopf's TemporaryError (again in 5 s); a refused DeletionBlocked
    event used to raise instead, and kopf retried an unexpected error only after 60 s."""
    api, rec = world
    api.terminating.add(NS)
    path = object_path("serving.ensemble.dev/v1alpha1", "Model", NS, "classifier")
    blocked = rec.model_deletion_blocked(copy.deepcopy(api.objects[path]), ["image-pipeline"], [2])
    assert blocked is not None and "image-pipeline" in blocked
    conditions = {c["type"]: c for c in api.objects[path]["status"]["conditions"]}
    assert conditions["DeletionBlocked"]["status"] == "True"
    assert rec.kube.stats.events_dropped == 1 and not api.posted
