"""ConfigMap and Secret contents as the kubelet sees them (decoded), and field paths of a pod."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from .api import JSON, KubeClient


class ConfigError(RuntimeError):
    """A container or volume refers to something missing (kubelet: CreateContainerConfigError)."""


class Objects:
    """Reads ConfigMaps and Secrets of a namespace; values as bytes (ConfigMap data is UTF-8 encoded)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def config_map(self, namespace: str, name: str) -> dict[str, bytes] | None:
        obj = self._client.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
        if obj is None:
            return None
        data = {k: v.encode() for k, v in (obj.get("data") or {}).items()}
        data.update({k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()})
        return data

    def secret(self, namespace: str, name: str) -> dict[str, bytes] | None:
        obj = self._client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if obj is None:
            return None
        return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}

    def source(self, kind: str, namespace: str, name: str, optional: bool) -> dict[str, bytes]:
        """A ConfigMap's (`kind="configMap"`) or Secret's data; {} if missing and optional."""
        data = self.config_map(namespace, name) if kind == "configMap" else self.secret(namespace, name)
        if data is None:
            if optional:
                return {}
            raise ConfigError(f'{kind} "{name}" not found')
        return data

    def key(self, kind: str, namespace: str, ref: JSON) -> bytes | None:
        """The value of a configMapKeyRef/secretKeyRef; None if missing and optional."""
        data = self.source(kind, namespace, ref["name"], bool(ref.get("optional")))
        if ref["key"] not in data:
            if ref.get("optional"):
                return None
            raise ConfigError(f'key "{ref["key"]}" not found in {kind} "{ref["name"]}"')
        return data[ref["key"]]

    def service_account_token(self, pod: JSON, audience: str | None, expiration_seconds: int) -> str:
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        body: JSON = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": expiration_seconds,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]},
                **({"audiences": [audience]} if audience else {}),
            },
        }
        path = f"/api/v1/namespaces/{meta['namespace']}/serviceaccounts/{account}/token"
        token: str = self._client.request("POST", path, body)["status"]["token"]
        return token


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: JSON, field_path: str, pod_ip: str, host_ip: str) -> str:
    """A downward API fieldRef (the paths kubelet supports)."""
    meta, spec = pod["metadata"], pod["spec"]
    simple: dict[str, Any] = {
        "metadata.name": meta["name"],
        "metadata.namespace": meta["namespace"],
        "metadata.uid": meta["uid"],
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if field_path in simple:
        return str(simple[field_path])
    if field_path in ("metadata.labels", "metadata.annotations"):
        values = meta.get(field_path.split(".")[1]) or {}
        return "\n".join(f"{k}={json.dumps(v)}" for k, v in sorted(values.items()))
    match = _SUBSCRIPT.match(field_path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"unsupported fieldRef {field_path!r}")
