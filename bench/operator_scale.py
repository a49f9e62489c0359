"""The operator at scale: a real control plane with kwok nodes and pods, the chart, the real operator.

    PYTHONPATH=contract:operator:runtime:. python bench/operator_scale.py \
        [--ensembles 300 --models 1000 --replicas 3] [--json out.json]
    python bench/operator_scale.py --ensembles 10 --models 30 --idle-seconds 20     # a quick look

Starts etcd, kube-apiserver (with an audit log of the operator's own requests), controller-manager,
scheduler and kwok (tests/infra/controlplane.py), installs the chart with Helm (webhooks called on
127.0.0.1, as tests/integration/operator does), and runs `python -m ensemble_operator` as a local process
with the chart's ServiceAccount and the chart's defaults (status interval 30 s, pod HTTP timeout 2 s, Model
settle 1 s). It talks only to the API server and /proc, never to operator internals.

Runtime pods under kwok run no process. kwok gives them IPs from `--pod-cidr` (default 127.64.0.0/16, on
loopback) and, with `--pod-http runtime` (default), one real `ensemble-runtime` listening on
0.0.0.0:8000 answers the operator's probes for every pod: real HTTP round trips, with answers about its own
(empty) repository, so pods report no versions and no config digest, which Ready does not need (Ready
comes from the Deployment's ready replicas, which kwok's pod Ready condition drives). `--pod-http none`
leaves port 8000 closed (probes refused at once).

Sequence: all Models; the first `--small-ensembles` Ensembles (default a tenth), time until all are Ready;
an idle window with the operator and one with it stopped (the control plane's own requests); the operator
restarted; the other Ensembles, time until all are Ready; the two idle windows at full size; then
`--changes` Model changes, each timed from the PATCH to the last affected Ensemble's ConfigMap holding the
new repository.json (a watch on ConfigMaps), with the operator's requests in that window (audit log).

Reported: API requests per minute when idle (apiserver_request_total from /metrics, with the operator minus
without it; and the operator's own requests from the audit log), by verb and resource, at both sizes, and
their ratio; per Model change the seconds (p50/p99) and the operator's requests; time to Ready; the
operator's CPU seconds per phase and its RSS (from /proc). Targets, printed PASS/FAIL: idle cost at full
size <= 1.5x the small size's (no periodic work per unchanged Ensemble); a Model change touches only its
Ensembles (no request naming another Ensemble's objects, no full LIST of Ensembles or Models, no other
ConfigMap changed); p99 Model change to ConfigMap <= 5 s. Writes bench/results/operator_scale.json.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import math
import os
import platform
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
for extra in (REPO_ROOT, REPO_ROOT / "contract", REPO_ROOT / "operator", REPO_ROOT / "runtime"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

import yaml  # noqa: E402

from bench.common import write_json  # noqa: E402
from bench.scale_support import (  # noqa: E402
    CHANGE_PARAMETER,
    GROUP_VERSION,
    AuditReader,
    Request,
    by_verb_resource,
    ensemble_manifest,
    ensemble_name,
    ensemble_of,
    is_ready,
    model_manifest,
    model_name,
    models_of,
    per_minute,
    percentile,
    proc_sample,
    request_counts,
    subtract,
    users_of,
)
from tests.infra.api import ApiError  # noqa: E402
from tests.infra.controlplane import ControlPlane, FakeNode  # noqa: E402
from tests.infra.process import ManagedProcess, free_port, http_status, poll_until  # noqa: E402
from tests.integration.operator.support import (  # noqa: E402
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

JSON = dict[str, Any]
NAMESPACE = "scale"
POD_HTTP_PORT = 8000  # ensemble_contract.ports.HTTP_PORT: where the operator probes every pod
GROUP_PATH = f"/apis/{GROUP_VERSION}"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted", "Panic"],
    "rules": [{"level": "Metadata", "users": [OPERATOR_USER]}, {"level": "None"}],
}
TARGET_IDLE_RATIO = 1.5
TARGET_CHANGE_P99_S = 5.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


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


# ---------------------------------------------------------------- measurements


class Bench:
    def __init__(self, args: argparse.Namespace, cp: ControlPlane, release: Release, workdir: Path) -> None:
        self.args = args
        self.cp = cp
        self.api = Api(cp)
        self.release = release
        self.workdir = workdir
        audit_path = Path(next(a for a in cp.processes["kube-apiserver"].argv if a.startswith("--audit-log-path=")
                               ).split("=", 1)[1])
        self.audit = AuditReader(audit_path, OPERATOR_USER)
        self.operator = operator_process(release, workdir, args)
        self.names = [ensemble_name(i) for i in range(args.ensembles)]

    def cpu(self) -> float:
        pid = self.operator.pid
        return proc_sample(pid).cpu_s if pid is not None else 0.0

    def settle(self) -> None:
        """Wait until the operator has written nothing for a while (bounded), before an idle window."""
        quiet = self.args.quiet_seconds
        deadline = time.time() + 3 * self.args.status_interval + quiet
        while time.time() < deadline:
            now = time.time()
            if not [r for r in self.audit.between(now - quiet, now + 1) if r.write]:
                return
            time.sleep(1.0)

    def window(self, seconds: float) -> tuple[dict[tuple[str, str], float], list[Request], float, float]:
        """Request counters over `seconds` of doing nothing, the operator's requests, its CPU, wall."""
        cpu0, t0 = self.cpu(), time.time()
        before = request_counts(self.api.metrics())
        time.sleep(seconds)
        after = request_counts(self.api.metrics())
        t1, cpu1 = time.time(), self.cpu()
        time.sleep(1.5)  # let the audit log catch up with the window's last requests
        return subtract(after, before), self.audit.between(t0, t1), cpu1 - cpu0, t1 - t0

    def idle(self, label: str) -> JSON:
        log(f"{label}: settling, then {self.args.idle_seconds:.0f} s idle with the operator")
        self.settle()
        with_op, requests, cpu, wall = self.window(self.args.idle_seconds)
        sample = proc_sample(self.operator.pid or 0)
        log(f"{label}: operator stopped; {self.args.idle_seconds:.0f} s idle without it")
        self.operator.stop(timeout=20.0)
        time.sleep(3.0)  # its watches close
        without, _, _, wall0 = self.window(self.args.idle_seconds)
        operator_only = {k: with_op.get(k, 0) * 60 / wall - without.get(k, 0) * 60 / wall0 for k in with_op}
        total = sum(max(0.0, v) for v in operator_only.values())
        return {
            "metrics_with_operator_per_min": per_minute(with_op, wall),
            "metrics_without_operator_per_min": per_minute(without, wall0),
            "metrics_operator_per_min": {f"{v} {r}": round(n, 1) for (v, r), n in
                                         sorted(operator_only.items(), key=lambda kv: -kv[1]) if abs(n) >= 0.05},
            "metrics_operator_total_per_min": round(total, 1),
            "audit_operator_per_min": {k: round(n * 60 / wall, 1) for k, n in by_verb_resource(requests).items()},
            "audit_operator_total_per_min": round(len(requests) * 60 / wall, 1),
            "operator_cpu_s": round(cpu, 2),
            "operator_cpu_percent": round(100 * cpu / wall, 1),
            "operator_rss_mib": sample.rss_mib,
            "operator_peak_rss_mib": sample.peak_rss_mib,
            "window_s": round(wall, 1),
        }

    def apply_ensembles(self, indices: range, label: str) -> JSON:
        a = self.args
        docs = [ensemble_manifest(i, NAMESPACE, models_of(i, a.ensembles, a.models), a.replicas) for i in indices]
        cpu0, started = self.cpu(), time.monotonic()
        log(f"{label}: creating {len(docs)} Ensembles")
        created = create_all(
            self.api, f"{GROUP_PATH}/namespaces/{NAMESPACE}/ensembles", docs, started + a.ready_timeout
        )
        applied = time.monotonic() - started
        if created["refused_attempts"]:
            log(f"{label}: {created['created']}/{len(docs)} created after {applied:.0f} s; "
                f"{created['refused_attempts']} attempts refused, last: {created['last_refusal']}")
        names = {ensemble_name(i) for i in range(indices.stop)}
        ready_s, ready = wait_ready(self.api, names, max(0.0, a.ready_timeout - applied))
        total = None if ready_s is None else applied + ready_s
        log(f"{label}: {ready}/{len(names)} Ensembles Ready" + (f" after {total:.1f} s" if total else " (timed out)"))
        sample = proc_sample(self.operator.pid or 0)
        return {
            "ensembles": len(names),
            "created": created["created"],
            "create_refused_attempts": created["refused_attempts"],
            "create_last_refusal": created["last_refusal"],
            "create_s": round(applied, 1),
            "all_ready_s": None if total is None else round(total, 1),
            "ready": ready,
            "operator_cpu_s": round(self.cpu() - cpu0, 1),
            "operator_rss_mib": sample.rss_mib,
        }

    def pods(self) -> JSON:
        """Where the pods are and whether their IPs answer the operator's probes (the pod responder)."""
        pods = self.api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        ips = [p.get("status", {}).get("podIP") for p in pods]
        network = ipaddress.ip_network(self.args.pod_cidr)
        inside = [ip for ip in ips if ip and ipaddress.ip_address(ip) in network]
        answer = http_status(f"http://{inside[0]}:{POD_HTTP_PORT}/v2/health/ready") if inside else None
        return {"pods": len(pods), "with_ip_in_pod_cidr": len(inside), "sample_ip": inside[0] if inside else None,
                "sample_ip_http_status": answer}

    def changes(self) -> JSON:
        a = self.args
        count = min(a.changes, a.models)
        picks = [(k * a.models) // count + k % 3 for k in range(count)]
        samples: list[JSON] = []
        with ConfigMapWatch(self.api) as watch:
            for revision, model in enumerate(picks, start=1):
                users = {ensemble_name(e) for e in users_of(a.models, a.ensembles, model % a.models)}
                affected = users & watch.owners()  # those that exist (all, unless creation failed)
                if not affected:
                    continue
                cpu0, t0 = self.cpu(), time.time()
                self.api.merge_patch(
                    f"{GROUP_PATH}/namespaces/{NAMESPACE}/models/{model_name(model % a.models)}",
                    {"spec": {"parameters": {CHANGE_PARAMETER: str(revision)}}},
                )
                seen = watch.wait_changed(affected, t0, a.change_timeout)
                t1 = max(seen.values()) if seen else time.time()
                cpu = self.cpu() - cpu0
                time.sleep(a.change_gap)  # the change's tail (status, pod marks) before the next one
                samples.append(self._change_sample(watch, model % a.models, affected, seen, t0, t1, cpu))
                log(f"change {revision}/{count}: Model {model_name(model % a.models)} -> {len(affected)} Ensemble(s)"
                    + (f" in {t1 - t0:.2f} s" if seen else " TIMED OUT"))
        done = [s["seconds"] for s in samples if s["seconds"] is not None]
        return {
            "samples": samples,
            "timed_out": sum(1 for s in samples if s["seconds"] is None),
            "p50_s": round(percentile(done, 50), 2) if done else None,
            "p99_s": round(percentile(done, 99), 2) if done else None,
            "requests_p50": percentile([s["requests"] for s in samples], 50) if samples else None,
            "requests_max": max((s["requests"] for s in samples), default=None),
        }

    def _change_sample(
        self, watch: ConfigMapWatch, model: int, affected: set[str], seen: dict[str, float] | None,
        t0: float, t1: float, cpu: float,
    ) -> JSON:
        requests = self.audit.between(t0, t1)
        tail = self.audit.between(t0, t1 + self.args.change_gap)
        others = [r for r in tail if (e := ensemble_of(r, self.names)) is not None and e not in affected]
        full_lists = [r for r in tail if r.verb == "list" and r.resource in ("ensembles", "models")]
        other_configs = sorted(watch.changed_between(t0, t1 + self.args.change_gap) - affected)
        return {
            "model": model_name(model),
            "affected": sorted(affected),
            "seconds": None if seen is None else round(t1 - t0, 3),
            "requests": len(requests),
            "requests_by_verb": by_verb_resource(requests),
            "writes": sum(1 for r in requests if r.write),
            "operator_cpu_s": round(cpu, 2),
            "other_ensembles_requests": len(others),
            "other_ensembles_writes": sum(1 for r in others if r.write),
            "full_lists": len(full_lists),
            "other_configmaps_changed": other_configs,
        }

    def run(self) -> JSON:
        a = self.args
        result: JSON = {}
        log(f"creating {a.models} Models")
        started = time.monotonic()
        start_operator(self.operator, a.health_port)
        result["models_create"] = create_all(
            self.api, f"{GROUP_PATH}/namespaces/{NAMESPACE}/models",
            [model_manifest(i, NAMESPACE) for i in range(a.models)], started + a.ready_timeout,
        )
        result["models_create_s"] = round(time.monotonic() - started, 1)
        result["small"] = self.apply_ensembles(range(a.small_ensembles), "small")
        result["small"]["idle"] = self.idle("small")
        start_operator(self.operator, a.health_port)
        result["full"] = self.apply_ensembles(range(a.small_ensembles, a.ensembles), "full")
        result["full"]["pods"] = self.pods()
        self.settle()
        result["model_changes"] = self.changes()
        result["full"]["idle"] = self.idle("full")
        return result


# ---------------------------------------------------------------- report


def targets(result: JSON) -> dict[str, JSON]:
    small, full = result["small"]["idle"], result["full"]["idle"]
    out: dict[str, JSON] = {}
    ratios = {}
    for key in ("metrics_operator_total_per_min", "audit_operator_total_per_min"):
        ratios[key] = round(full[key] / small[key], 2) if small[key] > 0 else (1.0 if full[key] == 0 else math.inf)
    out["idle_independent_of_unchanged_ensembles"] = {
        "pass": ratios["audit_operator_total_per_min"] <= TARGET_IDLE_RATIO,
        "detail": f"operator idle requests/min at {result['full']['ensembles']} vs {result['small']['ensembles']} "
        f"Ensembles: audit {full['audit_operator_total_per_min']} / {small['audit_operator_total_per_min']} = "
        f"{ratios['audit_operator_total_per_min']}x, metrics minus baseline {full['metrics_operator_total_per_min']}"
        f" / {small['metrics_operator_total_per_min']} = {ratios['metrics_operator_total_per_min']}x "
        f"(target <= {TARGET_IDLE_RATIO}x)",
        "ratios": ratios,
    }
    changes = result["model_changes"]
    samples = changes["samples"]
    bad = [s["model"] for s in samples if s["other_ensembles_requests"] or s["full_lists"] or
           s["other_configmaps_changed"]]
    out["model_change_touches_only_its_ensembles"] = {
        "pass": bool(samples) and not bad,
        "detail": f"{len(bad)}/{len(samples)} changes touched other Ensembles: requests naming their objects "
        f"{sum(s['other_ensembles_requests'] for s in samples)} (writes "
        f"{sum(s['other_ensembles_writes'] for s in samples)}), full LISTs of Ensembles/Models "
        f"{sum(s['full_lists'] for s in samples)}, other ConfigMaps changed "
        f"{sum(len(s['other_configmaps_changed']) for s in samples)}",
    }
    p99 = changes["p99_s"]
    out["model_change_p99_to_configmap"] = {
        "pass": p99 is not None and changes["timed_out"] == 0 and p99 <= TARGET_CHANGE_P99_S,
        "detail": f"p50 {changes['p50_s']} s, p99 {p99} s over {len(samples)} changes, {changes['timed_out']} timed "
        f"out (target <= {TARGET_CHANGE_P99_S} s)",
    }
    return out


def print_report(result: JSON) -> None:
    cfg = result["config"]
    print(f"\n== operator scale: {cfg['ensembles']} Ensembles over {cfg['models']} Models, {cfg['replicas']} replicas "
          f"(small size {cfg['small_ensembles']}); wall {result['wall_s']:.0f} s")
    print(f"Models: {result['models_create']['created']} created in {result['models_create_s']} s "
          f"({result['models_create']['refused_attempts']} attempts refused); webhooks {cfg['webhooks']}")
    for size in ("small", "full"):
        part = result[size]
        idle = part["idle"]
        if part["create_refused_attempts"]:
            print(f"\n[{size}] {part['create_refused_attempts']} create attempts refused; last: "
                  f"{part['create_last_refusal']}")
        print(f"\n[{size}: {part['ensembles']} Ensembles] Ready: {part['ready']}/{part['ensembles']} in "
              f"{part['all_ready_s']} s from the first create; operator CPU meanwhile {part['operator_cpu_s']} s")
        print(f"  idle ({idle['window_s']} s): operator {idle['audit_operator_total_per_min']} req/min (audit), "
              f"{idle['metrics_operator_total_per_min']} req/min (metrics minus baseline); CPU "
              f"{idle['operator_cpu_percent']}%; RSS {idle['operator_rss_mib']} MiB")
        for key, rate in list(idle["audit_operator_per_min"].items())[:8]:
            print(f"    {rate:>9.1f}/min  {key}")
        baseline = sum(idle["metrics_without_operator_per_min"].values())
        print(f"  control plane without the operator: {baseline:.1f} req/min")
    changes = result["model_changes"]
    print(f"\nModel change -> every affected ConfigMap: p50 {changes['p50_s']} s, p99 {changes['p99_s']} s; "
          f"operator requests per change p50 {changes['requests_p50']}, max {changes['requests_max']}")
    pods = result["full"]["pods"]
    print(f"pods: {pods['pods']}, {pods['with_ip_in_pod_cidr']} with an IP in {cfg['pod_cidr']}; GET "
          f"{pods['sample_ip']}:{POD_HTTP_PORT}/v2/health/ready -> {pods['sample_ip_http_status']}")
    print(f"operator peak RSS {result['operator_peak_rss_mib']} MiB")
    print()
    for name, target in result["targets"].items():
        print(f"{'PASS' if target['pass'] else 'FAIL'}  {name}: {target['detail']}")


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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--ensembles", type=int, default=300)
    p.add_argument("--models", type=int, default=1000)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--small-ensembles", type=int, default=None, help="the smaller size (default: a tenth)")
    p.add_argument("--idle-seconds", type=float, default=120.0, help="each idle window (default 4 status intervals)")
    p.add_argument("--changes", type=int, default=10, help="Model changes timed")
    p.add_argument("--change-gap", type=float, default=3.0, help="seconds after a change before the next")
    p.add_argument("--change-timeout", type=float, default=120.0)
    p.add_argument("--ready-timeout", type=float, default=1800.0, help="per size, from the first create")
    p.add_argument("--quiet-seconds", type=float, default=None,
                   help="before an idle window, wait this long without operator writes (default a third of the "
                   "status interval, at least 5 s; bounded by 3 status intervals)")
    p.add_argument("--status-interval", type=float, default=30.0, help="operator setting (chart default 30)")
    p.add_argument("--model-settle", type=float, default=1.0, help="operator setting (chart default 1)")
    p.add_argument("--pod-http-timeout", type=float, default=2.0, help="operator setting (default 2)")
    p.add_argument("--pod-cidr", default="127.64.0.0/16", help="kwok's pod IPs (loopback: answered locally)")
    p.add_argument("--pod-http", choices=["runtime", "none"], default="runtime",
                   help="runtime: one ensemble-runtime on 0.0.0.0:8000 answers every pod; none: nothing listens")
    p.add_argument("--webhooks", choices=["on", "off"], default="on",
                   help="the chart's admission webhooks, served by the operator (off: chart installed without them)")
    p.add_argument("--json", type=Path, default=None, help="default bench/results/operator_scale.json")
    p.add_argument("--workdir", type=Path, default=None, help="keep logs here (default: a temporary directory)")
    args = p.parse_args(argv)
    if args.small_ensembles is None:
        args.small_ensembles = max(1, args.ensembles // 10)
    if not 0 < args.small_ensembles < args.ensembles:
        p.error("--small-ensembles must be between 1 and --ensembles - 1")
    if args.quiet_seconds is None:
        args.quiet_seconds = max(5.0, args.status_interval / 3)
    args.health_port = free_port()
    return args


def main(argv: Sequence[str] | None = None) -> JSON:
    args = parse_args(argv)
    started = time.monotonic()
    with ExitStack() as stack:
        if args.workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="operator-scale-")))
        else:
            workdir = args.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        if args.pod_http == "runtime":
            if http_status(f"http://127.0.0.1:{POD_HTTP_PORT}/v2/health/live") is not None:
                raise SystemExit(f"port {POD_HTTP_PORT} already answers on loopback: stop that or use --pod-http none")
            responder = pod_responder(workdir)
            responder.start()
            stack.callback(responder.stop)
            poll_until(lambda: http_status(f"http://127.0.0.1:{POD_HTTP_PORT}/v2/health/ready") == 200,
                       timeout=120, what="the pod responder", alive=[responder], detail=responder.log_tail)
        cp, release = stack.enter_context(cluster(args, workdir))
        bench = Bench(args, cp, release, workdir)
        stack.callback(bench.operator.stop, 20.0)
        log(f"control plane up in {time.monotonic() - started:.0f} s; logs in {workdir}")
        result = bench.run()
        result["operator_peak_rss_mib"] = result["full"]["idle"]["operator_peak_rss_mib"]
    config = {k: v for k, v in vars(args).items() if k not in ("json", "workdir", "health_port")}
    config["pod_cidr"] = str(config["pod_cidr"])
    result = {"config": config, "host": platform.node(), "cpus": os.cpu_count(), **result}
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["targets"] = targets(result)
    print_report(result)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
        path = args.json
    else:
        path = write_json("operator_scale", result)
    print(f"\nwrote {path}")
    return result


if __name__ == "__main__":
    main()
