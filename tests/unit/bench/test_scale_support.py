"""The operator scale benchmark's pure parts: the Model/Ensemble layout and the API server's request counter."""

from __future__ import annotations

import pytest

from bench.scale_report import targets
from bench.scale_support import Request as AuditRequest
from bench.scale_support import ensemble_of, models_of, percentile, request_counts, users_of


@pytest.mark.parametrize(("ensembles", "models"), [(300, 1000), (30, 1000), (10, 30), (3, 6), (2, 2)])
def test_every_model_is_used_and_users_of_inverts_models_of(ensembles: int, models: int) -> None:
    used = {m for e in range(ensembles) for m in models_of(e, ensembles, models)}
    assert used == set(range(models))
    for model in range(models):
        for e in users_of(models, ensembles, model):
            assert model in models_of(e, ensembles, models)


def test_a_model_change_affects_few_ensembles_at_full_size() -> None:
    counts = [len(users_of(1000, 300, m)) for m in range(1000)]
    assert min(counts) >= 1 and max(counts) <= 2


def test_request_counts_sums_codes_and_labels_resources() -> None:
    text = "\n".join(
        [
            "# HELP apiserver_request_total ...",
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",'
            'scope="namespace",subresource="",verb="LIST",version="v1"} 3',
            'apiserver_request_total{code="500",component="apiserver",dry_run="",group="",resource="pods",'
            'scope="namespace",subresource="",verb="LIST",version="v1"} 2',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="serving.ensemble.dev",'
            'resource="ensembles",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 7',
            'apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",'
            'scope="",subresource="/metrics",verb="GET",version=""} 1',
            'apiserver_request_duration_seconds_count{verb="GET"} 99',
        ]
    )
    assert request_counts(text) == {
        ("LIST", "core/pods"): 5,
        ("PATCH", "serving.ensemble.dev/ensembles/status"): 7,
        ("GET", "-"): 1,
    }


def test_ensemble_of_names_the_owner_by_object_name() -> None:
    def req(name: str) -> AuditRequest:
        return AuditRequest(at=0.0, verb="get", resource="pods", namespace="scale", name=name)

    names = ["e0001", "e0010"]
    assert ensemble_of(req("e0010-repository"), names) == "e0010"
    assert ensemble_of(req("e0001-7d9f-abcde"), names) == "e0001"
    assert ensemble_of(req("e0001"), names) == "e0001"
    assert ensemble_of(req("e00010"), names) is None
    assert ensemble_of(req(""), names) is None


def test_percentile_is_nearest_rank() -> None:
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([float(x) for x in range(1, 101)], 99) == 99.0
    assert percentile([2.0], 99) == 2.0


def _result(small_idle: float, full_idle: float, change: dict[str, object], p99: float | None) -> dict[str, object]:
    def idle(rate: float) -> dict[str, float]:
        return {"audit_operator_total_per_min": rate, "metrics_operator_total_per_min": rate,
                "operator_cpu_percent": rate / 100}

    clean = {"other_ensembles_requests": 0, "other_ensembles_writes": 0, "full_lists": 0,
             "other_configmaps_changed": [], "model": "m0001"}
    return {
        "small": {"ensembles": 30, "idle": idle(small_idle)},
        "full": {"ensembles": 300, "idle": idle(full_idle)},
        "model_changes": {"samples": [{**clean, **change}], "p50_s": p99, "p99_s": p99, "timed_out": 0},
    }


def test_targets_pass_when_idle_cost_is_flat_and_changes_stay_local_and_fast() -> None:
    verdict = targets(_result(100.0, 120.0, {}, 1.2))
    assert {name: t["pass"] for name, t in verdict.items()} == {
        "idle_independent_of_unchanged_ensembles": True,
        "model_change_touches_only_its_ensembles": True,
        "model_change_p99_to_configmap": True,
    }


def test_targets_fail_on_idle_growth_foreign_touches_and_slow_changes() -> None:
    verdict = targets(_result(100.0, 1000.0, {"full_lists": 2}, 5.5))
    assert not any(t["pass"] for t in verdict.values())
    assert "10.0x" in verdict["idle_independent_of_unchanged_ensembles"]["detail"]
    assert not targets(_result(0.0, 5.0, {"other_configmaps_changed": ["e0002"]}, None))[
        "model_change_touches_only_its_ensembles"
    ]["pass"]


def test_a_saturated_operator_fails_the_idle_target_though_its_request_rate_fell() -> None:
    result = _result(2500.0, 1600.0, {}, 1.0)
    result["small"]["idle"]["operator_cpu_percent"] = 41.0  # type: ignore[index]
    result["full"]["idle"]["operator_cpu_percent"] = 86.0  # type: ignore[index]
    verdict = targets(result)["idle_independent_of_unchanged_ensembles"]
    assert not verdict["pass"] and "2.1x" in verdict["detail"]
