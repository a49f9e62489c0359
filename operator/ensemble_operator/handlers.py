"""kopf registrations only: parse, delegate to the Reconciler, report."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, TypeVar

import kopf
from pydantic import BaseModel, ValidationError

from .access import AccessGate, RuntimePolicy, UserInfo, runtime_policy
from .api.v1alpha1 import GROUP, VERSION, EnsembleSpec, ModelSpec
from .reconcile import Reconciler

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


SETTLE_MARGIN_S = 0.05  # a timer may fire a hair early: the handler's own change must have settled by then


def register(
    registry: kopf.OperatorRegistry,
    reconciler: Reconciler,
    status_interval: float,
    *,
    webhooks: bool = True,
    policy: RuntimePolicy | None = None,
) -> None:
    """Register every handler on `registry` (no global registry, no module state). Without `webhooks`
    the admission handlers are left out: kopf refuses to run admission handlers with no server. `policy`:
    the allowed runtime images and flags (default: the default image's repository, the built-in flags)."""

    @kopf.on.resume(GROUP, VERSION, "ensembles", registry=registry)
    @kopf.on.create(GROUP, VERSION, "ensembles", registry=registry)
    @kopf.on.update(GROUP, VERSION, "ensembles", field="spec", registry=registry)
    def ensemble_changed(body: kopf.Body, **_: Any) -> None:
        reconciler.ensemble(dict(body))

    @kopf.timer(GROUP, VERSION, "ensembles", interval=status_interval, registry=registry)
    def ensemble_refresh(body: kopf.Body, **_: Any) -> None:
        # Level-based: the full reconcile is cheap and writes nothing when nothing changed.
        reconciler.ensemble(dict(body))

    @kopf.on.resume(GROUP, VERSION, "models", registry=registry)
    @kopf.on.create(GROUP, VERSION, "models", registry=registry)
    @kopf.on.update(GROUP, VERSION, "models", field="spec", registry=registry)
    async def model_changed(body: kopf.Body, reason: str, **_: Any) -> None:
        # Models applied together arrive as separate events moments apart: note the change (no reconcile
        # renders it meanwhile, see settle.py), wait until the batch has landed, then render all of it at once.
        if reason != "resume":
            reconciler.settle.changed(body["metadata"]["namespace"], body["metadata"]["name"])
            await asyncio.sleep(reconciler.settle.seconds + SETTLE_MARGIN_S)
        await asyncio.to_thread(reconciler.model, dict(body))

    @kopf.timer(GROUP, VERSION, "models", interval=status_interval, registry=registry)
    def model_refresh(body: kopf.Body, **_: Any) -> None:
        # Which Ensembles use a Model changes with the Ensembles: refresh its status (no write if same).
        reconciler.model_status(dict(body))

    @kopf.on.delete(GROUP, VERSION, "models", registry=registry)
    def model_deleted(body: kopf.Body, **_: Any) -> None:
        # kopf keeps its finalizer on the Model until this handler succeeds: in use => blocked.
        blocked = reconciler.model_deletion_blocked(dict(body))
        if blocked is not None:
            raise kopf.TemporaryError(blocked, delay=10)

    if webhooks:
        gate = AccessGate(policy or runtime_policy(reconciler.defaults.image), reconciler.kube.review_access)
        _register_webhooks(registry, reconciler, gate)


def _register_webhooks(registry: kopf.OperatorRegistry, reconciler: Reconciler, gate: AccessGate) -> None:
    # Sync handlers: kopf runs them in its thread pool, so the API calls (Models, access reviews) block no loop.
    @kopf.on.validate(GROUP, VERSION, "ensembles", id="validate-ensemble", registry=registry)
    def validate_ensemble(
        namespace: str | None, spec: kopf.Spec, userinfo: kopf.UserInfo, warnings: list[str], **kwargs: Any
    ) -> None:
        ns = namespace or ""
        models = reconciler.models(ns)
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
        errors = gate.model(user, ns, new, old, lambda: reconciler.podmates(ns, name or ""))
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=403)
