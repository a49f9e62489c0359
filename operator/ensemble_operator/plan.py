"""(Ensemble, Models, defaults) -> the desired objects (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from .api.v1alpha1 import Ensemble, Model
from .render.common import CONFIG_HASH_ANNOTATION, Manifest, RuntimeDefaults
from .render.control import network_policy_name, render_control_secret, render_network_policy
from .render.network import render_config_map, render_headless_service, render_hpa, render_pdb, render_service
from .render.runtime_config import render_repository_config
from .render.workload import render_deployment
from .validation import Issue, validate_ensemble


@dataclass(frozen=True)
class ObjectKey:
    api_version: str
    kind: str
    namespace: str
    name: str

    @staticmethod
    def of(obj: Manifest) -> ObjectKey:
        meta = obj["metadata"]
        return ObjectKey(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


@dataclass(frozen=True)
class Plan:
    """Objects to apply, objects that must not exist, and the validation result they came from."""

    apply: list[Manifest] = field(default_factory=list)
    delete: list[ObjectKey] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)  # block every write
    warnings: list[Issue] = field(default_factory=list)  # reported, do not block (storage may gain a version)
    config_hash: str | None = None  # of the runtime config (repository.json) the pods should have mounted
    config_digest: str | None = None  # its SHA-256, as the runtime reports the file it applied

    @property
    def valid(self) -> bool:
        return not self.issues


def plan_ensemble(ensemble: Ensemble, models: Mapping[str, Model], defaults: RuntimeDefaults) -> Plan:
    """What the cluster should hold for `ensemble`. An invalid ensemble plans no writes at all: the
    objects of the last valid spec keep serving while status reports the problem. A pinned version that
    Model status has not listed yet does not block (the listing may be stale, e.g. after a source change;
    the runtime refuses a version that really is missing and keeps serving the old set)."""
    found = validate_ensemble(ensemble.spec, models)
    issues = [i for i in found if not i.admission_warning]
    warnings = [i for i in found if i.admission_warning]
    if issues:
        return Plan(issues=found)
    config_map = render_config_map(ensemble, render_repository_config(ensemble, models))
    objects = [
        config_map,
        render_service(ensemble),
        render_headless_service(ensemble),
        render_deployment(ensemble, models, defaults),
        render_pdb(ensemble),
    ]
    if defaults.control_key:  # before the Deployment, whose pods need it to start
        objects.insert(0, render_control_secret(ensemble, defaults.control_key))
    hpa = render_hpa(ensemble)
    delete: list[ObjectKey] = []
    hpa_key = ObjectKey(
        "autoscaling/v2", "HorizontalPodAutoscaler", ensemble.metadata.namespace, ensemble.metadata.name
    )
    if hpa is None:
        delete.append(hpa_key)
    else:
        objects.append(hpa)
    policy_key = ObjectKey(
        "networking.k8s.io/v1", "NetworkPolicy", ensemble.metadata.namespace, network_policy_name(ensemble)
    )
    if defaults.network_policy.enabled:
        objects.append(render_network_policy(ensemble, defaults.network_policy))
    else:
        delete.append(policy_key)
    config_hash = config_map["metadata"]["annotations"][CONFIG_HASH_ANNOTATION]
    digest = hashlib.sha256(config_map["data"]["repository.json"].encode()).hexdigest()
    return Plan(apply=objects, delete=delete, warnings=warnings, config_hash=config_hash, config_digest=digest)
