from __future__ import annotations

from typing import Any

import kopf
import pytest
from ensemble_contract.status import StorageStatus
from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.handlers import register
from ensemble_operator.kube import KubeClient
from ensemble_operator.reconcile import Reconciler
from ensemble_operator.render.common import RuntimeDefaults
from ensemble_operator.settings import Settings
from ensemble_operator.status import (
    PodReport,
    compute_status,
    failed_versions,
    found_versions,
    served_versions,
    storage_problem,
    versions_found,
)
from ensemble_operator.validation import Issue

from tests.unit.operator.fake_api import FakeApi


def _deployment(desired: int, ready: int, updated: int, stalled: bool = False, rolled_out: bool = False) -> dict[str, Any]:
    conds = [{"type": "Progressing", "reason": "ProgressDeadlineExceeded"}] if stalled else []
    if rolled_out:
        conds = [{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]
    return {
        "metadata": {"generation": 2},
        "spec": {"replicas": desired},
        "status": {
            "observedGeneration": 2,
            "replicas": desired,
            "readyReplicas": ready,
            "updatedReplicas": updated,
            "conditions": conds,
        },
    }


@pytest.mark.parametrize(
    ("deployment", "issues", "phase"),
    [
        (None, [], "Progressing"),
        (_deployment(2, 2, 2), [], "Ready"),
        (_deployment(2, 1, 1), [], "Progressing"),
        (_deployment(2, 1, 2, stalled=True), [], "Degraded"),
        (_deployment(2, 1, 2, rolled_out=True), [], "Degraded"),  # a replica lost after the rollout
        (_deployment(2, 1, 2), [], "Progressing"),  # a new Deployment's pods still starting
        (_deployment(2, 0, 2), [], "Progressing"),
        (_deployment(2, 2, 2), [Issue("cycle", "steps form a cycle: a -> a", "a")], "Invalid"),
    ],
)
def test_phase(
    ensemble: Ensemble, deployment: dict[str, Any] | None, issues: list[Issue], phase: str
) -> None:
    status = compute_status(ensemble, issues, deployment, [], "t0")
    assert status.phase == phase
    assert {c.type for c in status.conditions} == {"Ready", "Progressing", "Degraded"}
    assert status.observed_generation == 3


def test_transition_time_kept_while_status_holds(ensemble: Ensemble) -> None:
    first = compute_status(ensemble, [], _deployment(2, 2, 2), [], "t0")
    again = compute_status(ensemble.model_copy(update={"status": first}), [], _deployment(2, 2, 2), [], "t1")
    assert again == first
    flipped = compute_status(
        ensemble.model_copy(update={"status": first}), [], _deployment(2, 0, 2), [], "t2"
    )
    ready = {c.type: c for c in flipped.conditions}["Ready"]
    assert ready.status == "False" and ready.last_transition_time == "t2"


def test_served_versions_disagreement() -> None:
    pods = [
        PodReport("a", True, {"m": 2}),
        PodReport("b", True, {"m": 2}),
        PodReport("c", True, {"m": 1}),
        PodReport("d", False, {"m": 9}),
    ]
    assert served_versions(pods) == ({"m": 2}, False)
    assert served_versions(pods[:2]) == ({"m": 2}, True)
    assert served_versions([]) == (None, True)


def test_storage_problem_from_the_runtime_status() -> None:
    assert storage_problem({"reachable": True, "sources": [{"source": "s3", "error": None}]}) is None
    assert storage_problem(None) is None
    down = {"reachable": False, "sources": [{"source": "s3://models/a", "error": "connection refused"}]}
    assert storage_problem(down) == "s3://models/a: connection refused"


def test_found_versions_from_the_runtime_status() -> None:
    doc = StorageStatus(models={"a": [3, 1, 3], "b": []}).model_dump(mode="json")
    assert found_versions(doc) == {"a": (1, 3), "b": ()}
    # a document that is not a storage status is unknown as a whole, not read field by field
    assert found_versions({"reachable": True, "sources": [], "models": {"c": ["2", True, 4], "d": "x"}}) is None
    assert found_versions({"reachable": True, "sources": []}) is None  # an older runtime
    assert found_versions(None) is None and found_versions({"models": [1]}) is None


def test_versions_found_is_the_union_over_ready_pods() -> None:
    pods = [
        PodReport("p0", True, None, found={"a": (1, 2), "b": (1,)}),
        PodReport("p1", True, None, found={"a": (2, 3)}),
        PodReport("p2", False, None, found={"a": (9,), "c": (1,)}),  # not ready: not counted
        PodReport("p3", True, None),  # did not answer
    ]
    assert versions_found(pods, {"a", "b", "c", "d"}) == {"a": [1, 2, 3], "b": [1]}
    assert versions_found(pods, {"b"}) == {"b": [1]}
    assert versions_found([], {"a"}) == {}


def test_failed_versions_from_the_repository_index() -> None:
    index = [
        {"name": "a", "version": "2", "state": "READY"},
        {"name": "a", "version": "3", "state": "UNAVAILABLE", "reason": "bad onnx"},
        {"name": "b", "state": "UNAVAILABLE", "reason": "unloaded"},
        {"name": "c"},
    ]
    assert failed_versions(index) == ("a 3: bad onnx",)
    assert failed_versions({"error": "x"}) == ()


@pytest.mark.parametrize(
    ("report", "reason"),
    [
        (PodReport("p", True, {"a": 2}, storage="s3: connection refused"), "StorageUnreachable"),
        (PodReport("p", True, {"a": 2}, failed_versions=("a 3: bad onnx",)), "VersionLoadFailed"),
        (PodReport("p", False, None, failed_versions=("a 3: bad onnx",)), "AsExpected"),  # only ready pods count
    ],
)
def test_degraded_by_what_ready_pods_report(ensemble: Ensemble, report: PodReport, reason: str) -> None:
    status = compute_status(ensemble, [], _deployment(2, 2, 2), [report], "t0")
    degraded = {c.type: c for c in status.conditions}["Degraded"]
    assert degraded.reason == reason
    if reason != "AsExpected":
        assert status.phase == "Degraded" and report.name in degraded.message
        assert {c.type: c for c in status.conditions}["Ready"].status == "True"  # the old set keeps serving


def test_settings_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENSEMBLE_OPERATOR_NAMESPACES", "ml, ml-staging")
    monkeypatch.setenv("ENSEMBLE_OPERATOR_DEFAULT_RUNTIME_IMAGE", "img:1")
    monkeypatch.setenv("ENSEMBLE_OPERATOR_DEFAULT_RUNTIME_RESOURCES", '{"requests": {"cpu": "2"}}')
    settings = Settings()
    assert settings.namespace_list() == ["ml", "ml-staging"] and not settings.clusterwide
    defaults = settings.runtime_defaults()
    assert defaults.image == "img:1" and defaults.requests == {"cpu": "2"} and defaults.limits == {}
    assert Settings(namespaces="").clusterwide


def test_handlers_register_on_a_private_registry(models: dict[str, Model]) -> None:
    registry = kopf.OperatorRegistry()
    register(registry, Reconciler(kube=KubeClient(FakeApi()), defaults=RuntimeDefaults()), 30.0)
    ids = {h.id for h in registry._webhooks.get_all_handlers()}
    assert {"validate-ensemble", "validate-model"} <= ids
    assert len(registry._changing.get_all_handlers()) >= 7
    assert len(registry._spawning.get_all_handlers()) == 2  # one worker per Ensemble and per Model
    assert {h.id for h in registry._indexing.get_all_handlers()} == {
        "models_by_name", "ensembles_by_model", "owned_deployments", "owned_pods"
    }
    assert not [h for h in registry._spawning.get_all_handlers() if type(h).__name__ != "DaemonHandler"]


def test_kopf_waits_for_a_stopped_worker_to_exit_instead_of_polling_later() -> None:
    """Deleting a Model or Ensemble waits on its worker daemon; kopf's default re-checks only after the
    daemon's cancellation backoff (5 s), which kept every finalizer that long."""
    from ensemble_operator.__main__ import INSTANT_EXIT_TIMEOUT_S, configure

    kopf_settings = kopf.OperatorSettings()
    configure(Settings(), kopf_settings)
    assert kopf_settings.background.instant_exit_timeout == INSTANT_EXIT_TIMEOUT_S > 0
