"""An in-memory API server transport for KubeClient tests (apply, merge-patch, get, list, delete)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any


class FakeApi:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.posted: list[Any] = []  # bodies of POSTs (e.g. Events), in order
        self.terminating: set[str] = set()  # namespaces being deleted: new objects there are refused
        self._version = 0

    def put(self, path: str, obj: dict[str, Any]) -> None:
        self.objects[path] = copy.deepcopy(obj)
        self.bump(self.objects[path])

    def bump(self, obj: dict[str, Any]) -> None:
        """A write: the object's resourceVersion moves on (one counter for all objects, as etcd's)."""
        self._version += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        self.requests.append((method, path))
        if method == "GET":
            if path in self.objects:
                return 200, copy.deepcopy(self.objects[path])
            if _is_object_path(path):
                return 404, {"reason": "NotFound"}
            prefix = path + "/"
            items = [
                copy.deepcopy(o)
                for p, o in sorted(self.objects.items())
                if p.startswith(prefix) and "/" not in p[len(prefix) :] and _matches(o, query)
            ]
            return 200, {"items": items}
        if method == "PATCH" and path.endswith("/status"):
            obj = self.objects[path.removesuffix("/status")]
            expected = (body.get("metadata") or {}).get("resourceVersion")
            if expected is not None and expected != obj["metadata"].get("resourceVersion"):
                return 409, {"reason": "Conflict"}  # written since the patch's sender read it
            self.bump(obj)
            status = obj.setdefault("status", {})
            for k, v in body["status"].items():
                if v is None:
                    status.pop(k, None)
                else:
                    status[k] = v
            return 200, copy.deepcopy(obj)
        if method == "PATCH" and content_type == "application/merge-patch+json":
            if path not in self.objects:
                return 404, {"reason": "NotFound"}
            _merge(self.objects[path], body)
            return 200, copy.deepcopy(self.objects[path])
        if method == "PATCH":
            assert content_type == "application/apply-patch+yaml"
            assert query == {"fieldManager": "ensemble-operator", "force": "true"}
            self.objects[path] = json.loads(body)
            return 200, self.objects[path]
        if method == "DELETE":
            return (200, self.objects.pop(path)) if path in self.objects else (404, None)
        if method == "POST":
            namespace = path.split("/namespaces/", 1)[1].split("/", 1)[0] if "/namespaces/" in path else ""
            if namespace in self.terminating:  # the API server's NamespaceLifecycle admission
                return 403, {"reason": "Forbidden", "message": f"unable to create new content in namespace "
                             f"{namespace} because it is being terminated"}
            self.posted.append(body)
            return 201, body
        raise AssertionError(f"unexpected {method} {path}")


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386 merge patch: objects merge, null removes, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _is_object_path(path: str) -> bool:
    parts = path.strip("/").split("/")
    return len(parts) == (6 if parts[0] == "api" else 7)


def _matches(obj: dict[str, Any], query: Mapping[str, str] | None) -> bool:
    if not query or "labelSelector" not in query:
        return True
    labels = obj.get("metadata", {}).get("labels", {})
    return all(
        labels.get(k) == v for k, v in (pair.split("=", 1) for pair in query["labelSelector"].split(","))
    )


def observe(api: FakeApi, ensemble: Mapping[str, Any]) -> Any:
    """What the operator's watches would hold for `ensemble` (its Models, Deployment, pods), read from `api`
    as the indexes would (reconcile.Observed)."""
    from ensemble_operator.reconcile import Observed, model_names
    from ensemble_operator.render.common import ENSEMBLE_LABEL

    ns, name = ensemble["metadata"]["namespace"], ensemble["metadata"]["name"]
    models = {
        m: copy.deepcopy(api.objects[p])
        for m in model_names(ensemble)
        if (p := f"/apis/serving.ensemble.dev/v1alpha1/namespaces/{ns}/models/{m}") in api.objects
    }
    deployment = api.objects.get(f"/apis/apps/v1/namespaces/{ns}/deployments/{name}")
    prefix = f"/api/v1/namespaces/{ns}/pods/"
    pods = [
        copy.deepcopy(o)
        for p, o in sorted(api.objects.items())
        if p.startswith(prefix) and (o["metadata"].get("labels") or {}).get(ENSEMBLE_LABEL) == name
    ]
    return Observed(models, copy.deepcopy(deployment), pods)


def reconcile(rec: Any, api: FakeApi, body: Mapping[str, Any], *, fresh: bool = False) -> str:
    """One reconcile of the Ensemble `body` from what `api` holds; returns the phase."""
    return str(rec.ensemble(body, observe(api, body), fresh=fresh).phase)
