"""A small Kubernetes REST client (stdlib only) built from a kubeconfig: requests, and watches as streams."""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


def _material(entry: dict[str, Any], key: str, base: Path) -> bytes | None:
    """`<key>-data` (base64) or `<key>` (a path, relative to the kubeconfig) of a kubeconfig entry."""
    if f"{key}-data" in entry:
        return base64.b64decode(str(entry[f"{key}-data"]))
    if key in entry:
        return (base / str(entry[key])).read_bytes()
    return None


class KubeClient:
    """Requests to the API server named by a kubeconfig's current context (client cert or bearer token)."""

    def __init__(self, server: str, context: ssl.SSLContext, token: str | None = None, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self._context = context
        self._token = token
        self._timeout = timeout

    @classmethod
    def from_kubeconfig(cls, path: Path) -> KubeClient:
        config: dict[str, Any] = yaml.safe_load(path.read_text())
        name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        base = path.parent
        ca = _material(cluster, "certificate-authority", base)
        tls = ssl.create_default_context(cadata=ca.decode() if ca else None)
        cert, key = _material(user, "client-certificate", base), _material(user, "client-key", base)
        if cert is not None and key is not None:
            # ssl only loads key material from files: hand it one that exists only while loading.
            with tempfile.NamedTemporaryFile(suffix=".pem") as pem:
                pem.write(cert + b"\n" + key)
                pem.flush()
                tls.load_cert_chain(pem.name)
        return cls(cluster["server"], tls, user.get("token"))

    def _open(self, method: str, path: str, body: JSON | None, content_type: str, timeout: float) -> Any:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            return urllib.request.urlopen(request, context=self._context, timeout=timeout)
        except urllib.error.HTTPError as exc:
            with exc:
                raise ApiError(exc.code, exc.read().decode(errors="replace")) from None

    def request(
        self, method: str, path: str, body: JSON | None = None, *, content_type: str = "application/json"
    ) -> JSON:
        with self._open(method, path, body, content_type, self._timeout) as response:
            payload = response.read()
        result: JSON = json.loads(payload) if payload else {}
        return result

    def get(self, path: str) -> JSON | None:
        """The object at `path`, or None if it does not exist."""
        try:
            return self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def watch(self, path: str, params: dict[str, str], timeout_seconds: int) -> Iterator[JSON]:
        """Watch events (`{"type": ..., "object": ...}`) until the server ends the watch."""
        query = urllib.parse.urlencode({**params, "watch": "1", "timeoutSeconds": str(timeout_seconds)})
        with self._open("GET", f"{path}?{query}", None, "", timeout_seconds + 15) as response:
            for line in response:
                if line.strip():
                    event: JSON = json.loads(line)
                    yield event


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"
