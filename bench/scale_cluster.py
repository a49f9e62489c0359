"""The operator scale benchmark's cluster side (bench/operator_scale.py): the control plane with the chart,
the operator and the pod responder as processes, and the few API calls the benchmark makes (create, wait
for Ready, watch ConfigMaps, /metrics)."""

from __future__ import annotations

import argparse
import json
import math
import os
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import yaml

from bench.scale_support import GROUP_VERSION, POD_HTTP_PORT, is_ready
from tests.infra.api import ApiError
from tests.infra.controlplane import ControlPlane, FakeNode
from tests.infra.process import ManagedProcess, http_status, poll_until
from tests.integration.operator.support import (
    ALLOWED_RUNTIME_IMAGES,
    CHART,
    OPERATOR_USER,
    RELEASE,
    RELEASE_NAMESPACE,
    SERVICE_ACCOUNT,
    Release,
    helm_values_file,
    write_webhook_tls,
)
from tests.support.ports import free_port

JSON = dict[str, Any]
REPO_ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "scale"
GROUP_PATH = f"/apis/{GROUP_VERSION}"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [{"level": "Metadata", "users": [OPERATOR_USER]}, {"level": "None"}],
}


# ---------------------------------------------------------------- processes


def operator_process(release: Release, workdir: Path, args: argparse.Namespace) -> ManagedProcess:
    """`python -m ensemble_operator` as the chart runs it (its defaults unless overridden), with its RBAC."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "ENSEMBLE_OPERATOR_"))}
    env.update(
        {
            "KUBECONFIG": str(release.kubeconfig),
            "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("contract", "operator")),
            "ENSEMBLE_OPERATOR_LOG_LEVEL": "INFO",
            "ENSEMBLE_OPERATOR_STATUS_INTERVAL_SECONDS": str(args.status_interval),
            "ENSEMBLE_OPERATOR_MODEL_SETTLE_SECONDS": str(args.model_settle),
            "ENSEMBLE_OPERATOR_POD_HTTP_TIMEOUT_SECONDS": str(args.pod_http_timeout),
            "ENSEMBLE_OPERATOR_PEERING_NAME": f"{RELEASE}-ensemble-operator",
            "ENSEMBLE_OPERATOR_PEERING_PRIORITY": "100",
            "ENSEMBLE_OPERATOR_LIVENESS_ENDPOINT": f"http://127.0.0.1:{args.health_port}/healthz",
            "ENSEMBLE_OPERATOR_WEBHOOK_ENABLED": "true" if args.webhooks == "on" else "false",
            "ENSEMBLE_OPERATOR_WEBHOOK_ADDR": "127.0.0.1",
            "ENSEMBLE_OPERATOR_WEBHOOK_PORT": str(release.webhook_port),
            "ENSEMBLE_OPERATOR_WEBHOOK_CERT_PATH": str(release.cert_path),
            "ENSEMBLE_OPERATOR_WEBHOOK_KEY_PATH": str(release.key_path),
            "ENSEMBLE_OPERATOR_ALLOWED_RUNTIME_IMAGES": json.dumps(ALLOWED_RUNTIME_IMAGES),
            "ENSEMBLE_OPERATOR_CONTROL_KEY": "scale-benchmark-key",
        }
    )
    argv = [sys.executable, "-m", "ensemble_operator"]
    return ManagedProcess("operator", argv, workdir / "operator.log", env=env, cwd=REPO_ROOT)


def start_operator(proc: ManagedProcess, health_port: int) -> None:
    proc.start()
    poll_until(
        lambda: http_status(f"http://127.0.0.1:{health_port}/healthz") == 200,
        timeout=120,
        what="the operator to answer /healthz",
        alive=[proc],
        detail=lambda: proc.log_tail(60),
    )


def pod_responder(workdir: Path) -> ManagedProcess:
    """One real runtime answering on 0.0.0.0:8000, so every pod IP on loopback answers the probes."""
    repository = workdir / "empty-repository"
    repository.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("contract", "runtime"))}
    argv = [
        sys.executable, "-m", "ensemble_runtime", f"--model-repository={repository}",
        "--http-address=0.0.0.0", f"--http-port={POD_HTTP_PORT}",
        "--grpc-address=127.0.0.1", f"--grpc-port={free_port()}",
        "--metrics-address=127.0.0.1", f"--metrics-port={free_port()}",
    ]  # fmt: skip
    return ManagedProcess("pod-responder", argv, workdir / "pod-responder.log", env=env)


# ---------------------------------------------------------------- API helpers


class Api:
    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.context: ssl.SSLContext = cp.api_client.ready_context

    def request(self, method: str, path: str, body: JSON | None = None) -> JSON:
        return self.cp.api(method, path, body)

    def merge_patch(self, path: str, patch: JSON) -> None:
        request = urllib.request.Request(
            self.cp.api_url + path,
            data=json.dumps(patch).encode(),
            method="PATCH",
            headers={"Content-Type": "application/merge-patch+json", "Accept": "application/json"},
        )
        with urllib.request.urlopen(request, context=self.context, timeout=30) as response:
            response.read()

    def metrics(self) -> str:
        with urllib.request.urlopen(self.cp.api_url + "/metrics", context=self.context, timeout=30) as response:
            text: str = response.read().decode()
            return text

    def ensembles(self) -> list[JSON]:
        items: list[JSON] = self.request("GET", f"{GROUP_PATH}/namespaces/{NAMESPACE}/ensembles")["items"]
        return items


def create_all(api: Api, path: str, docs: Sequence[JSON], deadline: float, workers: int = 4) -> JSON:
    """POST every document (through the admission webhooks), a few at a time; a refusal the API server
    gives for a webhook it could not call in time (HTTP 5xx) is retried, as a user would, until `deadline`
    (monotonic). Returns how many were created, how many attempts were refused, and the last refusal."""
    refused: list[str] = []
    lock = threading.Lock()

    def create(doc: JSON) -> bool:
        while True:
            try:
                api.request("POST", path, doc)
                return True
            except (ApiError, OSError) as exc:
                if isinstance(exc, ApiError) and exc.status == 409:
                    return True
                if isinstance(exc, ApiError) and exc.status < 500:
                    raise
                with lock:
                    refused.append(str(exc)[:300])
                if time.monotonic() >= deadline:
                    return False
                time.sleep(1.0)

    with ThreadPoolExecutor(workers) as pool:
        created = sum(pool.map(create, docs))
    return {"created": created, "refused_attempts": len(refused), "last_refusal": refused[-1] if refused else None}


def wait_ready(api: Api, names: set[str], timeout: float) -> tuple[float | None, int]:
    """Seconds until every Ensemble in `names` is Ready (None on timeout) and how many were."""
    started = time.monotonic()
    while True:
        ready = sum(1 for e in api.ensembles() if e["metadata"]["name"] in names and is_ready(e))
        if ready == len(names):
            return time.monotonic() - started, ready
        if time.monotonic() - started >= timeout:
            return None, ready
        time.sleep(2.0)


class ConfigMapWatch:
    """A watch on the namespace's ConfigMaps: (time received, owning Ensemble, repository.json) per change."""

    def __init__(self, api: Api) -> None:
        self._api = api
        listing = api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/configmaps")
        self._version = listing["metadata"]["resourceVersion"]
        self.current: dict[str, str] = {}
        for item in listing["items"]:
            owner = _owner(item)
            if owner:
                self.current[owner] = (item.get("data") or {}).get("repository.json", "")
        self.events: list[tuple[float, str, str]] = []
        self._lock = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConfigMapWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop = True

    def _run(self) -> None:
        url = (
            f"{self._api.cp.api_url}/api/v1/namespaces/{NAMESPACE}/configmaps"
            f"?watch=1&resourceVersion={self._version}&timeoutSeconds=3600"
        )
        with urllib.request.urlopen(url, context=self._api.context, timeout=3600) as stream:
            for line in stream:
                if self._stop:
                    return
                event = json.loads(line)
                obj = event.get("object") or {}
                owner = _owner(obj)
                if owner is None or event.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                text = (obj.get("data") or {}).get("repository.json", "")
                with self._lock:
                    if self.current.get(owner) != text:
                        self.current[owner] = text
                        self.events.append((time.time(), owner, text))
                        self._lock.notify_all()

    def wait_changed(self, owners: set[str], since: float, timeout: float) -> dict[str, float] | None:
        """Epoch time of each of `owners`' first repository.json change after `since` (None: timed out)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                seen = {o: t for t, o, _ in reversed(self.events) if t >= since and o in owners}
                if len(seen) == len(owners):
                    return seen
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._lock.wait(min(left, 1.0))

    def owners(self) -> set[str]:
        with self._lock:
            return set(self.current)

    def changed_between(self, start: float, end: float) -> set[str]:
        with self._lock:
            return {o for t, o, _ in self.events if start <= t < end}


def _owner(obj: JSON) -> str | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Ensemble":
            return str(ref.get("name"))
    return None


# ---------------------------------------------------------------- setup


@contextmanager
def cluster(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[ControlPlane, Release]]:
    policy = workdir / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump(AUDIT_POLICY))
    pods = args.ensembles * (args.replicas + 1)
    per_node = 250
    nodes = [
        FakeNode(name=f"kwok-{i}", capacity={"cpu": "1000", "memory": "4000Gi", "pods": str(per_node)})
        for i in range(max(1, math.ceil(pods / per_node)))
    ]
    with ExitStack() as stack:
        cp = stack.enter_context(
            ControlPlane(
                nodes=nodes,
                workdir=workdir / "controlplane",
                crds=sorted((CHART / "crds").glob("*.yaml")),
                pod_cidr=args.pod_cidr,
                extra_apiserver_args=[
                    f"--audit-policy-file={policy}",
                    f"--audit-log-path={workdir / 'audit.log'}",
                    "--audit-log-mode=blocking",
                    "--audit-log-format=json",
                    # One ClusterIP per Ensemble: the control plane's /24 holds 254, too few for 300 Ensembles.
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--max-requests-inflight=800",
                    "--max-mutating-requests-inflight=400",
                ],
            )
        )
        port = free_port()
        values = helm_values_file(
            workdir / "release", Release.values(port, enabled=args.webhooks == "on")
        )
        cp.helm(
            "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
            "-f", str(values), "--wait", "--timeout", "300s", "--skip-crds",
        )  # fmt: skip
        tls = workdir / "release" / "tls"
        cert, key = write_webhook_tls(cp, tls) if args.webhooks == "on" else (tls / "none.crt", tls / "none.key")
        kubeconfig = cp.service_account_kubeconfig(
            RELEASE_NAMESPACE, SERVICE_ACCOUNT, path=workdir / "release" / "sa.kubeconfig", expiration_seconds=86400
        )
        cp.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        poll_until(lambda: cp.api_client.exists(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
                   timeout=120, what="the namespace's default ServiceAccount")
        yield cp, Release(webhook_port=port, cert_path=cert, key_path=key, kubeconfig=kubeconfig)
