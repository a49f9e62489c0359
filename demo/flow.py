"""The demo's stages after the cluster is up: publish the trained example models, install the operator, deploy
Models and Ensembles and watch them become Ready, run the example client in the cluster, roll a new model
version in under load, clean up. Each returns the figures the closing summary shows."""

from __future__ import annotations

import functools
import json
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from demo import incluster, publish
from demo.cluster import S3Repository, Target, documents_for, manifest_yaml
from demo.progress import Progress

if TYPE_CHECKING:
    pass

NAMESPACE = "ensemble-demo"
RELEASE = "ensemble-demo"
RELEASE_NAMESPACE = "ensemble-system"
CHART = Path(__file__).resolve().parents[1] / "charts" / "ensemble-operator"
STATUS_INTERVAL_S = 5
GRPC_PORT = 8001

# What the demo deploys: three of the example scenarios (examples/manifests/<folder>/).
FOLDERS = ("dual", "ocr", "text")
REPLICAS = {"dual-classifier": 2, "ocr-pipeline": 1, "text-pipeline": 1}
RUNTIME_CPU = "100m"  # per runtime pod: four of them and the operator on a 2-core node
# The client checks run in the cluster, each against its Ensemble's Service.
CLIENT_CHECKS = {"dual_classifier": "dual-classifier", "ocr_pipeline": "ocr-pipeline", "text_pipeline": "text-pipeline"}
# The rollover: a new version of classifier_b published while a load runs on dual-classifier.
ROLL_ENSEMBLE = "dual-classifier"
ROLL_MODEL = publish.ROLL_MODEL
LOAD_SECONDS = 45.0


@dataclass
class Figures:
    """What the summary reports."""

    cluster: str = ""
    published: str = ""
    ready_s: float | None = None
    pods: int = 0
    client: list[str] = field(default_factory=list)
    client_ok: bool = False
    rollover: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- models to S3


def publish_models(progress: Progress, s3: S3Repository, workdir: Path, figures: Figures,
                   cache: Path) -> tuple[Path, list[str]]:
    """Train (or reuse) and write the repository the demo's Ensembles need, upload it; its root and models."""
    root, models = publish.trained_repository(progress, cache, workdir)
    client = s3.client()
    buckets = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if s3.bucket not in buckets:
        client.create_bucket(Bucket=s3.bucket)
    keys = publish.upload(s3, root)
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    figures.published = f"{len(models)} models, {len(keys)} objects, {size / 1e6:.1f} MB to s3://{s3.bucket}"
    progress.say(f"published {figures.published} ({s3.endpoint_url})")
    progress.say("models: " + ", ".join(models))
    return root, models


# ---------------------------------------------------------------- the operator


def installed_operator(target: Target) -> str | None:
    """`namespace/name` of an ensemble-operator Deployment already in the cluster, if any."""
    found = _json(target, "get", "deployments", "--all-namespaces", "-l", "app.kubernetes.io/name=ensemble-operator",
                  "-o", "json")["items"]
    return f"{found[0]['metadata']['namespace']}/{found[0]['metadata']['name']}" if found else None


def install_operator(progress: Progress, target: Target, workdir: Path) -> bool:
    """`helm install` the chart; False (nothing installed) when the cluster already runs the operator."""
    from demo.cluster import chart_values

    existing = installed_operator(target)
    if existing is not None:
        progress.say(f"the cluster already runs the operator ({existing}): using it, installing nothing")
        return False
    values = workdir / "values.yaml"
    values.write_text(yaml.safe_dump(chart_values(target, STATUS_INTERVAL_S)))
    with progress.ticking("helm install --wait", 30):
        target.kube.helm(
            "install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
            "-f", str(values), "--wait", "--timeout", "300s", timeout=330,
        )  # fmt: skip
        if target.services_reachable:  # the API server calls the webhook through its Service's rules
            service = _json(target, "get", "service", "-n", RELEASE_NAMESPACE, "-l",
                            f"app.kubernetes.io/instance={RELEASE}", "-o", "json")
            for item in service["items"]:
                if "webhook" in item["metadata"]["name"]:
                    ip, port = str(item["spec"]["clusterIP"]), int(item["spec"]["ports"][0]["port"])
                    _wait(functools.partial(_accepts, ip, port), f"the webhook Service at {ip}:{port}", 120)
    progress.say(target.kube.helm("list", "-n", RELEASE_NAMESPACE).stdout.rstrip())
    progress.say(target.kube.kubectl("get", "pods", "-n", RELEASE_NAMESPACE).stdout.rstrip())
    return True


def _accepts(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=2):
            return True
    except OSError:
        return False


def _wait(probe: Callable[[], bool], what: str, timeout_s: float, interval_s: float = 0.5) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:.0f} s")
        time.sleep(interval_s)


def _json(target: Target, *args: str) -> Any:
    return json.loads(target.kube.kubectl(*args).stdout)


# ---------------------------------------------------------------- deploy


def is_ready(obj: dict[str, Any]) -> bool:
    """Ready=True for the current generation with every desired replica ready (as e2e.scenario.is_ready)."""
    status = obj.get("status") or {}
    ready: dict[str, Any] = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
    return bool(
        ready.get("status") == "True"
        and ready.get("reason") == "AllReplicasReady"
        and status.get("observedGeneration") == obj["metadata"]["generation"]
    )


def deploy(progress: Progress, target: Target, figures: Figures, timeout_s: float = 600.0) -> None:
    if target.kube.kubectl("get", "namespace", NAMESPACE, check=False).returncode == 0:
        with progress.ticking(f"removing namespace {NAMESPACE} left by an earlier run", 30):
            target.kube.kubectl("delete", "namespace", NAMESPACE, "--wait=true", timeout=300)
    target.kube.kubectl("create", "namespace", NAMESPACE)
    docs = documents_for(FOLDERS, target.s3, REPLICAS, RUNTIME_CPU)
    path = Path(tempfile.mkdtemp(prefix="ensemble-demo-")) / "ensembles.yaml"
    path.write_text(manifest_yaml(docs))
    progress.say(f"$ kubectl apply -n {NAMESPACE} -f ensembles.yaml   "
                 f"({sum(d['kind'] == 'Model' for d in docs)} Models, {sum(d['kind'] == 'Ensemble' for d in docs)} Ensembles)")
    began = time.monotonic()
    _apply_with_retry(target, path)
    last = ""
    shown_at = 0.0
    deadline = began + timeout_s
    while True:
        ensembles = _json(target, "get", "ensembles", "-n", NAMESPACE, "-o", "json")["items"]
        done = bool(ensembles) and all(is_ready(e) for e in ensembles)
        table = target.kube.kubectl("get", "models,ensembles", "-n", NAMESPACE).stdout.rstrip()
        changed = _without_age(table) != _without_age(last)
        if done or (changed and time.monotonic() - shown_at >= 5.0):
            progress.say(f"$ kubectl get models,ensembles   (t={time.monotonic() - began:.0f}s)\n{table}")
            last, shown_at = table, time.monotonic()
        if done:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"Ensembles not Ready after {timeout_s:.0f} s:\n{table}")
        time.sleep(1.0)
    figures.ready_s = time.monotonic() - began
    figures.pods = sum(int(e["spec"].get("replicas", 1)) for e in ensembles)
    progress.say(f"all {len(ensembles)} Ensembles Ready {figures.ready_s:.1f} s after kubectl apply "
                 f"({figures.pods} runtime pods)")


def _without_age(table: str) -> str:
    return "\n".join(" ".join(line.split()[:-1]) for line in table.splitlines())


def _apply_with_retry(target: Target, path: Path, timeout_s: float = 90.0) -> None:
    """`kubectl apply`; on a cluster of the user's the webhook may take a moment to answer after `helm --wait`."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = target.kube.kubectl("apply", "-n", NAMESPACE, "-f", str(path), check=False, timeout=120)
        if result.returncode == 0:
            return
        if "webhook" not in result.stderr or time.monotonic() > deadline:
            raise RuntimeError(f"kubectl apply failed: {result.stderr.strip()}")
        time.sleep(2.0)


# ---------------------------------------------------------------- in-cluster client


def service_address(target: Target, name: str) -> str:
    service = _json(target, "get", "service", name, "-n", NAMESPACE, "-o", "json")
    port = next((p["port"] for p in service["spec"]["ports"] if p.get("name") == "grpc"), GRPC_PORT)
    return f"{service['spec']['clusterIP']}:{port}"


def run_client(progress: Progress, target: Target, figures: Figures) -> None:
    incluster.apply(target.kube, NAMESPACE, [incluster.digits_configmap(incluster.held_out_npz())])
    argv = ["-m", "ensemble_examples.client", "--digits", f"{incluster.DIGITS_MOUNT}/{incluster.DIGITS_FILE}",
            "--kubernetes-names"]
    for check, ensemble in CLIENT_CHECKS.items():
        argv += ["--target", f"{check}={service_address(target, ensemble)}"]
    pod = incluster.python_pod("demo-client", target.runtime_image, target.pull_policy, argv)
    progress.say("$ python " + " ".join(argv) + "   (in a pod of the runtime image)")
    phase, log = incluster.run_pod(target.kube, NAMESPACE, pod, progress.say)
    figures.client = [line for line in log.splitlines() if line.startswith("RESULT ")]
    figures.client_ok = phase == "Succeeded"
    if not figures.client_ok:
        progress.say(f"the client pod ended {phase}")


# ---------------------------------------------------------------- rollover under load


def served(target: Target, name: str) -> dict[str, int]:
    obj = _json(target, "get", "ensemble", name, "-n", NAMESPACE, "-o", "json")
    versions: dict[str, int] = (obj.get("status") or {}).get("servedVersions") or {}
    return versions


def rollover(progress: Progress, target: Target, root: Path, figures: Figures) -> None:
    from ensemble_examples.manifests import resource_name

    model = resource_name(ROLL_MODEL)
    before = served(target, ROLL_ENSEMBLE)
    progress.say(f"{ROLL_ENSEMBLE} serves " + ", ".join(f"{m}:{v}" for m, v in sorted(before.items())))
    argv = ["-m", "ensemble_examples.load", "--url", service_address(target, ROLL_ENSEMBLE), "--model", ROLL_ENSEMBLE,
            "--seconds", str(LOAD_SECONDS), "--workers", "4",
            "--digits", f"{incluster.DIGITS_MOUNT}/{incluster.DIGITS_FILE}"]
    pod = incluster.python_pod("demo-load", target.runtime_image, target.pull_policy, argv)
    progress.say(f"load: 4 clients in a pod calling {ROLL_ENSEMBLE} back to back for {LOAD_SECONDS:.0f} s")
    started = threading.Event()
    result: dict[str, Any] = {}

    def on_line(line: str) -> None:
        started.set()
        progress.say(f"  load | {line}" if not line.startswith("SUMMARY") else "  load | (summary below)")

    def load() -> None:
        try:
            result["phase"], result["log"] = incluster.run_pod(target.kube, NAMESPACE, pod, on_line)
        except Exception as exc:  # reported below
            result["error"] = str(exc)

    runner = threading.Thread(target=load, daemon=True)
    runner.start()
    if not started.wait(180):
        raise TimeoutError("the load pod printed nothing in 180 s")
    time.sleep(6.0)  # let the load show a steady state on the old version first
    version_dir = root / ROLL_MODEL / "2"
    shutil.copytree(root.parent / "next" / ROLL_MODEL / "2", version_dir)
    description = (root.parent / "next" / "ABOUT").read_text()
    published_at = time.monotonic()
    keys = publish.upload_version(target.s3, root, ROLL_MODEL, 2)
    progress.say(f"published {ROLL_MODEL} version 2 ({description}): {len(keys)} objects to "
                 f"s3://{target.s3.bucket}/{ROLL_MODEL}/2/ ({version_dir})")
    _wait(lambda: served(target, ROLL_ENSEMBLE).get(model) == 2, f"{ROLL_ENSEMBLE} serving {model}:2", 180, 0.5)
    switch_s = time.monotonic() - published_at
    progress.say(f"status.servedVersions of {ROLL_ENSEMBLE} shows {model}:2 {switch_s:.1f} s after the upload")
    runner.join(LOAD_SECONDS + 240)
    if "error" in result or "log" not in result:
        raise RuntimeError(f"the load pod failed: {result.get('error', 'no log')}")
    from ensemble_examples.load import parse_summary

    summary = parse_summary(result["log"]) or {}
    sets: dict[str, int] = summary.get("version_sets", {})
    old = ",".join(sorted(f"{m}:{v}" for m, v in before.items()))
    new = ",".join(sorted(f"{m}:{2 if m == model else v}" for m, v in before.items()))
    mixed = sum(count for key, count in sets.items() if key not in {old, new})
    figures.rollover = {
        "model": model, "switch_s": round(switch_s, 1), "requests": summary.get("requests", 0),
        "failed": summary.get("failed", 0), "wrong": summary.get("wrong", 0), "mixed": mixed,
        "old": sets.get(old, 0), "new": sets.get(new, 0), "phase": result.get("phase"),
    }
    progress.say(f"version sets seen by the load ({summary.get('requests', 0)} requests):")
    for key, count in sorted(sets.items(), key=lambda item: summary.get("first_seen_s", {}).get(item[0], 0.0)):
        tag = "old" if key == old else "new" if key == new else "MIXED"
        progress.say(f"  {count:6d}  {tag:5s} {key}")
    progress.say(f"failed {figures.rollover['failed']}, mixed {mixed}, wrong answers {figures.rollover['wrong']}"
                 + (f"; failures: {summary.get('failures')}" if summary.get("failed") else ""))
    progress.say(conditions_table(target, ROLL_ENSEMBLE))
    progress.say(target.kube.kubectl("get", "models,ensembles", "-n", NAMESPACE).stdout.rstrip())


def conditions_table(target: Target, name: str) -> str:
    obj = _json(target, "get", "ensemble", name, "-n", NAMESPACE, "-o", "json")
    rows = [("TYPE", "STATUS", "REASON", "MESSAGE")]
    for cond in (obj.get("status") or {}).get("conditions", []):
        rows.append((cond.get("type", ""), cond.get("status", ""), cond.get("reason", ""),
                     str(cond.get("message", ""))[:70]))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"status.conditions of {name}:"]
    lines += ["  " + "  ".join(cell.ljust(widths[i]) if i < 3 else cell for i, cell in enumerate(row)) for row in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------- cleanup


def clean_up(progress: Progress, target: Target, models: Sequence[str] = (), *, uninstall: bool = True) -> None:
    with progress.ticking(f"kubectl delete namespace {NAMESPACE}", 20):
        target.kube.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", timeout=300,
                            check=False)
    progress.say(f"namespace {NAMESPACE} is gone (its Ensembles, Models, Deployments, Services, pods)")
    if uninstall:
        with progress.ticking(f"helm uninstall {RELEASE}", 10):
            target.kube.helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", check=False, timeout=300)
    if models and not target.embedded:
        removed = publish.remove_models(target.s3, models)
        progress.say(f"removed the {removed} objects of the demo's models from s3://{target.s3.bucket}")


def summary_lines(figures: Figures, durations: dict[str, float], total_s: float) -> Sequence[str]:
    roll = figures.rollover
    lines = [
        f"cluster       {figures.cluster}",
        f"published     {figures.published}",
        f"deployed      {len(REPLICAS)} Ensembles, {figures.pods} runtime pods, Ready "
        + (f"{figures.ready_s:.1f} s after kubectl apply" if figures.ready_s is not None else "never"),
    ]
    lines += [f"client        {line.removeprefix('RESULT ')}" for line in figures.client]
    lines.append(f"client        {'all checks passed' if figures.client_ok else 'FAILED (see above)'}")
    if roll:
        lines.append(
            f"rollover      {roll['model']} 1 -> 2 under load: switched {roll['switch_s']} s after the upload; "
            f"{roll['requests']} requests ({roll['old']} old set, {roll['new']} new set), "
            f"{roll['failed']} failed, {roll['mixed']} mixed, {roll['wrong']} wrong"
        )
    lines.append("stages        " + ", ".join(f"{title.split(':')[0]} {took:.0f}s" for title, took in durations.items()))
    lines.append(f"total         {total_s:.0f} s")
    return lines
