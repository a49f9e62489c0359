"""What the runtime pods report about themselves, over HTTP (GET /v2/ensembles/<name>/versions,
GET /v2/repository/status, POST /v2/repository/index).

The calls go out concurrently from one bounded pool shared by every reconcile, and all calls of one reconcile
end within a time budget: a pod that does not answer in time is unknown for this round, never a reconcile
held for seconds per pod.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from .render.common import HTTP_PORT, Manifest
from .render.control import control_headers
from .status import PodReport, config_digest_of, failed_versions, found_versions, pod_problem, storage_problem

HttpGet = Callable[[str, float, Mapping[str, str]], Any]  # (url, timeout, headers)
HttpPost = Callable[[str, bytes, float, Mapping[str, str]], Any]
PROBE_CONCURRENCY = 16  # HTTP calls to runtime pods in flight at once, over all Ensembles


def http_get_json(url: str, timeout: float, headers: Mapping[str, str]) -> Any:
    request = urllib.request.Request(url, headers=dict(headers), method="GET")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def http_post_json(url: str, body: bytes, timeout: float, headers: Mapping[str, str]) -> Any:
    request = urllib.request.Request(
        url, data=body, headers={**headers, "Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


class PodProber:
    def __init__(
        self,
        http_get: HttpGet = http_get_json,
        http_post: HttpPost = http_post_json,
        timeout_seconds: float = 2.0,
        control_key: str = "",
        budget_seconds: float | None = None,
        concurrency: int = PROBE_CONCURRENCY,
    ) -> None:
        self._http_get = http_get
        self._http_post = http_post
        self._pod_timeout = timeout_seconds
        # All probes of one reconcile end within this (default: two rounds of timeouts); late answers are unknown.
        self._probe_budget = budget_seconds if budget_seconds is not None else 2.0 * timeout_seconds
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="pod-probe")
        self._control_key = control_key  # derives each Ensemble's pod control token (render/control.py)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def reports(self, namespace: str, ensemble: str, pods: Sequence[Manifest]) -> list[PodReport]:
        """Readiness, served versions (GET /v2/ensembles/<name>/versions), storage reachability and the
        versions found in storage (GET /v2/repository/status) and versions that failed to load
        (POST /v2/repository/index) of the runtime pods. The calls go out concurrently (a bounded pool shared by
        all reconciles) and all end within the probe budget; what a pod does not answer in time stays unknown
        (None / empty)."""
        headers = control_headers(self._control_key, namespace, ensemble)
        calls: list[tuple[Future[Any], Future[Any], Future[Any]] | None] = []
        for pod in pods:
            ip = pod.get("status", {}).get("podIP")
            if not (_pod_ready(pod) and ip):
                calls.append(None)
                continue
            base = f"http://{ip}:{HTTP_PORT}"
            calls.append(
                (
                    self._pool.submit(
                        self._http_get, f"{base}/v2/ensembles/{ensemble}/versions", self._pod_timeout, headers
                    ),
                    self._pool.submit(self._http_get, f"{base}/v2/repository/status", self._pod_timeout, headers),
                    self._pool.submit(
                        self._http_post, f"{base}/v2/repository/index", b"{}", self._pod_timeout, headers
                    ),
                )
            )
        pending = [f for trio in calls if trio is not None for f in trio]
        if pending:
            _, late = wait_futures(pending, timeout=self._probe_budget)
            for future in late:
                future.cancel()
        reports: list[PodReport] = []
        for pod, trio in zip(pods, calls, strict=True):
            versions: dict[str, int] | None = None
            storage: str | None = None
            found: dict[str, tuple[int, ...]] | None = None
            digest: str | None = None
            failures: tuple[str, ...] = ()
            if trio is not None:
                doc = _answer(trio[0])
                try:
                    versions = None if doc is None else {str(k): int(v) for k, v in doc.get("versions", {}).items()}
                except _POD_ERRORS:
                    versions = None
                doc = _answer(trio[1])
                if doc is not None:
                    storage, found, digest = storage_problem(doc), found_versions(doc), config_digest_of(doc)
                index = _answer(trio[2])
                failures = failed_versions(index) if index is not None else ()
            reports.append(
                PodReport(
                    pod["metadata"]["name"], _pod_ready(pod), versions, pod_problem(pod), storage, failures, found,
                    digest,
                )
            )
        return reports


def _pod_ready(pod: Manifest) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _answer(future: Future[Any]) -> Any:
    """A probe's answer; None when it failed, was cancelled or is still running (past the budget)."""
    if not future.done() or future.cancelled():
        return None
    try:
        return future.result(timeout=0)
    except Exception:  # a pod that answers nonsense or nothing is unknown, never a failed reconcile
        return None


_POD_ERRORS = (OSError, ValueError, AttributeError, TypeError, KeyError)


