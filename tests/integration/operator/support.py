"""Helpers for the operator's control-plane tests: the chart release, the operator as a local process,
the API server's audit log, and manifests derived from examples/manifests/."""

from __future__ import annotations

import base64
import copy
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.infra.api import ApiError
from tests.infra.controlplane import ControlPlane
from tests.infra.process import ManagedProcess, http_status, poll_until
from tests.support.ports import free_port

JSON = dict[str, Any]
T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[3]
CHART = REPO_ROOT / "charts" / "ensemble-operator"
EXAMPLES = REPO_ROOT / "examples" / "manifests"
GROUP_PATH = "/apis/serving.ensemble.dev/v1alpha1"

RELEASE = "ens"
RELEASE_NAMESPACE = "ensemble-system"
FULLNAME = f"{RELEASE}-ensemble-operator"  # the chart's fullname for this release
SERVICE_ACCOUNT = FULLNAME
OPERATOR_USER = f"system:serviceaccount:{RELEASE_NAMESPACE}:{SERVICE_ACCOUNT}"

# Only the operator's requests are recorded; everything else is left out of the log.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [
        {
            "level": "Metadata",
            "users": [OPERATOR_USER],
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
        },
        # Its reads too (GET, LIST, WATCH): tests count what an idle operator asks, and its full reconciles
        # (each reads the Deployment).
        {"level": "Metadata", "users": [OPERATOR_USER]},
        {"level": "None"},
    ],
}
ALLOWED_RUNTIME_IMAGES = ["ghcr.io/ensemble-operator/ensemble-runtime", "registry.invalid/runtime"]
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 60.0, **kwargs: Any) -> T:
    """Poll `probe` until it returns something truthy (a deadline, never a bare sleep)."""
    return poll_until(probe, timeout=timeout, what=what, interval=0.2, **kwargs)


# ---------------------------------------------------------------- cluster objects


def new_namespace(cp: ControlPlane, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cp.api("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # Pods need the namespace's default ServiceAccount, which the controller-manager creates.
    wait_for(lambda: cp.api_client.exists(f"/api/v1/namespaces/{name}/serviceaccounts/default"), "default SA")
    return name


def get(cp: ControlPlane, path: str) -> JSON | None:
    try:
        return cp.api("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def ensemble(cp: ControlPlane, ns: str, name: str) -> JSON | None:
    return get(cp, f"{GROUP_PATH}/namespaces/{ns}/ensembles/{name}")


def condition(obj: JSON | None, kind: str) -> JSON | None:
    for cond in ((obj or {}).get("status") or {}).get("conditions", []):
        if cond.get("type") == kind:
            return dict(cond)
    return None


def apply(cp: ControlPlane, ns: str, *docs: JSON, check: bool = True) -> Any:
    """`kubectl apply` of `docs` (as a user would), returning the completed process."""
    text = yaml.safe_dump_all(list(docs))
    return cp.kubectl("apply", "-n", ns, "-f", "-", input=text, check=check)


def example_models() -> list[JSON]:
    return [d for d in yaml.safe_load_all((EXAMPLES / "models.yaml").read_text()) if d]


def example_ensemble() -> JSON:
    doc: JSON = yaml.safe_load((EXAMPLES / "ensemble.yaml").read_text())
    return doc


def gpu_ensemble(name: str) -> JSON:
    """The example, with one replica (the only GPU node has one GPU) and no autoscaler."""
    doc = copy.deepcopy(example_ensemble())
    doc["metadata"]["name"] = name
    doc["spec"]["replicas"] = 1
    del doc["spec"]["autoscaling"]
    return doc


def cpu_ensemble(name: str, replicas: int = 2, image: str | None = None) -> JSON:
    """The example without GPUs, so that replicas and surge pods fit on the fake nodes."""
    doc = gpu_ensemble(name)
    doc["spec"]["replicas"] = replicas
    doc["spec"]["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}}
    del doc["spec"]["scheduling"]
    if image is not None:
        doc["spec"]["runtime"]["image"] = image
    return doc


# ---------------------------------------------------------------- audit log


@dataclass(frozen=True)
class AuditLog:
    path: Path

    def events(self) -> list[JSON]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def mark(self) -> int:
        return len(self.events())

    def since(self, mark: int, namespace: str | None, *, writes: bool) -> list[JSON]:
        """The operator's events (writes, or else reads) in `namespace` (None: anywhere) after `mark`."""
        return [
            e
            for e in self.events()[mark:]
            if e.get("user", {}).get("username") == OPERATOR_USER
            and (namespace is None or e.get("objectRef", {}).get("namespace") == namespace)
            and (e.get("verb") in WRITE_VERBS) == writes
        ]

    def deployment_reads(self, mark: int, namespace: str) -> list[JSON]:
        """The operator's GETs of Deployments in `namespace` after `mark`: one per full reconcile."""
        return [
            e
            for e in self.since(mark, namespace, writes=False)
            if e.get("verb") == "get" and e.get("objectRef", {}).get("resource") == "deployments"
        ]


def epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def describe(event: JSON) -> str:
    ref = event.get("objectRef", {})
    where = "/".join(
        str(x) for x in (ref.get("namespace"), ref.get("resource"), ref.get("name"), ref.get("subresource")) if x
    )
    return f"{event.get('verb')} {where} ({event.get('userAgent', '')})"


# ---------------------------------------------------------------- the chart release


@dataclass(frozen=True)
class Release:
    """The chart installed with its webhook called at https://127.0.0.1:<webhook_port>."""

    webhook_port: int
    cert_path: Path
    key_path: Path
    kubeconfig: Path  # acting as the chart's ServiceAccount

    @staticmethod
    def values(webhook_port: int, **webhook: Any) -> JSON:
        return {
            "replicaCount": 1,
            "webhook": {"url": f"https://127.0.0.1:{webhook_port}", **webhook},
        }


def helm_values_file(directory: Path, values: Mapping[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"values-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    return path


def write_webhook_tls(cp: ControlPlane, directory: Path) -> tuple[Path, Path]:
    """The chart-generated serving certificate and key, where the local operator can read them."""
    secret = cp.api("GET", f"/api/v1/namespaces/{RELEASE_NAMESPACE}/secrets/{FULLNAME}-webhook-tls")
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    key.write_bytes(base64.b64decode(secret["data"]["tls.key"]))
    key.chmod(0o600)
    return cert, key


# ---------------------------------------------------------------- the operator as a local process


class OperatorProcess:
    """`python -m ensemble_operator`, configured as the chart configures it, with the chart's RBAC."""

    def __init__(
        self,
        name: str,
        release: Release,
        workdir: Path,
        *,
        priority: int,
        webhook: bool = True,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.health_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "ENSEMBLE_OPERATOR_"))}
        env.update(
            {
                "KUBECONFIG": str(release.kubeconfig),
                "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("contract", "operator", ".")),
                "ENSEMBLE_OPERATOR_LOG_LEVEL": "INFO",
                "ENSEMBLE_OPERATOR_STATUS_INTERVAL_SECONDS": "2",
                # a full reconcile (reading the owned objects) this often: tests count them by Deployment reads
                "ENSEMBLE_OPERATOR_RESYNC_INTERVAL_SECONDS": "2",
                "ENSEMBLE_OPERATOR_POD_HTTP_TIMEOUT_SECONDS": "0.2",  # kwok pod IPs answer nothing
                "ENSEMBLE_OPERATOR_PEERING_NAME": FULLNAME,
                "ENSEMBLE_OPERATOR_PEERING_PRIORITY": str(priority),
                "ENSEMBLE_OPERATOR_LIVENESS_ENDPOINT": f"http://127.0.0.1:{self.health_port}/healthz",
                "ENSEMBLE_OPERATOR_WEBHOOK_ENABLED": "true" if webhook else "false",
                "ENSEMBLE_OPERATOR_WEBHOOK_ADDR": "127.0.0.1",
                "ENSEMBLE_OPERATOR_WEBHOOK_PORT": str(release.webhook_port),
                "ENSEMBLE_OPERATOR_WEBHOOK_CERT_PATH": str(release.cert_path),
                "ENSEMBLE_OPERATOR_WEBHOOK_KEY_PATH": str(release.key_path),
                # The default image's repository and the one the rollout test switches to.
                "ENSEMBLE_OPERATOR_ALLOWED_RUNTIME_IMAGES": json.dumps(ALLOWED_RUNTIME_IMAGES),
                # as the chart's control-key Secret does: runtime pods' control APIs behind per-Ensemble tokens
                "ENSEMBLE_OPERATOR_CONTROL_KEY": "integration-test-operator-key",
                **{f"ENSEMBLE_OPERATOR_{k.upper()}": v for k, v in (settings or {}).items()},
            }
        )
        self.process = ManagedProcess(
            name, [sys.executable, "-m", "ensemble_operator"], workdir / f"{name}.log", env=env, cwd=REPO_ROOT
        )

    @property
    def log_path(self) -> Path:
        return self.process.log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def start(self, timeout: float = 60.0) -> None:
        self.process.start()
        wait_for(
            lambda: http_status(f"http://127.0.0.1:{self.health_port}/healthz") == 200,
            f"operator {self.name} to answer /healthz",
            timeout=timeout,
            alive=[self.process],
            detail=lambda: self.process.log_tail(60),
        )

    def stop(self) -> None:
        self.process.stop(timeout=20.0)

    def reconciled(self, ns: str, name: str) -> bool:
        """Whether this process's log shows it reconciling (writing for) Ensemble ns/name."""
        return f"Ensemble {ns}/{name} reconciled:" in self.log()

    def lines_since(self, offset: int) -> Iterator[str]:
        yield from self.log()[offset:].splitlines()


def monotonic_deadline(seconds: float) -> float:
    return time.monotonic() + seconds


def wait_ensemble(
    cp: ControlPlane, ns: str, name: str, predicate: Callable[[JSON], bool], what: str, timeout: float = 60.0
) -> JSON:
    """Poll the Ensemble until `predicate(obj)` holds; the last status is in the timeout message."""
    last: list[JSON | None] = [None]

    def probe() -> JSON | None:
        obj = last[0] = ensemble(cp, ns, name)
        return obj if obj is not None and predicate(obj) else None

    return wait_for(
        probe,
        f"Ensemble {ns}/{name}: {what}",
        timeout=timeout,
        detail=lambda: json.dumps((last[0] or {}).get("status")),
    )


def phase_is(phase: str) -> Callable[[JSON], bool]:
    def check(obj: JSON) -> bool:
        status = obj.get("status") or {}
        return bool(status.get("phase") == phase and status.get("observedGeneration") == obj["metadata"]["generation"])

    return check


def namespace_with(cp: ControlPlane, prefix: str, *ensembles: JSON) -> str:
    """A fresh namespace holding the example Models (and their Secret), then `ensembles`."""
    ns = new_namespace(cp, prefix)
    apply(cp, ns, *example_models())
    if ensembles:
        apply(cp, ns, *ensembles)
    return ns
