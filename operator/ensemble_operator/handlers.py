"""kopf registrations only: parse, delegate to the Reconciler, report."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf
from pydantic import ValidationError

from .api.v1alpha1 import GROUP, VERSION, ModelSpec
from .reconcile import Reconciler


def _pydantic_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


SETTLE_MARGIN_S = 0.05  # a timer may fire a hair early: the handler's own change must have settled by then


def register(
    registry: kopf.OperatorRegistry, reconciler: Reconciler, status_interval: float, *, webhooks: bool = True
) -> None:
    """Register every handler on `registry` (no global registry, no module state). Without `webhooks`
    the admission handlers are left out: kopf refuses to run admission handlers with no server."""

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
        _register_webhooks(registry, reconciler)


def _register_webhooks(registry: kopf.OperatorRegistry, reconciler: Reconciler) -> None:
    @kopf.on.validate(GROUP, VERSION, "ensembles", id="validate-ensemble", registry=registry)
    def validate_ensemble(namespace: str | None, spec: kopf.Spec, warnings: list[str], **_: Any) -> None:
        try:
            errors, warns = reconciler.admission_issues(namespace or "", dict(spec))
        except ValidationError as exc:
            raise kopf.AdmissionError(_pydantic_message(exc), code=422) from exc
        warnings.extend(warns)
        if errors:
            raise kopf.AdmissionError("; ".join(errors), code=422)

    @kopf.on.validate(GROUP, VERSION, "models", id="validate-model", registry=registry)
    def validate_model(spec: kopf.Spec, **_: Any) -> None:
        try:
            ModelSpec.model_validate(dict(spec))
        except ValidationError as exc:
            raise kopf.AdmissionError(_pydantic_message(exc), code=422) from exc
