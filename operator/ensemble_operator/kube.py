"""The only module that talks to the Kubernetes API (the runtime pods are asked through probes.py), through a
`Transport` (kube_api.py's over the official client, in the operator).

Writes are server-side applies (fieldManager ensemble-operator, force) guarded by compare-before-write:
every applied object carries a hash of its desired content in an annotation; when the live object
carries the same hash, nothing is sent. The client remembers the hash it last applied (or read) per
object, so a reconcile that changes nothing reads nothing either; `fresh=True` reads the live objects
again (the periodic resync, the first reconcile after start). Status patches are skipped when the
computed status equals the live one, and carry the resourceVersion the status was computed from: a
concurrent writer makes the API server answer 409 (`Conflict`) instead of one write silently undoing the
other. `KubeClient.stats` counts every write, so tests can assert that a no-op reconcile wrote
nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from .access import Decision, Permission, UserInfo
from .api.v1alpha1 import API_VERSION, GROUP
from .plan import ObjectKey
from .probes import PROBE_CONCURRENCY, HttpGet, HttpPost, PodProber, http_get_json, http_post_json
from .render.common import ENSEMBLE_LABEL, Manifest, stable_hash
from .status import PodReport

log = logging.getLogger(__name__)

FIELD_MANAGER = "ensemble-operator"
APPLIED_HASH_ANNOTATION = f"{GROUP}/applied-hash"
APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"

_PLURALS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "Pod"): "pods",
    ("v1", "Event"): "events",
    ("apps/v1", "Deployment"): "deployments",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("autoscaling/v2", "HorizontalPodAutoscaler"): "horizontalpodautoscalers",
    ("v1", "Secret"): "secrets",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    (API_VERSION, "Ensemble"): "ensembles",
    (API_VERSION, "Model"): "models",
}


class Transport(Protocol):
    """One HTTP request to the API server: (status code, decoded JSON body or None)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]: ...


WRITE_ONLY_KINDS = frozenset({("v1", "Secret")})  # applied without reading the live object (no `get` right)


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    plural = _PLURALS[(api_version, kind)]
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name else path


@dataclass
class WriteStats:
    applies: int = 0
    skipped: int = 0
    deletes: int = 0
    status_patches: int = 0
    events: int = 0
    events_dropped: int = 0  # refused by the API server (a namespace being deleted refuses new objects)
    pod_annotations: int = 0

    @property
    def writes(self) -> int:
        return self.applies + self.deletes + self.status_patches + self.events + self.pod_annotations


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, path: str, body: Any) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body}")
        self.status = status


class Conflict(ApiError):
    """409: the object changed since it was read (its resourceVersion moved on)."""




class KubeClient:
    def __init__(
        self,
        transport: Transport,
        http_get: HttpGet = http_get_json,
        pod_timeout_seconds: float = 2.0,
        http_post: HttpPost = http_post_json,
        control_key: str = "",
        probe_budget_seconds: float | None = None,
        probe_concurrency: int = PROBE_CONCURRENCY,
    ) -> None:
        self._transport = transport
        self.pods = PodProber(http_get, http_post, pod_timeout_seconds, control_key, probe_budget_seconds,
                              probe_concurrency)
        # The applied-hash annotation of each object as this process last wrote or read it (None: absent).
        self._known: dict[ObjectKey, str | None] = {}
        self.stats = WriteStats()

    def close(self) -> None:
        self.pods.close()

    def pod_reports(self, namespace: str, ensemble: str, pods: Sequence[Manifest]) -> list[PodReport]:
        return self.pods.reports(namespace, ensemble, pods)

    def _call(
        self, method: str, path: str, ok: tuple[int, ...] = (200, 201), **kwargs: Any
    ) -> tuple[int, Any]:
        status, body = self._transport.request(method, path, **kwargs)
        if status == 409 and 409 not in ok:
            raise Conflict(status, method, path, body)
        if status not in ok:
            raise ApiError(status, method, path, body)
        return status, body

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        status, body = self._call("GET", object_path(api_version, kind, namespace, name), ok=(200, 404))
        return body if status == 200 else None

    def list_objects(
        self, api_version: str, kind: str, namespace: str, labels: Mapping[str, str] | None = None
    ) -> list[Manifest]:
        query = {"labelSelector": ",".join(f"{k}={v}" for k, v in sorted(labels.items()))} if labels else None
        _, body = self._call("GET", object_path(api_version, kind, namespace), query=query)
        items: list[Manifest] = body.get("items", [])
        for item in items:  # list items lack apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def apply(self, desired: Manifest, *, fresh: bool = False) -> bool:
        """Server-side apply `desired` unless the live object was applied from identical content (as last
        written or read by this process; `fresh`: as read now)."""
        key = ObjectKey.of(desired)
        digest = stable_hash(desired)
        if (key.api_version, key.kind) in WRITE_ONLY_KINDS:
            # Secrets: the operator may write them but not read them; remember what it wrote (after a restart
            # it writes once more, which the API server takes as a no-op when nothing changed).
            live_digest = self._known.get(key)
        elif not fresh and key in self._known:
            live_digest = self._known[key]  # as this process last wrote or read it: equal, or sent without a read
        else:
            live = self.get(key.api_version, key.kind, key.namespace, key.name)
            live_digest = None if live is None else live["metadata"].get("annotations", {}).get(APPLIED_HASH_ANNOTATION)
            self._known[key] = live_digest
        if live_digest == digest:
            self.stats.skipped += 1
            return False
        meta = desired["metadata"]
        body = {
            **desired,
            "metadata": {
                **meta,
                "annotations": {**meta.get("annotations", {}), APPLIED_HASH_ANNOTATION: digest},
            },
        }
        self._known.pop(key, None)  # unknown until the apply has succeeded
        self._call(
            "PATCH",
            object_path(key.api_version, key.kind, key.namespace, key.name),
            body=json.dumps(body),
            content_type=APPLY_PATCH,
            query={"fieldManager": FIELD_MANAGER, "force": "true"},
        )
        self.stats.applies += 1
        self._known[key] = digest
        return True

    def observed(self, key: ObjectKey, live: Manifest | None) -> bool:
        """A watch saw `key` as `live` (None: deleted). True when that is not what this process last applied
        (deleted, changed by someone else, or never applied by this process): it is forgotten, so that the
        owner's next reconcile reads it and applies it again. A status-only change (a controller's write)
        keeps the applied hash and is not a drift."""
        if live is None:
            self._known.pop(key, None)
            return True
        digest = ((live.get("metadata") or {}).get("annotations") or {}).get(APPLIED_HASH_ANNOTATION)
        if key in self._known and self._known[key] == digest:
            return False
        self._known.pop(key, None)
        return True

    def delete_if_exists(self, key: ObjectKey, *, fresh: bool = False) -> bool:
        if not fresh and key in self._known and self._known[key] is None:
            return False  # known absent
        if self.get(key.api_version, key.kind, key.namespace, key.name) is None:
            self._known[key] = None
            return False
        self._call(
            "DELETE", object_path(key.api_version, key.kind, key.namespace, key.name), ok=(200, 202, 404)
        )
        self._known[key] = None
        self.stats.deletes += 1
        return True

    def patch_status(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        new: Manifest,
        live: Mapping[str, Any] | None,
        resource_version: str | None = None,
    ) -> Manifest | None:
        """Merge-patch .status to `new` (keys it drops are nulled); nothing is sent when equal. With the
        `resource_version` `live` was read at, the API server refuses (`Conflict`) when the object has changed
        since. Returns the object as patched (None: nothing sent)."""
        current = {k: v for k, v in (live or {}).items() if k != "kopf"}
        if current == new:
            return None
        patch: dict[str, Any] = {"status": {**{k: None for k in current if k not in new}, **new}}
        if resource_version is not None:
            patch["metadata"] = {"resourceVersion": resource_version}
        path = object_path(api_version, kind, namespace, name) + "/status"
        _, body = self._call("PATCH", path, body=patch, content_type=MERGE_PATCH)
        self.stats.status_patches += 1
        return body if isinstance(body, dict) else {}

    def emit_event(self, involved: Manifest, reason: str, message: str, type_: str = "Normal") -> None:
        meta = involved["metadata"]
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": involved["apiVersion"],
                "kind": involved["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self._call(
                "POST", object_path("v1", "Event", meta["namespace"]), body=event, content_type="application/json"
            )
        except ApiError as exc:
            # Events are best effort, as client-go's recorder treats them: a namespace being deleted refuses
            # every new object (403), and a refused event must not fail the reconcile or the deletion handler
            # that reports it (kopf then retried a blocked Model's deletion after 60 s instead of its 5 s).
            log.warning("event %s on %s %s/%s not recorded: %s", reason, involved["kind"], meta["namespace"],
                        meta["name"], exc)
            self.stats.events_dropped += 1
            return
        self.stats.events += 1

    def review_access(self, user: UserInfo, permission: Permission) -> Decision:
        """Whether `user` holds `permission` (a LocalSubjectAccessReview in its namespace, which a namespaced
        install may create too). A failed review is a refusal that says why."""
        ns = permission.namespace
        attributes = {"namespace": ns, "verb": permission.verb, "resource": permission.resource,
                      "name": permission.name, "group": permission.group}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "LocalSubjectAccessReview",
            "metadata": {"namespace": ns},
            "spec": {
                "user": user.username,
                "uid": user.uid,
                "groups": list(user.groups),
                "extra": {k: list(v) for k, v in user.extra.items()},
                "resourceAttributes": attributes,
            },
        }
        path = f"/apis/authorization.k8s.io/v1/namespaces/{ns}/localsubjectaccessreviews"
        try:
            _, body = self._call("POST", path, body=review, content_type="application/json")
        except ApiError as exc:
            return Decision(False, error=f"access review failed: HTTP {exc.status}")
        status = (body or {}).get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        error = "" if allowed else str(status.get("evaluationError") or "")
        return Decision(allowed, reason=str(status.get("reason") or ""), error=error)

    def list_pods(self, namespace: str, ensemble: str) -> list[Manifest]:
        return self.list_objects("v1", "Pod", namespace, {ENSEMBLE_LABEL: ensemble})

    def annotate_pods(
        self, namespace: str, pods: Sequence[Manifest], key: str, value: str, extra: Mapping[str, str] | None = None
    ) -> int:
        """Set annotation `key` to `value` (and the `extra` ones with it) on each live pod that lacks it (merge
        patch; a pod gone meanwhile is skipped). Returns the number of pods patched; nothing is sent for pods
        that already carry `key`=`value`."""
        patched = 0
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(key) == value:
                continue
            path = object_path("v1", "Pod", namespace, meta["name"])
            body = {"metadata": {"annotations": {**(extra or {}), key: value}}}
            status, _ = self._call("PATCH", path, ok=(200, 404), body=body, content_type=MERGE_PATCH)
            if status == 200:
                patched += 1
                self.stats.pod_annotations += 1
        return patched
