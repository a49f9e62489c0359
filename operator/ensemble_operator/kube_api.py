"""The Kubernetes API's transport over the official client's ApiClient (kubeconfig or in-cluster auth): the only
module that imports the kubernetes library; what is asked of the API, and how, is kube.py's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .kube import KubeClient


class ApiClientTransport:
    """Transport over the official client's ApiClient (kubeconfig or in-cluster auth)."""

    def __init__(self, api_client: Any) -> None:
        self._client = api_client

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str | None = None,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        params = list((query or {}).items())
        try:
            if hasattr(self._client, "param_serialize"):  # clients built by the newer OpenAPI generator
                return self._request_v35(method, path, headers, body, params)
            data, status, _ = self._client.call_api(
                path,
                method,
                query_params=params,
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                response_type="object",
                _return_http_data_only=False,
            )
        except ApiException as exc:
            return int(exc.status), _decode(exc.body)
        return int(status), data

    def _request_v35(
        self, method: str, path: str, headers: dict[str, str], body: Any, params: list[tuple[str, str]]
    ) -> tuple[int, Any]:
        # Serialise (auth headers, query string), send, decode: the client raises on no status code.
        method, url, headers, body, _ = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(method, url, header_params=headers, body=body)
        return int(response.status), _decode(response.read())


def _decode(raw: Any) -> Any:
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def connect(pod_timeout_seconds: float, control_key: str = "", connections: int = 32) -> KubeClient:
    """A client from in-cluster config, falling back to the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = connections  # one per reconcile thread: none waits for a socket
    return KubeClient(
        ApiClientTransport(client.ApiClient(configuration)),
        pod_timeout_seconds=pod_timeout_seconds,
        control_key=control_key,
    )
