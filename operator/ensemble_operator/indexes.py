"""What the operator's watches keep (kopf indexes) and how a reconcile's inputs are read from them (pure).

Indexes, each fed by one watch (kopf lists once, then follows the watch stream):
- Models by (namespace, name): their bodies;
- Ensembles by (namespace, Model): the names of the Ensembles whose steps use that Model;
- Deployments and Pods by (namespace, Ensemble): only those that carry the Ensemble label (the objects the
  operator renders, and the pods their ReplicaSets make). A Deployment must also name an Ensemble as its
  controlling owner.
A reconcile then reads nothing from the API to learn the state it plans from.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from .reconcile import Observed, model_names
from .render.common import ENSEMBLE_LABEL, Manifest

Key = tuple[str, str]  # (namespace, name)
IndexView = Mapping[Key, Iterable[Any]]  # kopf.Index: key -> the values stored under it


def plain(body: Mapping[str, Any]) -> Manifest:
    """A detached copy of a watched body (kopf may reuse the object it hands to handlers)."""
    return copy.deepcopy(dict(body))


def model_entry(body: Mapping[str, Any]) -> dict[Key, Manifest]:
    meta = body["metadata"]
    return {(meta["namespace"], meta["name"]): plain(body)}


def ensemble_model_entries(body: Mapping[str, Any]) -> dict[Key, str]:
    meta = body["metadata"]
    return {(meta["namespace"], model): meta["name"] for model in model_names(body)}


def owning_ensemble(body: Mapping[str, Any]) -> str | None:
    """The Ensemble an owned object (by our label) belongs to; None for anything else."""
    return ((body.get("metadata") or {}).get("labels") or {}).get(ENSEMBLE_LABEL)


def deployment_entry(body: Mapping[str, Any]) -> dict[Key, Manifest]:
    ensemble, meta = owning_ensemble(body), body["metadata"]
    refs = meta.get("ownerReferences") or []
    owned = any(r.get("kind") == "Ensemble" and r.get("controller") and r.get("name") == ensemble for r in refs)
    return {(meta["namespace"], ensemble): plain(body)} if ensemble and owned else {}


def pod_entry(body: Mapping[str, Any]) -> dict[Key, Manifest]:
    ensemble, meta = owning_ensemble(body), body["metadata"]
    if not ensemble:
        return {}
    kept = {  # what a reconcile reads of a pod: its name, marks and status
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "deletionTimestamp")
                     if k in meta},
        "status": copy.deepcopy(dict(body.get("status") or {})),
    }
    return {(meta["namespace"], ensemble): kept}


def users(index: IndexView, namespace: str, model: str) -> list[str]:
    """The Ensembles that use Model `model`, sorted."""
    return sorted(set(index.get((namespace, model), ())))


def observed(
    ensemble: Mapping[str, Any], models: IndexView, deployments: IndexView, pods: IndexView
) -> Observed:
    """A reconcile's inputs for `ensemble`, copied out of the indexes (safe to hand to another thread)."""
    meta = ensemble["metadata"]
    ns, name = meta["namespace"], meta["name"]
    found = {m: plain(next(iter(models[(ns, m)]))) for m in model_names(ensemble) if (ns, m) in models}
    deployment = next(iter(deployments.get((ns, name), ())), None)
    pod_list = sorted((plain(p) for p in pods.get((ns, name), ())), key=lambda p: p["metadata"]["name"])
    return Observed(found, None if deployment is None else plain(deployment), pod_list)
