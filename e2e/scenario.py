"""End-to-end helpers: the example repository in MinIO and what the scenario and rollover tests do with a
stack (`e2e.real_stack`): apply manifests with kubectl, wait on Ensemble conditions, read the endpoints a
client would use, and check that deleting an Ensemble leaves nothing behind.

The Ensemble helpers are the operator integration tests' (`tests.integration.operator.support`).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml
from ensemble_examples.repository import build_repository

from tests.infra.controlplane import ControlPlane
from tests.integration.operator.support import GROUP_PATH, condition, ensemble, get, wait_for

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

JSON = dict[str, Any]
BUCKET = "models"
COMPLETE_MARKER = ".complete"
RESULTS = Path(__file__).resolve().parent / "results"
ENSEMBLE_LABEL = "serving.ensemble.dev/ensemble"


# ---------------------------------------------------------------- storage


def upload_tree(s3: S3Client, root: Path, *, markers: bool = True) -> int:
    """Every file under `root` to `models/<relative path>`, then a `.complete` marker in each version
    directory (`<model>/<digits>/`), markers last. Returns the number of objects written."""
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        s3.put_object(Bucket=BUCKET, Key=path.relative_to(root).as_posix(), Body=path.read_bytes())
    versions = sorted({p.relative_to(root).parts[:2] for p in files if len(p.relative_to(root).parts) > 2})
    version_dirs = [parts for parts in versions if parts[1].isdigit()]
    if markers:
        for model, version in version_dirs:
            s3.put_object(Bucket=BUCKET, Key=f"{model}/{version}/{COMPLETE_MARKER}", Body=b"")
    return len(files) + (len(version_dirs) if markers else 0)


def upload_example_repository(s3: S3Client, workdir: Path) -> int:
    s3.create_bucket(Bucket=BUCKET)
    root = workdir / "repository"
    build_repository(root)
    return upload_tree(s3, root)


class Cluster(Protocol):
    """What the helpers below need of a stack: its control plane and what to print when a wait fails."""

    cp: ControlPlane

    def diagnostics(self, ns: str, name: str) -> str: ...


# ---------------------------------------------------------------- kubectl and the API


class _QuotingDumper(yaml.SafeDumper):
    """Every string double-quoted: kubectl reads YAML 1.1, where a bare `Y` (a tensor name) is a boolean."""


_QuotingDumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style='"'))


def kubectl_apply(cp: ControlPlane, ns: str, docs: Iterable[JSON], workdir: Path, *, check: bool = True) -> Any:
    """`kubectl apply -f <file>` of `docs`, written to a file in `workdir` as a user would."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=workdir, delete=False) as handle:
        yaml.dump_all(list(docs), handle, Dumper=_QuotingDumper)
    return cp.kubectl("apply", "-n", ns, "-f", handle.name, check=check)


def pods_of(cp: ControlPlane, ns: str, name: str) -> list[JSON]:
    pods: list[JSON] = cp.api("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector={ENSEMBLE_LABEL}%3D{name}")[
        "items"
    ]
    return pods


def live_pods(cp: ControlPlane, ns: str, name: str) -> list[JSON]:
    return [p for p in pods_of(cp, ns, name) if not p["metadata"].get("deletionTimestamp")]


def restart_counts(pods: Iterable[JSON]) -> dict[str, int]:
    """uid -> restartCount of the runtime container."""
    counts: dict[str, int] = {}
    for pod in pods:
        for status in pod.get("status", {}).get("containerStatuses", []):
            if status["name"] == "runtime":
                counts[pod["metadata"]["uid"]] = int(status.get("restartCount", 0))
    return counts


def ready_endpoints(cp: ControlPlane, ns: str, name: str) -> list[str]:
    """The addresses of the Ensemble's headless Service a client should call, from its EndpointSlices
    (sorted). That Service publishes not-ready addresses (for per-pod DNS), so `ready` is true for every
    pod; `serving` is the pod's readiness and `terminating` marks pods being deleted."""
    slices = cp.api(
        "GET",
        f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
        f"?labelSelector=kubernetes.io%2Fservice-name%3D{name}-pods",
    )["items"]
    addresses = {
        address
        for s in slices
        for endpoint in s.get("endpoints") or []
        if _serving(endpoint.get("conditions") or {})
        for address in endpoint.get("addresses", [])
    }
    return sorted(addresses)


def _serving(conditions: JSON) -> bool:
    return bool(conditions.get("serving", conditions.get("ready"))) and not conditions.get("terminating", False)


def is_ready(obj: JSON) -> bool:
    """Ready=True for the current generation with every desired replica ready."""
    cond = condition(obj, "Ready") or {}
    return bool(
        cond.get("status") == "True"
        and cond.get("reason") == "AllReplicasReady"
        and (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]
    )


def wait_ensemble(
    stack: Cluster, ns: str, name: str, predicate: Callable[[JSON], bool], what: str, timeout: float = 120.0
) -> JSON:
    def probe() -> JSON | None:
        obj = ensemble(stack.cp, ns, name)
        return obj if obj is not None and predicate(obj) else None

    return wait_for(probe, f"Ensemble {ns}/{name}: {what}", timeout=timeout, detail=lambda: stack.diagnostics(ns, name))


def owned_paths(ns: str, name: str) -> Mapping[str, str]:
    """What the operator creates for an Ensemble `name` (the HPA only with autoscaling, so not here)."""
    return {
        "Deployment": f"/apis/apps/v1/namespaces/{ns}/deployments/{name}",
        "Service": f"/api/v1/namespaces/{ns}/services/{name}",
        "headless Service": f"/api/v1/namespaces/{ns}/services/{name}-pods",
        "PodDisruptionBudget": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}",
        "ConfigMap": f"/api/v1/namespaces/{ns}/configmaps/{name}-repository",
    }


def delete_and_wait_gone(stack: Cluster, ns: str, name: str, timeout: float = 240.0) -> float:
    """`kubectl delete ensemble`, then wait until the Ensemble and everything it made (objects and pods) are
    gone; returns the seconds that took. The garbage collector does the deleting: usually 6 s here, once 66 s
    (the timeout leaves room for that; the figure goes to the results)."""
    for what, path in owned_paths(ns, name).items():
        assert get(stack.cp, path) is not None, f"{what} of {name} missing before the deletion"
    started = time.monotonic()
    stack.cp.kubectl("delete", "-n", ns, "ensemble", name, "--wait=false")

    def leftovers() -> list[str]:
        left = [what for what, path in owned_paths(ns, name).items() if get(stack.cp, path) is not None]
        left += [f"pod {p['metadata']['name']}" for p in pods_of(stack.cp, ns, name)]
        if get(stack.cp, f"{GROUP_PATH}/namespaces/{ns}/ensembles/{name}") is not None:
            left.append("the Ensemble")
        return left

    last: list[list[str]] = [[]]

    def gone() -> bool:
        last[0] = leftovers()
        return not last[0]

    wait_for(gone, f"everything of {ns}/{name} to be deleted", timeout=timeout, detail=lambda: f"left: {last[0]}")
    return time.monotonic() - started


def record(filename: str, key: str, value: Any) -> None:
    """Merge `{key: value}` into `e2e/results/<filename>` (JSON), so reruns of one test keep the others'."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / filename
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = value
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
