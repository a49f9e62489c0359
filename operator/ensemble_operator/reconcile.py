"""One level-based reconcile per object: read, plan, apply the difference, report (I/O via KubeClient)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .api.v1alpha1 import API_VERSION, Ensemble, Model
from .kube import KubeClient
from .plan import plan_ensemble
from .render.common import RuntimeDefaults
from .status import compute_model_status, compute_status
from .validation import validate_ensemble


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Reconciler:
    kube: KubeClient
    defaults: RuntimeDefaults
    clock: Callable[[], str] = utc_now

    def models(self, namespace: str) -> dict[str, Model]:
        items = self.kube.list_objects(API_VERSION, "Model", namespace)
        return {m["metadata"]["name"]: Model.model_validate(m) for m in items}

    def ensembles_using(self, namespace: str, model: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.kube.list_objects(API_VERSION, "Ensemble", namespace)
            if any(s.get("modelRef", {}).get("name") == model for s in e.get("spec", {}).get("steps", []))
        ]

    def ensemble(self, body: dict[str, Any]) -> str:
        """Reconcile one Ensemble; returns the phase. Writes nothing when nothing changed."""
        ens = Ensemble.model_validate(body)
        ns, name = ens.metadata.namespace, ens.metadata.name
        plan = plan_ensemble(ens, self.models(ns), self.defaults)
        for obj in plan.apply:
            self.kube.apply(obj)
        for key in plan.delete:
            self.kube.delete_if_exists(key)
        deployment = self.kube.get("apps/v1", "Deployment", ns, name)
        pods = self.kube.pod_reports(ns, name) if deployment is not None else []
        status = compute_status(ens, plan.issues, deployment, pods, self.clock())
        old_phase = (body.get("status") or {}).get("phase")
        written = self.kube.patch_status(
            API_VERSION, "Ensemble", ns, name, status.to_wire(), body.get("status")
        )
        if written and status.phase != old_phase:
            ready = next(c for c in status.conditions if c.type == "Ready")
            warn = status.phase in ("Invalid", "Degraded")
            self.kube.emit_event(
                body, status.phase or "Unknown", ready.message, "Warning" if warn else "Normal"
            )
        return status.phase or "Unknown"

    def model(self, body: dict[str, Any]) -> None:
        """Refresh a Model's status, then re-reconcile every Ensemble that references it."""
        model = Model.model_validate(body)
        ns, name = model.metadata.namespace, model.metadata.name
        users = self.ensembles_using(ns, name)
        status = compute_model_status(model, [u["metadata"]["name"] for u in users], self.clock())
        self.kube.patch_status(API_VERSION, "Model", ns, name, status.to_wire(), body.get("status"))
        for user in users:
            self.ensemble(user)

    def model_users(self, namespace: str, name: str) -> list[str]:
        return sorted(e["metadata"]["name"] for e in self.ensembles_using(namespace, name))

    def admission_issues(self, namespace: str, spec: dict[str, Any]) -> tuple[list[str], list[str]]:
        """(errors, warnings) for an Ensemble spec under admission."""
        from .api.v1alpha1 import EnsembleSpec

        issues = validate_ensemble(EnsembleSpec.model_validate(spec), self.models(namespace))
        return (
            [i.message for i in issues if not i.admission_warning],
            [i.message for i in issues if i.admission_warning],
        )
