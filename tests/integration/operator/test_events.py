"""The operator reacts to events, on the real control plane: an operator whose clocks are an hour long (so that
only its watches can explain what it does) takes over from the package's one. A pod's readiness reaches the
Ensemble's status; a Model change writes only the ConfigMaps of the Ensembles that use it; an idle Ensemble
costs no API requests; a status write that meets someone else's write is read again and planned again.

Figures (seconds, request counts) are printed in the terminal summary, never asserted on."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.controlplane import ControlPlane

from .conftest import TIMINGS
from .support import (
    GROUP_PATH,
    JSON,
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
    namespace_with,
    phase_is,
    wait_ensemble,
    wait_for,
)

pytestmark = pytest.mark.controlplane

HOUR = "3600"


@pytest.fixture(scope="module")
def watching_operator(
    release: Release, operator: OperatorProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OperatorProcess]:
    """An operator that polls the pods and re-reads the API once an hour only; it outranks the package's."""
    since = len(operator.log())
    proc = OperatorProcess(
        "operator-watch",
        release,
        tmp_path_factory.mktemp("operator-watch"),
        priority=300,
        webhook=False,
        settings={"status_interval_seconds": HOUR, "resync_interval_seconds": HOUR},
    )
    proc.start()
    try:
        wait_for(
            lambda: "Pausing operations in favour of" in operator.log()[since:],
            "the package's operator to pause in favour of the watching one",
            detail=lambda: operator.process.log_tail(20),
        )
        yield proc
    finally:
        proc.stop()
        wait_for(
            lambda: "Resuming operations" in operator.log()[since:],
            "the package's operator to resume",
            timeout=60,
            detail=lambda: operator.process.log_tail(20),
        )


def _pod(cp: ControlPlane, ns: str, ensemble: str) -> JSON:
    items = cp.api("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=serving.ensemble.dev/ensemble%3D{ensemble}")
    (pod,) = [p for p in items["items"] if not p["metadata"].get("deletionTimestamp")]
    return dict(pod)


def _set_pod_ready(cp: ControlPlane, ns: str, name: str, ready: bool) -> float:
    """As a kubelet whose readiness probe changed its verdict would: the pod's Ready condition. Returns when."""
    path = f"/api/v1/namespaces/{ns}/pods/{name}/status"

    def put() -> float | None:
        pod = cp.api("GET", path)
        for cond in pod["status"]["conditions"]:
            if cond["type"] in ("Ready", "ContainersReady"):
                cond["status"] = "True" if ready else "False"
        cp.api("PUT", path, pod)  # a conflict with kwok's own write is retried by wait_for
        return time.monotonic()

    return wait_for(put, f"pod {name} Ready={ready}", timeout=30)


def test_pod_readiness_reaches_the_status_by_watch(
    audited_control_plane: ControlPlane, watching_operator: OperatorProcess, audit_log: AuditLog
) -> None:
    cp = audited_control_plane
    name = "watched"
    ns = namespace_with(cp, "watch", cpu_ensemble(name, replicas=1))
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)
    pod = _pod(cp, ns, name)["metadata"]["name"]

    changed = _set_pod_ready(cp, ns, pod, ready=False)
    ens = wait_ensemble(
        cp, ns, name, lambda e: (condition(e, "Ready") or {}).get("status") == "False", "Ready=False", timeout=60
    )
    TIMINGS["pod not ready -> Ensemble Ready=False (s)"] = time.monotonic() - changed
    ready = condition(ens, "Ready")
    assert ready is not None and ready["reason"] == "NoReadyReplicas", ready

    changed = _set_pod_ready(cp, ns, pod, ready=True)
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready again", timeout=60)
    TIMINGS["pod ready again -> Ensemble Ready (s)"] = time.monotonic() - changed
    assert watching_operator.reconciled(ns, name)


def test_an_idle_ensemble_costs_no_api_requests(
    audited_control_plane: ControlPlane, watching_operator: OperatorProcess, audit_log: AuditLog
) -> None:
    """Six Ready Ensembles, then a window in which nothing changes: the operator asks nothing about them (its
    watches hold their state). What it asks at all (watch renewals, peering) does not depend on them."""
    cp = audited_control_plane
    names = [f"idle-{i}" for i in range(6)]
    ns = namespace_with(cp, "idle", *[cpu_ensemble(n, replicas=1) for n in names])
    for n in names:
        wait_ensemble(cp, ns, n, phase_is("Ready"), "phase Ready", timeout=120)

    def quiet() -> int | None:
        """The audit log's length once the operator has asked nothing about this namespace for 5 s."""
        mark = audit_log.mark()
        mine = audit_log.since(0, ns, writes=True) + audit_log.since(0, ns, writes=False)
        last = max((epoch(e["stageTimestamp"]) for e in mine), default=0.0)
        return mark if mine and time.time() - last > 5 else None

    mark = wait_for(quiet, "the operator to fall quiet about the namespace", timeout=90)
    window_start = time.monotonic()
    # The window: longer than the pod report interval the operator had before (30 s), and than any kopf
    # keep-alive; a sleep here is the measurement, not a synchronisation.
    time.sleep(35)
    window = time.monotonic() - window_start
    asked = audit_log.since(mark, ns, writes=False) + audit_log.since(mark, ns, writes=True)
    everywhere = audit_log.since(mark, None, writes=False) + audit_log.since(mark, None, writes=True)
    TIMINGS["idle: operator requests/min about 6 idle Ensembles"] = len(asked) * 60 / window
    TIMINGS["idle: operator requests/min in all"] = len(everywhere) * 60 / window
    print("idle window requests:", json.dumps([describe(e) for e in everywhere], indent=1))
    assert not asked, "requests about idle Ensembles:\n" + "\n".join(describe(e) for e in asked)


def test_a_model_change_writes_only_the_config_maps_of_its_ensembles(
    audited_control_plane: ControlPlane, watching_operator: OperatorProcess, audit_log: AuditLog
) -> None:
    cp = audited_control_plane
    (classifier,) = [copy.deepcopy(m) for m in example_models() if m["metadata"]["name"] == "classifier"]
    other = copy.deepcopy(classifier)
    other["metadata"]["name"] = "classifier-b"
    uses_a, uses_b = cpu_ensemble("uses-a", replicas=1), cpu_ensemble("uses-b", replicas=1)
    (step,) = [s for s in uses_b["spec"]["steps"] if s["modelRef"]["name"] == "classifier"]
    step["modelRef"]["name"] = "classifier-b"
    ns = namespace_with(cp, "touch")
    apply(cp, ns, other)
    apply(cp, ns, uses_a, uses_b)
    for n in ("uses-a", "uses-b"):
        wait_ensemble(cp, ns, n, phase_is("Ready"), "phase Ready", timeout=90)
    config = {n: f"/api/v1/namespaces/{ns}/configmaps/{n}-repository" for n in ("uses-a", "uses-b")}
    before = {n: cp.api("GET", p)["data"]["repository.json"] for n, p in config.items()}

    def quiet() -> int | None:
        mark = audit_log.mark()
        writes = audit_log.since(0, ns, writes=True)
        return mark if writes and time.time() - epoch(writes[-1]["stageTimestamp"]) > 3 else None

    mark = wait_for(quiet, "the operator's writes to settle", timeout=60)
    classifier["spec"]["versionPolicy"] = {"specific": {"versions": [1, 2]}}
    changed = time.monotonic()
    apply(cp, ns, classifier)
    wait_for(
        lambda: cp.api("GET", config["uses-a"])["data"]["repository.json"] != before["uses-a"],
        "uses-a's repository.json to follow its Model",
    )
    TIMINGS["Model change -> its Ensemble's ConfigMap (s, incl. 1 s settle)"] = time.monotonic() - changed
    model_path = f"{GROUP_PATH}/namespaces/{ns}/models/classifier"
    wait_for(
        lambda: (cp.api("GET", model_path).get("status") or {}).get("policy") == "specific(1,2)",
        "the Model's status to follow its spec",
    )
    mark_after = wait_for(quiet, "the operator's writes to settle again", timeout=60)
    writes = audit_log.since(mark, ns, writes=True)
    touched = sorted({describe(e) for e in writes})
    config_writes = [e for e in writes if e.get("objectRef", {}).get("resource") == "configmaps"]
    assert [e["objectRef"]["name"] for e in config_writes] == ["uses-a-repository"], touched
    assert not [e for e in writes if "uses-b" in describe(e)], touched
    assert cp.api("GET", config["uses-b"])["data"]["repository.json"] == before["uses-b"]
    TIMINGS["Model change: operator API requests until settled"] = float(
        len(audit_log.events()[mark:mark_after]) if mark_after > mark else 0
    )


def test_a_status_conflict_on_the_api_server_is_read_again(
    audited_control_plane: ControlPlane, watching_operator: OperatorProcess, tmp_path: Path
) -> None:
    """The operator's status write, made from a Model read before someone else wrote it: the API server
    refuses the stale resourceVersion (409), the client reads the Model again and writes from what is there."""
    from ensemble_operator.kube import Conflict, KubeClient
    from ensemble_operator.kube_api import ApiClientTransport
    from ensemble_operator.reconcile import Reconciler
    from ensemble_operator.render.common import RuntimeDefaults
    from kubernetes import config as kube_config

    cp = audited_control_plane
    ns = namespace_with(cp, "conflict")
    path = f"{GROUP_PATH}/namespaces/{ns}/models/classifier"
    wait_for(lambda: (cp.api("GET", path).get("status") or {}).get("policy"), "the Model's first status")
    stale: dict[str, Any] = cp.api("GET", path)
    theirs = copy.deepcopy(stale)
    theirs["status"]["versionsFound"] = [9]  # someone else's write, after `stale` was read
    cp.api("PUT", path + "/status", theirs)

    client = kube_config.new_client_from_config(str(cp.kubeconfig_path))  # type: ignore[no-untyped-call]
    kube = KubeClient(ApiClientTransport(client))
    with pytest.raises(Conflict):  # the API server holds the patch to the version it was computed from
        kube.patch_status(
            "serving.ensemble.dev/v1alpha1", "Model", ns, "classifier", {"policy": "x"}, stale["status"],
            stale["metadata"]["resourceVersion"],
        )
    rec = Reconciler(kube=kube, defaults=RuntimeDefaults())
    written = rec.model_status(stale, ["someone"], [1, 2])
    assert written is not None
    status = cp.api("GET", path)["status"]
    assert status["versionsFound"] == [1, 2]
    assert "used by someone" in (condition({"status": status}, "Accepted") or {}).get("message", "")
    assert kube.stats.status_patches == 1


def test_owned_objects_deleted_by_hand_come_back_by_watch(
    audited_control_plane: ControlPlane, watching_operator: OperatorProcess
) -> None:
    """Someone deletes an Ensemble's ConfigMap, Services and PDB: the watching operator (whose re-read of the
    API is an hour away) applies them again, because the watch reported the deletion."""
    cp = audited_control_plane
    name = "restored"
    ns = namespace_with(cp, "restore", cpu_ensemble(name, replicas=1))
    wait_ensemble(cp, ns, name, phase_is("Ready"), "phase Ready", timeout=90)
    paths = {
        "ConfigMap": f"/api/v1/namespaces/{ns}/configmaps/{name}-repository",
        "Service": f"/api/v1/namespaces/{ns}/services/{name}",
        "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
    }
    before = {kind: cp.api("GET", path)["metadata"]["uid"] for kind, path in paths.items()}
    deleted = time.monotonic()
    for path in paths.values():
        cp.api("DELETE", path)

    def recreated() -> bool:
        for kind, path in paths.items():
            live = get(cp, path)
            if live is None or live["metadata"]["uid"] == before[kind]:
                return False
        return True

    wait_for(recreated, "the deleted objects to be applied again", timeout=60)
    TIMINGS["owned objects deleted by hand -> applied again (s)"] = time.monotonic() - deleted
    assert watching_operator.reconciled(ns, name)
