"""kopf registrations only: indexes, marks, one worker per object (workers.py), webhooks.

Admission webhooks read the API (Reconciler.models/podmates), not the indexes: a decision must see the Model
created a moment ago, which a watch may not have delivered yet."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, TypeVar

import kopf
from pydantic import BaseModel, ValidationError

from .access import AccessGate, RuntimePolicy, UserInfo, runtime_policy
from .api.v1alpha1 import GROUP, VERSION, EnsembleSpec, ModelSpec
from .indexes import (
    Key,
    deployment_entry,
    ensemble_model_entries,
    model_entry,
    owning_ensemble,
    plain,
    pod_entry,
    users,
)
from .plan import ObjectKey
from .reconcile import Reconciler, model_names
from .render.common import ENSEMBLE_LABEL
from .workers import Workers, stop_future

SpecT = TypeVar("SpecT", bound=BaseModel)


def _pydantic_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def _old_spec(kind: type[SpecT], old: Mapping[str, Any] | None) -> SpecT | None:
    """The spec before an UPDATE (None on CREATE, or when the old one no longer parses: check all of it)."""
    if old is None:
        return None
    try:
        return kind.model_validate(dict(old.get("spec") or {}))
    except ValidationError:
        return None


def register(
    registry: kopf.OperatorRegistry,
    reconciler: Reconciler,
    status_interval: float,
    *,
    resync_interval: float = 600.0,
    webhooks: bool = True,
    policy: RuntimePolicy | None = None,
) -> Workers:
    """Register every handler on `registry` (no global registry, no module state). Without `webhooks`
    the admission handlers are left out: kopf refuses to run admission handlers with no server. `policy`:
    the allowed runtime images and flags (default: the default image's repository, the built-in flags).
    Returns the workers the handlers mark (see workers.py)."""
    workers = Workers(reconciler, status_interval, resync_interval)
    ensemble_label = {ENSEMBLE_LABEL: kopf.PRESENT}

    # ---------------------------------------------------------------- what the watches keep (indexes.py)

    @kopf.index(GROUP, VERSION, "models", id="models_by_name", registry=registry)
    def models_by_name(body: kopf.Body, **_: Any) -> dict[Key, Any]:
        return model_entry(body)

    @kopf.index(GROUP, VERSION, "ensembles", id="ensembles_by_model", registry=registry)
    def ensembles_by_model(body: kopf.Body, **_: Any) -> dict[Key, str]:
        return ensemble_model_entries(body)

    @kopf.index("apps", "v1", "deployments", labels=ensemble_label, id="owned_deployments", registry=registry)
    def owned_deployments(body: kopf.Body, **_: Any) -> dict[Key, Any]:
        return deployment_entry(body)

    @kopf.index("", "v1", "pods", labels=ensemble_label, id="owned_pods", registry=registry)
    def owned_pods(body: kopf.Body, **_: Any) -> dict[Key, Any]:
        return pod_entry(body)

    # ---------------------------------------------------------------- Ensembles

    @kopf.on.resume(GROUP, VERSION, "ensembles", registry=registry)
    @kopf.on.create(GROUP, VERSION, "ensembles", registry=registry)
    @kopf.on.update(GROUP, VERSION, "ensembles", field="spec", registry=registry)
    async def ensemble_changed(body: kopf.Body, old: Any, **_: Any) -> None:
        ns = body["metadata"]["namespace"]
        workers.ensembles.mark((ns, body["metadata"]["name"]))
        before = model_names({"spec": old}) if isinstance(old, Mapping) else []
        for model in set(model_names(body)) | set(before):  # a user more or less
            workers.models.mark((ns, model))

    @kopf.daemon(GROUP, VERSION, "ensembles", cancellation_backoff=5.0, cancellation_timeout=30.0, registry=registry)
    async def ensemble_worker(body: kopf.Body, stopped: kopf.DaemonStopped, **kwargs: Any) -> None:
        # kopf hands every handler its indexes as keyword arguments named by their ids
        indexes = (kwargs["models_by_name"], kwargs["owned_deployments"], kwargs["owned_pods"])
        await workers.ensemble(body, stop_future(stopped), *indexes)

    @kopf.on.event(GROUP, VERSION, "ensembles", registry=registry)
    async def ensemble_event(body: kopf.Body, type: str | None, **_: Any) -> None:
        if type == "DELETED":
            workers.ensemble_gone(body["metadata"]["namespace"], body["metadata"]["name"], model_names(body))

    # Owned objects: deleted or changed by someone else, the Ensemble is reconciled at once (no periodic re-read
    # needed); other controllers' status writes (HPA, PDB) keep the applied hash and cost nothing, except on the
    # Deployment, whose status (readiness, rollout) is the Ensemble's. Secrets are written, never read or
    # watched: the slow resync re-applies those.
    for group, version, plural, kind, status_matters in OWNED_WATCHED:
        _watch_owned(registry, reconciler, workers, group, version, plural, kind, status_matters)

    @kopf.on.event("", "v1", "pods", labels=ensemble_label, registry=registry)
    async def pod_event(body: kopf.Body, **_: Any) -> None:
        ensemble = owning_ensemble(body)
        if ensemble is not None:
            workers.ensembles.mark_existing((body["metadata"]["namespace"], ensemble))

    # ---------------------------------------------------------------- Models

    @kopf.on.resume(GROUP, VERSION, "models", registry=registry)
    @kopf.on.create(GROUP, VERSION, "models", registry=registry)
    @kopf.on.update(GROUP, VERSION, "models", field="spec", registry=registry)
    async def model_changed(body: kopf.Body, reason: str, **kwargs: Any) -> None:
        # Models applied together arrive as separate events moments apart: note the change, so that no
        # reconcile renders it before the batch has landed (settle.py), and mark the Ensembles that use it.
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        if reason != "resume":
            reconciler.settle.changed(ns, name)
        workers.models.mark((ns, name))
        for user in users(kwargs["ensembles_by_model"], ns, name):
            workers.ensembles.mark((ns, user))

    @kopf.daemon(GROUP, VERSION, "models", cancellation_backoff=5.0, cancellation_timeout=30.0, registry=registry)
    async def model_worker(body: kopf.Body, stopped: kopf.DaemonStopped, **kwargs: Any) -> None:
        await workers.model(body, stop_future(stopped), kwargs["ensembles_by_model"])

    @kopf.on.delete(GROUP, VERSION, "models", registry=registry)
    async def model_deleted(body: kopf.Body, **kwargs: Any) -> None:
        # kopf keeps its finalizer on the Model until this handler succeeds: in use => blocked. (The Model's
        # worker has stopped: from here on this handler writes its status.)
        ns, name = body["metadata"]["namespace"], body["metadata"]["name"]
        found = workers.found.union(ns, name)
        blocked = await asyncio.to_thread(
            reconciler.model_deletion_blocked, plain(body), users(kwargs["ensembles_by_model"], ns, name), found
        )
        if blocked is not None:
            raise kopf.TemporaryError(blocked, delay=5)

    if webhooks:
        gate = AccessGate(policy or runtime_policy(reconciler.defaults.image), reconciler.kube.review_access)
        _register_webhooks(registry, reconciler, gate)
    return workers


# (group, version, plural, kind, whether every event marks the Ensemble: its status follows the object's)
OWNED_WATCHED: tuple[tuple[str, str, str, str, bool], ...] = (
    ("apps", "v1", "deployments", "Deployment", True),
    ("", "v1", "configmaps", "ConfigMap", False),
    ("", "v1", "services", "Service", False),
    ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", False),
    ("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler", False),
    ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", False),
)


def _watch_owned(
    registry: kopf.OperatorRegistry,
    reconciler: Reconciler,
    workers: Workers,
    group: str,
    version: str,
    plural: str,
    kind: str,
    status_matters: bool,
) -> None:
    api_version = f"{group}/{version}" if group else version

    @kopf.on.event(
        group, version, plural, labels={ENSEMBLE_LABEL: kopf.PRESENT}, id=f"owned-{plural}", registry=registry
    )
    async def owned_event(body: kopf.Body, type: str | None, **_: Any) -> None:
        ensemble = owning_ensemble(body)
        if ensemble is None:
            return
        ns = body["metadata"]["namespace"]
        key = ObjectKey(api_version, kind, ns, body["metadata"]["name"])
        drifted = reconciler.kube.observed(key, None if type == "DELETED" else plain(body))
        if drifted or status_matters:
            workers.ensembles.mark_existing((ns, ensemble))


def _register_webhooks(registry: kopf.OperatorRegistry, reconciler: Reconciler, gate: AccessGate) -> None:
    # Sync handlers: kopf runs them in its thread pool, so the API calls (Models, access reviews) block no loop.
    @kopf.on.validate(GROUP, VERSION, "ensembles", id="validate-ensemble", registry=registry)
    def validate_ensemble(
        namespace: str | None, spec: kopf.Spec, userinfo: kopf.UserInfo, warnings: list[str], **kwargs: Any
    ) -> None:
        ns = namespace or ""
        models = reconciler.models_named(ns, model_names({"spec": dict(spec)}))
        try:
            errors, warns = reconciler.admission_issues(ns, dict(spec), models)
            new = EnsembleSpec.model_validate(dict(spec))
        except ValidationError as exc:
            raise kopf.AdmissionError(_pydantic_message(exc), code=422) from exc
        refused = gate.ensemble(
            UserInfo.from_admission(userinfo), ns, new, _old_spec(EnsembleSpec, kwargs.get("old")), models
        )
        warnings.extend(warns)
        if errors or refused:
            raise kopf.AdmissionError("; ".join(refused + errors), code=403 if refused else 422)

    @kopf.on.validate(GROUP, VERSION, "models", id="validate-model", registry=registry)
    def validate_model(
        namespace: str | None, name: str, spec: kopf.Spec, userinfo: kopf.UserInfo, **kwargs: Any
    ) -> None:
        try:
            new = ModelSpec.model_validate(dict(spec))
        except ValidationError as exc:
            raise kopf.AdmissionError(_pydantic_message(exc), code=422) from exc
        ns, user = namespace or "", UserInfo.from_admission(userinfo)
        old = _old_spec(ModelSpec, kwargs.get("old"))
        errors = gate.model(user, ns, new, old, lambda: reconciler.podmates(ns, name or ""),
                            lambda: reconciler.hosts(ns, name or ""))
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=403)
