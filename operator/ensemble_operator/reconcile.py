"""One level-based reconcile per object: read, plan, apply the difference, report (I/O via KubeClient)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .access import Podmate
from .api.v1alpha1 import API_VERSION, Ensemble, Model
from .kube import KubeClient
from .plan import plan_ensemble
from .refresh import pods_to_refresh
from .render.common import CONFIG_HASH_ANNOTATION, CONFIG_REFRESH_ANNOTATION, RuntimeDefaults
from .settle import ModelSettle
from .status import PodReport, compute_model_status, compute_status, versions_found
from .validation import validate_ensemble

logger = logging.getLogger(__name__)

REFRESH_EVERY_S = 30.0  # at most one more nudge per pod this often (or twice the runtime's poll interval)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class KeyedLocks:
    """One lock per key, made on first use: kopf runs handlers of different objects at the same time, and the
    handlers of several Models (and the Ensemble's own timer) may reconcile one Ensemble at once."""

    _guard: threading.Lock = field(default_factory=threading.Lock)
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)

    def of(self, key: tuple[str, str]) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


@dataclass(frozen=True)
class Reconciler:
    kube: KubeClient
    defaults: RuntimeDefaults
    clock: Callable[[], str] = utc_now
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    settle: ModelSettle = field(default_factory=ModelSettle)

    def models(self, namespace: str) -> dict[str, Model]:
        return {name: Model.model_validate(body) for name, body in self._model_bodies(namespace).items()}

    def _model_bodies(self, namespace: str) -> dict[str, dict[str, Any]]:
        return {m["metadata"]["name"]: m for m in self.kube.list_objects(API_VERSION, "Model", namespace)}

    def ensembles_using(self, namespace: str, model: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.kube.list_objects(API_VERSION, "Ensemble", namespace)
            if any(s.get("modelRef", {}).get("name") == model for s in e.get("spec", {}).get("steps", []))
        ]

    def ensemble(self, body: dict[str, Any]) -> str:
        """Reconcile one Ensemble; returns the phase. Writes nothing when nothing changed. One at a time per
        Ensemble, so that concurrent reconciles never each see the old world and each write the new one."""
        ens = Ensemble.model_validate(body)
        ns, name = ens.metadata.namespace, ens.metadata.name
        lock = self.locks.of((ns, name))
        if not lock.acquire(blocking=False):
            lock.acquire()  # another reconcile of it just ran: what we were handed may be out of date
            fresh = self.kube.get(API_VERSION, "Ensemble", ns, name)
            if fresh is None:
                lock.release()
                return "Unknown"
            body, ens = fresh, Ensemble.model_validate(fresh)
        try:
            return self._ensemble(ens, body)
        finally:
            lock.release()

    def _ensemble(self, ens: Ensemble, body: dict[str, Any]) -> str:
        ns, name = ens.metadata.namespace, ens.metadata.name
        bodies = self._model_bodies(ns)
        plan = plan_ensemble(ens, {n: Model.model_validate(b) for n, b in bodies.items()}, self.defaults)
        objects = self._hold_settling_config(ens, plan.apply)
        held = len(objects) < len(plan.apply)
        applied = sum(self.kube.apply(obj) for obj in objects)
        deleted = sum(self.kube.delete_if_exists(key) for key in plan.delete)
        deployment = self.kube.get("apps/v1", "Deployment", ns, name)
        pod_objects = self.kube.list_pods(ns, name) if deployment is not None else []
        before = {p["metadata"]["name"]: dict(p["metadata"].get("annotations") or {}) for p in pod_objects}
        if plan.config_hash is not None and not held:
            # The kubelet refreshes a mounted ConfigMap on its periodic sync (a minute or more) or at once when
            # the pod object changes: mark each pod with the config it should have, so changes land in seconds.
            # (With the time: a pod marked just now is not "stale" before the runtime's next poll.)
            self.kube.annotate_pods(
                ns, pod_objects, CONFIG_HASH_ANNOTATION, plan.config_hash, {CONFIG_REFRESH_ANNOTATION: self.clock()}
            )
        pods = self.kube.pod_reports(ns, name, pod_objects)
        if plan.config_hash is not None and plan.config_digest is not None and not held:
            self._refresh_stale(ens, pod_objects, before, pods, plan.config_hash, plan.config_digest)
        status = compute_status(ens, plan.issues, deployment, pods, self.clock(), plan.warnings)
        self.record_versions_found(
            ns, [bodies[s.model_ref.name] for s in ens.spec.steps if s.model_ref.name in bodies], pods
        )
        old_phase = (body.get("status") or {}).get("phase")
        written = self.kube.patch_status(API_VERSION, "Ensemble", ns, name, status.to_wire(), body.get("status"))
        if applied or deleted or written:
            logger.info(
                "Ensemble %s/%s reconciled: %d object(s) applied, %d deleted, status %s (phase %s)",
                ns,
                name,
                applied,
                deleted,
                "written" if written else "unchanged",
                status.phase,
            )
        if written and status.phase != old_phase:
            # a Degraded event says why (e.g. "pod p: m 2: the runtime died while loading this version")
            kind = "Degraded" if status.phase == "Degraded" else "Ready"
            shown = next(c for c in status.conditions if c.type == kind)
            warn = status.phase in ("Invalid", "Degraded")
            self.kube.emit_event(body, status.phase or "Unknown", shown.message, "Warning" if warn else "Normal")
        return status.phase or "Unknown"

    def _hold_settling_config(self, ens: Ensemble, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`objects` without the runtime config while a Model it uses is settling (see settle.py), unless the
        config does not exist yet (a new Ensemble gets its config at once)."""
        ns = ens.metadata.namespace
        waiting = self.settle.settling(ns, [step.model_ref.name for step in ens.spec.steps])
        config = next((obj for obj in objects if obj["kind"] == "ConfigMap"), None)
        if not waiting or config is None or self.kube.get("v1", "ConfigMap", ns, config["metadata"]["name"]) is None:
            return objects
        logger.info("Ensemble %s/%s: Model(s) %s changed moments ago; the config is written once they settle",
                    ns, ens.metadata.name, ", ".join(waiting))
        return [obj for obj in objects if obj is not config]

    def _refresh_stale(
        self,
        ens: Ensemble,
        pod_objects: list[dict[str, Any]],
        before: dict[str, dict[str, str]],
        pods: list[PodReport],
        config_hash: str,
        config_digest: str,
    ) -> None:
        """Nudge again the pods marked earlier that still report another repository.json (see refresh.py)."""
        every = max(REFRESH_EVERY_S, 2.0 * ens.spec.runtime.poll_interval_seconds)
        now = self.clock()
        stale = set(
            pods_to_refresh(
                pods, before, CONFIG_HASH_ANNOTATION, CONFIG_REFRESH_ANNOTATION, config_hash, config_digest, now, every
            )
        )
        if stale:
            ns = ens.metadata.namespace
            logger.info("Ensemble %s/%s: pods %s still run an older repository.json; nudging them again",
                        ns, ens.metadata.name, ", ".join(sorted(stale)))
            targets = [p for p in pod_objects if p["metadata"]["name"] in stale]
            self.kube.annotate_pods(ns, targets, CONFIG_REFRESH_ANNOTATION, now)

    def record_versions_found(self, namespace: str, models: list[dict[str, Any]], pods: list[PodReport]) -> int:
        """Write each Model's status.versionsFound from what the ready pods found in storage (the runtime
        names a model as its Model resource); only where it changed. Returns the number of Models written."""
        found = versions_found(pods, {m["metadata"]["name"] for m in models})
        written = 0
        for body in {m["metadata"]["name"]: m for m in models}.values():
            name, live = body["metadata"]["name"], body.get("status") or {}
            if name not in found or live.get("versionsFound") == found[name]:
                continue
            new = {k: v for k, v in live.items() if k != "kopf"} | {"versionsFound": found[name]}
            if self.kube.patch_status(API_VERSION, "Model", namespace, name, new, live):
                logger.info("Model %s/%s: versions found in storage %s", namespace, name, found[name])
                written += 1
        return written

    def model(self, body: dict[str, Any]) -> None:
        """Refresh a Model's status, then re-reconcile every Ensemble that references it."""
        for user in self.model_status(body):
            self.ensemble(user)

    def model_status(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Refresh a Model's status (which Ensembles use it); returns those Ensembles."""
        model = Model.model_validate(body)
        ns, name = model.metadata.namespace, model.metadata.name
        users = self.ensembles_using(ns, name)
        status = compute_model_status(model, [u["metadata"]["name"] for u in users], self.clock())
        self.kube.patch_status(API_VERSION, "Model", ns, name, status.to_wire(), body.get("status"))
        return users

    def model_deletion_blocked(self, body: dict[str, Any]) -> str | None:
        """Why a Model being deleted must stay (None: nothing uses it any more). The reason goes on the
        Model as a DeletionBlocked condition, and into one Warning event when it first appears."""
        model = Model.model_validate(body)
        ns, name = model.metadata.namespace, model.metadata.name
        users = self.model_users(ns, name)
        if not users:
            return None
        message = f"Model {name} is used by Ensemble(s) {', '.join(users)}; remove it from their steps first"
        status = compute_model_status(model, users, self.clock(), deletion_blocked=message)
        if self.kube.patch_status(API_VERSION, "Model", ns, name, status.to_wire(), body.get("status")):
            self.kube.emit_event(body, "DeletionBlocked", message, "Warning")
        return message

    def model_users(self, namespace: str, name: str) -> list[str]:
        return sorted(e["metadata"]["name"] for e in self.ensembles_using(namespace, name))

    def podmates(self, namespace: str, name: str) -> list[Podmate]:
        """The other Models served in the same pods as Model `name`: those of every Ensemble that uses it."""
        models = self.models(namespace)
        return [
            Podmate(e["metadata"]["name"], other, models[other].spec)
            for e in self.ensembles_using(namespace, name)
            for other in sorted({s.get("modelRef", {}).get("name") for s in e.get("spec", {}).get("steps", [])})
            if other != name and other in models
        ]

    def admission_issues(
        self, namespace: str, spec: dict[str, Any], models: dict[str, Model] | None = None
    ) -> tuple[list[str], list[str]]:
        """(errors, warnings) for an Ensemble spec under admission (`models`: the namespace's, if at hand)."""
        from .api.v1alpha1 import EnsembleSpec

        models = self.models(namespace) if models is None else models
        issues = validate_ensemble(EnsembleSpec.model_validate(spec), models)
        return (
            [i.message for i in issues if not i.admission_warning],
            [i.message for i in issues if i.admission_warning],
        )
