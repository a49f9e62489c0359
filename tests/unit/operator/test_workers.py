"""The event-driven parts against an in-memory API: one worker per Ensemble folds marks into reconciles,
status writes carry the resourceVersion and survive a conflict, pod probes run concurrently within a bound
and a budget, the indexes keep only what is ours, versions found are one union per Model."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.found import FoundVersions
from ensemble_operator.indexes import deployment_entry, ensemble_model_entries, observed, pod_entry, users
from ensemble_operator.kube import KubeClient, object_path
from ensemble_operator.reconcile import Reconciler
from ensemble_operator.render.common import ENSEMBLE_LABEL, RuntimeDefaults
from ensemble_operator.workers import Workers

from tests.unit.operator.fake_api import FakeApi

NS = "ml"
ENSEMBLE_PATH = object_path("serving.ensemble.dev/v1alpha1", "Ensemble", NS, "image-pipeline")


def _world(ensemble: Ensemble, models: dict[str, Model], **kube: Any) -> tuple[FakeApi, Reconciler]:
    api = FakeApi()
    for m in models.values():
        api.put(object_path(m.api_version, "Model", NS, m.metadata.name), m.model_dump(mode="json", by_alias=True))
    api.put(ENSEMBLE_PATH, ensemble.to_wire())
    client = KubeClient(api, http_get=lambda *a: {}, http_post=lambda *a: [], **kube)
    return api, Reconciler(kube=client, defaults=RuntimeDefaults(), clock=lambda: "2026-01-01T00:00:00Z")


def _model_index(api: FakeApi) -> dict[tuple[str, str], list[dict[str, Any]]]:
    prefix = f"/apis/serving.ensemble.dev/v1alpha1/namespaces/{NS}/models/"
    return {(NS, p[len(prefix):]): [o] for p, o in api.objects.items() if p.startswith(prefix)}


async def _until(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


@pytest.mark.asyncio
async def test_marks_during_a_reconcile_fold_into_one_more_and_never_overlap(
    ensemble: Ensemble, models: dict[str, Model]
) -> None:
    api, rec = _world(ensemble, models)
    fresh: list[bool] = []
    running = [0]
    overlapped = [False]
    gate = asyncio.Event()

    async def run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        overlapped[0] |= running[0] > 0
        running[0] += 1
        fresh.append(kwargs["fresh"])
        try:
            if len(fresh) == 1:
                await gate.wait()  # the first reconcile is still running while the marks arrive
            return fn(*args, **kwargs)
        finally:
            running[0] -= 1

    workers = Workers(rec, status_interval=3600.0, resync_interval=3600.0, debounce=0.0, run=run)
    stop: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    body = api.objects[ENSEMBLE_PATH]
    task = asyncio.create_task(workers.ensemble(body, stop, _model_index(api), {}, {}))
    await _until(lambda: len(fresh) == 1, "the first reconcile")
    for _ in range(5):
        workers.ensembles.mark((NS, "image-pipeline"))
    gate.set()
    await _until(lambda: len(fresh) == 2 and running[0] == 0, "one more reconcile for the five marks")
    workers.ensembles.mark((NS, "image-pipeline"))  # the worker is idle again: one mark, one reconcile
    await _until(lambda: len(fresh) == 3 and running[0] == 0, "a reconcile for the next mark")
    assert len(fresh) == 3, "five marks during one reconcile fold into one more"
    assert fresh == [True, False, False]  # the first after start reads the owned objects; the others trust memory
    assert not overlapped[0]
    stop.set_result(None)
    await asyncio.wait_for(task, 10)


def test_an_unchanged_reconcile_reads_nothing_but_a_fresh_one_reads_the_owned_objects(
    ensemble: Ensemble, models: dict[str, Model]
) -> None:
    api, rec = _world(ensemble, models)
    body = api.objects[ENSEMBLE_PATH]
    index = _model_index(api)
    rec.ensemble(body, observed(body, index, {}, {}), fresh=True)
    seen = len(api.requests)
    rec.ensemble(body, observed(body, index, {}, {}))
    assert api.requests[seen:] == [], "a reconcile from the watches' state that changes nothing sends nothing"
    rec.ensemble(body, observed(body, index, {}, {}), fresh=True)
    reads = [p for m, p in api.requests[seen:] if m == "GET"]
    assert any("/configmaps/" in p for p in reads) and any("/deployments/" in p for p in reads)
    assert [m for m, _ in api.requests[seen:]] == ["GET"] * len(api.requests[seen:])

    # a Model change: the config it renders differs from what was applied, so it is sent, without a read
    api.objects[object_path("serving.ensemble.dev/v1alpha1", "Model", NS, "classifier")]["spec"]["versionPolicy"] = {
        "specific": {"versions": [1]}
    }
    seen = len(api.requests)
    rec.ensemble(body, observed(body, _model_index(api), {}, {}))
    config = object_path("v1", "ConfigMap", NS, "image-pipeline-repository")
    assert [(m, p) for m, p in api.requests[seen:] if not p.endswith("/status")] == [("PATCH", config)]


def test_a_status_conflict_is_read_again_and_planned_again(ensemble: Ensemble, models: dict[str, Model]) -> None:
    """Someone else writes the Ensemble between our read and our status patch: the patch carries the version
    we read, the API server refuses it, and the reconcile reads again and writes from what is there now."""
    api, rec = _world(ensemble, models)
    body = api.objects[ENSEMBLE_PATH]
    stale = {**body, "metadata": dict(body["metadata"]), "status": dict(body.get("status") or {})}
    other = {"type": "Ready", "status": "False", "reason": "Creating", "lastTransitionTime": "2025-12-31T00:00:00Z"}
    api.objects[ENSEMBLE_PATH]["status"] = {"phase": "Pending", "conditions": [other]}  # written since `stale`
    api.bump(api.objects[ENSEMBLE_PATH])
    outcome = rec.ensemble(stale, observed(stale, _model_index(api), {}, {}))
    sent = [(m, p) for m, p in api.requests if p.startswith(ENSEMBLE_PATH)]
    assert sent == [("PATCH", ENSEMBLE_PATH + "/status"), ("GET", ENSEMBLE_PATH), ("PATCH", ENSEMBLE_PATH + "/status")]
    assert outcome.written is not None and outcome.phase == "Progressing"
    conditions = {c["type"]: c for c in api.objects[ENSEMBLE_PATH]["status"]["conditions"]}
    assert set(conditions) == {"Ready", "Progressing", "Degraded"}
    # planned again from what the other writer left: Ready stayed False, so its transition time is kept
    assert conditions["Ready"]["lastTransitionTime"] == "2025-12-31T00:00:00Z"


def test_a_spec_change_met_by_a_conflict_leaves_the_write_to_its_own_reconcile(
    ensemble: Ensemble, models: dict[str, Model]
) -> None:
    api, rec = _world(ensemble, models)
    body = api.objects[ENSEMBLE_PATH]
    stale = {**body, "metadata": dict(body["metadata"])}
    before = dict(body.get("status") or {})
    api.objects[ENSEMBLE_PATH]["metadata"]["generation"] = 4  # the spec changed meanwhile
    api.bump(api.objects[ENSEMBLE_PATH])
    outcome = rec.ensemble(stale, observed(stale, _model_index(api), {}, {}))
    assert outcome.written is None and api.objects[ENSEMBLE_PATH].get("status") == before


def test_model_status_has_one_writer_and_keeps_versions_found(models: dict[str, Model]) -> None:
    api = FakeApi()
    path = object_path("serving.ensemble.dev/v1alpha1", "Model", NS, "classifier")
    api.put(path, models["classifier"].model_dump(mode="json", by_alias=True))
    rec = Reconciler(kube=KubeClient(api), defaults=RuntimeDefaults(), clock=lambda: "t0")
    assert rec.model_status(api.objects[path], ["a"], [1, 2]) is not None
    status = api.objects[path]["status"]
    assert status["versionsFound"] == [1, 2] and status["policy"]
    assert rec.model_status(api.objects[path], ["a"], None) is None  # nothing reported since: kept, not written
    assert rec.model_status(api.objects[path], ["a", "b"], None) is not None
    assert api.objects[path]["status"]["versionsFound"] == [1, 2]
    assert "used by a, b" in api.objects[path]["status"]["conditions"][0]["message"]


def _pods(n: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {"name": f"p{i}", "labels": {ENSEMBLE_LABEL: "image-pipeline"}},
            "status": {"podIP": f"10.0.0.{i}", "conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(n)
    ]


def test_pod_probes_run_concurrently_within_a_bound() -> None:
    guard = threading.Lock()
    in_flight = [0, 0]  # now, most
    both = threading.Barrier(2, timeout=20)

    def probe(url: str, *_: Any) -> Any:
        with guard:
            in_flight[0] += 1
            in_flight[1] = max(in_flight[1], in_flight[0])
        try:
            both.wait()  # only returns when two calls are in flight together
            return {"versions": {"m": 1}} if "/versions" in url else {}
        finally:
            with guard:
                in_flight[0] -= 1

    kube = KubeClient(FakeApi(), http_get=probe, http_post=probe, probe_concurrency=2, probe_budget_seconds=60)
    reports = kube.pod_reports(NS, "image-pipeline", _pods(4))  # 12 calls, in pairs
    assert [r.versions for r in reports] == [{"m": 1}] * 4
    assert in_flight[1] == 2
    kube.close()


def test_pod_probes_end_within_their_budget() -> None:
    release = threading.Event()

    def hangs(url: str, *_: Any) -> Any:
        release.wait(30)
        return {"versions": {"m": 1}}

    kube = KubeClient(FakeApi(), http_get=hangs, http_post=hangs, probe_budget_seconds=0.2)
    try:
        reports = kube.pod_reports(NS, "image-pipeline", _pods(3))
        assert [r.versions for r in reports] == [None] * 3  # unknown: not answered within the budget
        assert all(r.ready for r in reports)
    finally:
        release.set()
        kube.close()


def test_indexes_keep_only_what_is_ours(ensemble: Ensemble) -> None:
    owner = {"kind": "Ensemble", "name": "e", "controller": True}
    ours = {"metadata": {"namespace": NS, "name": "e", "labels": {ENSEMBLE_LABEL: "e"}, "ownerReferences": [owner]}}
    assert list(deployment_entry(ours)) == [(NS, "e")]
    unowned = {"metadata": {"namespace": NS, "name": "e", "labels": {ENSEMBLE_LABEL: "e"}}}
    assert deployment_entry(unowned) == {}
    assert deployment_entry({"metadata": {"namespace": NS, "name": "x"}}) == {}
    pod = {"metadata": {"namespace": NS, "name": "e-1", "labels": {ENSEMBLE_LABEL: "e"}, "uid": "u"},
           "spec": {"big": "x"}, "status": {"podIP": "1"}}
    assert pod_entry(pod) == {(NS, "e"): {"metadata": {"name": "e-1", "namespace": NS,
                                                      "labels": {ENSEMBLE_LABEL: "e"}}, "status": {"podIP": "1"}}}
    assert pod_entry({"metadata": {"namespace": NS, "name": "other"}}) == {}
    entries = ensemble_model_entries(ensemble.to_wire())
    assert set(entries) == {(NS, "preprocess"), (NS, "classifier"), (NS, "postprocess")}
    index: Mapping[tuple[str, str], list[str]] = {(NS, "classifier"): ["b", "a", "a"]}
    assert users(index, NS, "classifier") == ["a", "b"] and users(index, NS, "none") == []


def test_versions_found_are_one_union_per_model() -> None:
    found = FoundVersions()
    assert found.union(NS, "m") is None
    assert found.record(NS, "a", {"m": [2, 1]}) == ["m"]
    assert found.record(NS, "b", {"m": [3], "n": []}) == ["m", "n"]
    assert found.record(NS, "a", {"m": [1, 2]}) == []  # the same again: nothing changed
    assert found.union(NS, "m") == [1, 2, 3] and found.union("other", "m") is None
    assert found.drop(NS, "b") == ["m", "n"]
    assert found.union(NS, "m") == [1, 2] and found.union(NS, "n") is None



def test_a_watched_object_is_forgotten_only_when_it_is_not_what_was_applied(
    ensemble: Ensemble, models: dict[str, Model]
) -> None:
    """What a watch reports of an owned object: a status write by another controller (same applied hash) is
    ours and costs nothing; a deletion or someone else's content makes the next reconcile apply it again."""
    from ensemble_operator.kube import APPLIED_HASH_ANNOTATION
    from ensemble_operator.plan import ObjectKey

    api, rec = _world(ensemble, models)
    body = api.objects[ENSEMBLE_PATH]
    index = _model_index(api)
    rec.ensemble(body, observed(body, index, {}, {}), fresh=True)
    config_path = object_path("v1", "ConfigMap", NS, "image-pipeline-repository")
    live = api.objects[config_path]
    key = ObjectKey("v1", "ConfigMap", NS, "image-pipeline-repository")

    assert not rec.kube.observed(key, {**live, "status": {"note": "another controller"}})
    seen = len(api.requests)
    rec.ensemble(body, observed(body, index, {}, {}))
    assert api.requests[seen:] == []

    replaced = {**live, "metadata": {**live["metadata"], "annotations": {APPLIED_HASH_ANNOTATION: "theirs"}}}
    api.objects[config_path] = replaced
    assert rec.kube.observed(key, replaced)
    seen = len(api.requests)
    rec.ensemble(body, observed(body, index, {}, {}))
    assert ("GET", config_path) in api.requests[seen:] and ("PATCH", config_path) in api.requests[seen:]

    del api.objects[config_path]
    assert rec.kube.observed(key, None)
    seen = len(api.requests)
    rec.ensemble(body, observed(body, index, {}, {}))
    assert ("PATCH", config_path) in api.requests[seen:]
    assert config_path in api.objects
