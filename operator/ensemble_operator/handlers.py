"""kopf registrations only: parse, delegate to the Reconciler, report."""

from __future__ import annotations

from typing import Any

import kopf
from pydantic import ValidationError

from .api.v1alpha1 import GROUP, VERSION, ModelSpec
from .reconcile import Reconciler


def _pydantic_message(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def register(registry: kopf.OperatorRegistry, reconciler: Reconciler, status_interval: float) -> None:
    """Register every handler on `registry` (no global registry, no module state)."""

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
    def model_changed(body: kopf.Body, **_: Any) -> None:
        reconciler.model(dict(body))

    @kopf.on.delete(GROUP, VERSION, "models", registry=registry)
    def model_deleted(namespace: str | None, name: str, **_: Any) -> None:
        # kopf keeps its finalizer on the Model until this handler succeeds: in use => blocked.
        users = reconciler.model_users(namespace or "", name)
        if users:
            raise kopf.TemporaryError(
                f"Model {name} is used by Ensemble(s) {', '.join(users)}; remove it from their steps first",
                delay=30,
            )

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
