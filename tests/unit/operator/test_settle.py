"""ModelSettle: which Models changed too recently to render; the reconcile holds their config until then."""

from __future__ import annotations

from typing import Any

from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.kube import KubeClient, object_path
from ensemble_operator.reconcile import Reconciler
from ensemble_operator.render.common import RuntimeDefaults
from ensemble_operator.settle import ModelSettle

from tests.unit.operator.fake_api import FakeApi, reconcile

NS = "ml"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_settling_models_expire_after_the_settle_time() -> None:
    clock = Clock()
    settle = ModelSettle(1.0, clock)
    settle.changed(NS, "a")
    clock.now += 0.5
    settle.changed(NS, "b")
    assert settle.settling(NS, ["a", "b", "c"]) == ["a", "b"]
    assert settle.settling("other", ["a", "b"]) == []
    clock.now += 0.5  # a: exactly 1 s old, settled
    assert settle.settling(NS, ["a", "b"]) == ["b"]
    clock.now += 0.6
    assert settle.settling(NS, ["a", "b"]) == []
    assert ModelSettle(0.0, clock).settling(NS, ["a"]) == []  # settling off


def world(ensemble: Ensemble, models: dict[str, Model], settle: ModelSettle) -> tuple[FakeApi, Reconciler]:
    api = FakeApi()
    for m in models.values():
        api.put(object_path(m.api_version, "Model", NS, m.metadata.name), m.model_dump(mode="json", by_alias=True))
    api.put(object_path(ensemble.api_version, "Ensemble", NS, "image-pipeline"), ensemble.to_wire())
    kube = KubeClient(api, http_get=lambda url, timeout, headers: {}, http_post=lambda url, body, timeout, headers: [])
    return api, Reconciler(kube=kube, defaults=RuntimeDefaults(), clock=lambda: "2026-01-01T00:00:00Z", settle=settle)


def config_text(api: FakeApi) -> Any:
    return api.objects[object_path("v1", "ConfigMap", NS, "image-pipeline-repository")]["data"]["repository.json"]


def test_a_settling_model_holds_the_config_update_not_its_creation(
    ensemble: Ensemble, models: dict[str, Model]
) -> None:
    clock = Clock()
    settle = ModelSettle(1.0, clock)
    api, rec = world(ensemble, models, settle)
    body = api.objects[object_path(ensemble.api_version, "Ensemble", NS, "image-pipeline")]
    settle.changed(NS, "classifier")  # created together with the Ensemble: the config is written at once
    reconcile(rec, api, body)
    first = config_text(api)

    model_path = object_path("serving.ensemble.dev/v1alpha1", "Model", NS, "classifier")
    api.objects[model_path]["spec"]["versionPolicy"] = {"specific": {"versions": [1]}}
    settle.changed(NS, "classifier")
    clock.now += 0.5
    reconcile(rec, api, body)  # e.g. the Ensemble's timer, moments after the change: the old config stays
    assert config_text(api) == first
    clock.now += 0.6
    reconcile(rec, api, body)
    assert config_text(api) != first and "specific" in config_text(api)
