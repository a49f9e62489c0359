"""A minimal JSON client for the Kubernetes REST API (stdlib only), used by the fixtures themselves."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

JSON = dict[str, Any]


class ApiError(RuntimeError):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class KubeApi:
    """Requests to one API server, as a client certificate's user or with a bearer token."""

    def __init__(self, url: str, ca_cert: Path, client_cert: Path, client_key: Path) -> None:
        self.url = url
        self._ca_cert = ca_cert
        self._cert_context = ssl.create_default_context(cafile=str(ca_cert))
        self._cert_context.load_cert_chain(str(client_cert), str(client_key))

    def request(self, method: str, path: str, body: JSON | None = None, *, token: str | None = None) -> JSON:
        """One request; JSON in, JSON out; `ApiError` for HTTP errors."""
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        context = self._cert_context
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
            context = ssl.create_default_context(cafile=str(self._ca_cert))
        request = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, exc.read().decode(errors="replace")) from None
        result: JSON = json.loads(payload) if payload else {}
        return result

    def exists(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    @property
    def ready_context(self) -> ssl.SSLContext:
        """TLS context (admin client cert) for probing /readyz."""
        return self._cert_context
