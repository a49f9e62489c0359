"""One level-based reconcile per object: plan from what the watches observed, apply the difference, report
(I/O via KubeClient). Called by the workers (workers.py), one at a time per object; the admission webhooks'
look-ups (which must not be stale) read the API."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from .access import Host, Podmate
from .api.v1alpha1 import API_VERSION, Ensemble, EnsembleSpec, Model
from .api.v1alpha1.common import DNS_SUBDOMAIN_PATTERN
from .api.v1alpha1.conditions import ConditionType
from .kube import Conflict, KubeClient
from .plan import plan_ensemble
from .refresh import pods_to_refresh
from .render.common import CONFIG_HASH_ANNOTATION, CONFIG_REFRESH_ANNOTATION, Manifest, RuntimeDefaults
from .settle import ModelSettle
from .status import PodReport, compute_model_status, compute_status
from .validation import validate_ensemble

logger = logging.getLogger(__name__)

REFRESH_EVERY_S = 30.0  # at most one more nudge per pod this often (or twice the runtime's poll interval)


_RESOURCE_NAME = re.compile(DNS_SUBDOMAIN_PATTERN)


def model_names(ensemble: Mapping[str, Any]) -> list[str]:
    """The Models an Ensemble body's steps name, sorted (read leniently: admission sees unchecked specs)."""
    steps = (ensemble.get("spec") or {}).get("steps") or []
    return sorted({str(ref["name"]) for s in steps if isinstance(ref := s.get("modelRef"), dict) and ref.get("name")})


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


STATUS_ATTEMPTS = 3  # a status write that meets a conflict re-reads and re-plans at most this often


@dataclass(frozen=True)
class Observed:
    """What a reconcile of one Ensemble reads, from the operator's watches (kopf indexes): the Models it names
    (by name; a missing one is absent), its Deployment and its pods."""

    models: Mapping[str, Manifest]
    deployment: Manifest | None
    pods: Sequence[Manifest]


@dataclass(frozen=True)
class EnsembleOutcome:
    phase: str
    pods: list[PodReport] = field(default_factory=list)
    written: Manifest | None = None  # the Ensemble as its status patch returned it (None: nothing written)
    settling: list[str] = field(default_factory=list)  # Models whose settling held the config back


class StatusConflict(RuntimeError):
    """The status write met a conflict STATUS_ATTEMPTS times in a row."""


@dataclass(frozen=True)
class Reconciler:
    kube: KubeClient
    defaults: RuntimeDefaults
    clock: Callable[[], str] = utc_now
    settle: ModelSettle = field(default_factory=ModelSettle)

    # ------------------------------------------------------------ admission (reads the API: never stale)

    def models(self, namespace: str) -> dict[str, Model]:
        return {name: Model.model_validate(body) for name, body in self._model_bodies(namespace).items()}

    def models_named(self, namespace: str, names: Iterable[str]) -> dict[str, Model]:
        """The Models among `names` that exist (one GET each): admission reads only what a spec names, never
        every Model of the namespace (a thousand Models made each Ensemble admission slower than its timeout)."""
        found: dict[str, Model] = {}
        for name in sorted(set(names)):
            if len(name) > 253 or not _RESOURCE_NAME.fullmatch(name):
                continue  # no Model can have it (the CRD schema refuses it before admission; never a path)
            body = self.kube.get(API_VERSION, "Model", namespace, name)
            if body is not None:
                found[name] = Model.model_validate(body)
        return found

    def _model_bodies(self, namespace: str) -> dict[str, dict[str, Any]]:
        return {m["metadata"]["name"]: m for m in self.kube.list_objects(API_VERSION, "Model", namespace)}

    def ensembles_using(self, namespace: str, model: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.kube.list_objects(API_VERSION, "Ensemble", namespace)
            if model in model_names(e)
        ]

    # ------------------------------------------------------------ Ensembles

    def ensemble(self, body: Mapping[str, Any], observed: Observed, *, fresh: bool = False) -> EnsembleOutcome:
        """Reconcile one Ensemble from `observed`; writes nothing when nothing changed. `fresh`: read the
        owned objects from the API instead of trusting what this process last applied. The caller runs one
        reconcile per Ensemble at a time (see workers.py)."""
        ens = Ensemble.model_validate(dict(body))
        return self._ensemble(ens, dict(body), observed, fresh)

    def _ensemble(self, ens: Ensemble, body: dict[str, Any], observed: Observed, fresh: bool) -> EnsembleOutcome:
        ns, name = ens.metadata.namespace, ens.metadata.name
        models = {n: Model.model_validate(b) for n, b in observed.models.items()}
        plan = plan_ensemble(ens, models, self.defaults)
        objects, settling = self._hold_settling_config(ens, plan.apply)
        held = len(objects) < len(plan.apply)
        applied = sum(self.kube.apply(obj, fresh=fresh) for obj in objects)
        deleted = sum(self.kube.delete_if_exists(key, fresh=fresh) for key in plan.delete)
        deployment = observed.deployment
        pod_objects = list(observed.pods) if deployment is not None else []
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

        def planned(live: dict[str, Any]) -> dict[str, Any]:
            current = ens if live is body else Ensemble.model_validate(live)
            return compute_status(current, plan.issues, deployment, pods, self.clock(), plan.warnings).to_wire()

        old_phase = (body.get("status") or {}).get("phase")
        written, final = self._write_status("Ensemble", body, planned)
        status = final.get("status") or {}
        phase = str(status.get("phase") or "Unknown")
        if applied or deleted or written is not None:
            logger.info(
                "Ensemble %s/%s reconciled: %d object(s) applied, %d deleted, status %s (phase %s)",
                ns,
                name,
                applied,
                deleted,
                "written" if written is not None else "unchanged",
                phase,
            )
        if written is not None and phase != old_phase:
            # a Degraded event says why (e.g. "pod p: m 2: the runtime died while loading this version")
            kind = ConditionType.DEGRADED if phase == "Degraded" else ConditionType.READY
            shown = next(c for c in status.get("conditions", []) if c.get("type") == kind)
            warn = phase in ("Invalid", "Degraded")
            self.kube.emit_event(body, phase, shown.get("message", ""), "Warning" if warn else "Normal")
        return EnsembleOutcome(phase, pods, written, settling)

    def _write_status(
        self, kind: str, body: dict[str, Any], compute: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> tuple[Manifest | None, dict[str, Any]]:
        """Write `compute(body)` as the status of `body`, guarded by its resourceVersion. On a conflict (someone
        wrote the object since it was read): read it again and, unless its spec changed meanwhile (then the
        change's own reconcile follows; nothing is written here), compute again from what it holds now.
        Returns (the object as written or None, the object the status was last computed for)."""
        meta = body["metadata"]
        ns, name, generation = meta["namespace"], meta["name"], meta.get("generation")
        for _ in range(STATUS_ATTEMPTS):
            new = compute(body)
            try:
                written = self.kube.patch_status(
                    API_VERSION, kind, ns, name, new, body.get("status"), body["metadata"].get("resourceVersion")
                )
            except Conflict:
                fresh = self.kube.get(API_VERSION, kind, ns, name)
                if fresh is None or fresh["metadata"].get("generation") != generation:
                    return None, body
                logger.debug("%s %s/%s: status changed since it was read; computing it again", kind, ns, name)
                body = fresh
                continue
            if written is None:
                return None, {**body, "status": new}
            return written, written
        raise StatusConflict(f"{kind} {ns}/{name}: status conflicts {STATUS_ATTEMPTS} times in a row")

    def _hold_settling_config(
        self, ens: Ensemble, objects: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """(`objects` without the runtime config while a Model it uses is settling (see settle.py), unless the
        config does not exist yet (a new Ensemble gets its config at once); the settling Models)."""
        ns = ens.metadata.namespace
        waiting = self.settle.settling(ns, [step.model_ref.name for step in ens.spec.steps])
        config = next((obj for obj in objects if obj["kind"] == "ConfigMap"), None)
        if not waiting or config is None or self.kube.get("v1", "ConfigMap", ns, config["metadata"]["name"]) is None:
            return objects, []
        logger.info("Ensemble %s/%s: Model(s) %s changed moments ago; the config is written once they settle",
                    ns, ens.metadata.name, ", ".join(waiting))
        return [obj for obj in objects if obj is not config], waiting

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

    # ------------------------------------------------------------ Models

    def model_status(
        self,
        body: Mapping[str, Any],
        users: Sequence[str],
        found: Sequence[int] | None = None,
        deletion_blocked: str | None = None,
    ) -> Manifest | None:
        """Write a Model's status (the only writer of all of it): policy, which Ensembles use it (`users`),
        the versions their pods found in storage (`found`; None: keep what it says) and, while a deletion waits
        for its users, DeletionBlocked. Returns the Model as written (None: nothing changed)."""

        def planned(live: dict[str, Any]) -> dict[str, Any]:
            model = Model.model_validate(live)
            return compute_model_status(model, users, self.clock(), deletion_blocked, found).to_wire()

        written, _ = self._write_status("Model", dict(body), planned)
        return written

    def model_deletion_blocked(
        self, body: Mapping[str, Any], users: Sequence[str], found: Sequence[int] | None = None
    ) -> str | None:
        """Why a Model being deleted must stay (None: nothing uses it any more). The reason goes on the
        Model as a DeletionBlocked condition, and into one Warning event when it first appears."""
        if not users:
            return None
        name = body["metadata"]["name"]
        message = f"Model {name} is used by Ensemble(s) {', '.join(sorted(users))}; remove it from their steps first"
        if self.model_status(body, users, found, deletion_blocked=message) is not None:
            blocked = {c.get("type"): c for c in (body.get("status") or {}).get("conditions", [])}
            if ConditionType.DELETION_BLOCKED not in blocked:
                self.kube.emit_event(dict(body), "DeletionBlocked", message, "Warning")
        return message

    def podmates(self, namespace: str, name: str) -> list[Podmate]:
        """The other Models served in the same pods as Model `name`: those of every Ensemble that uses it."""
        users = self.ensembles_using(namespace, name)
        models = self.models_named(namespace, (m for e in users for m in model_names(e) if m != name))
        return [
            Podmate(e["metadata"]["name"], other, models[other].spec)
            for e in users
            for other in model_names(e)
            if other != name and other in models
        ]

    def hosts(self, namespace: str, name: str) -> list[Host]:
        """The Ensembles whose pods serve Model `name` (one whose spec no longer parses carries nothing known)."""
        found = []
        for e in self.ensembles_using(namespace, name):
            try:
                found.append(Host(e["metadata"]["name"], EnsembleSpec.model_validate(e.get("spec") or {})))
            except ValidationError:
                continue
        return found

    def admission_issues(
        self, namespace: str, spec: dict[str, Any], models: dict[str, Model] | None = None
    ) -> tuple[list[str], list[str]]:
        """(errors, warnings) for an Ensemble spec under admission (`models`: the namespace's, if at hand)."""
        from .api.v1alpha1 import EnsembleSpec

        models = self.models_named(namespace, model_names({"spec": spec})) if models is None else models
        issues = validate_ensemble(EnsembleSpec.model_validate(spec), models)
        return (
            [i.message for i in issues if not i.admission_warning],
            [i.message for i in issues if i.admission_warning],
        )
