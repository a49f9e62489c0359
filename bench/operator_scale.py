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
an idle window with the operator; the other Ensembles, time until all are Ready; `--changes` Model
changes, each timed from the PATCH to the last affected Ensemble's ConfigMap holding the new
repository.json (a watch on ConfigMaps), with the operator's requests in that window (audit log); an idle
window at full size; last, one with the operator stopped (the control plane's own requests, subtracted
from both sizes' /metrics counts; the operator is never restarted mid-run: it would resume every object).

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
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
for extra in (REPO_ROOT, REPO_ROOT / "contract", REPO_ROOT / "operator", REPO_ROOT / "runtime"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from bench.common import write_json  # noqa: E402
from bench.scale_cluster import (  # noqa: E402
    GROUP_PATH,
    NAMESPACE,
    Api,
    ConfigMapWatch,
    cluster,
    create_all,
    operator_process,
    pod_responder,
    start_operator,
    wait_ready,
)
from bench.scale_report import print_report, targets  # noqa: E402
from bench.scale_support import (  # noqa: E402
    CHANGE_PARAMETER,
    POD_HTTP_PORT,
    AuditReader,
    Request,
    by_verb_resource,
    ensemble_manifest,
    ensemble_name,
    ensemble_of,
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
from tests.infra.controlplane import ControlPlane  # noqa: E402
from tests.infra.process import http_status, poll_until  # noqa: E402
from tests.integration.operator.support import OPERATOR_USER, Release  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

JSON = dict[str, Any]


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


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
        self.raw_idle: dict[str, tuple[dict[tuple[str, str], float], float]] = {}

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
        """An idle window with the operator: its own requests (audit), all requests (/metrics), CPU, RSS."""
        log(f"{label}: settling, then {self.args.idle_seconds:.0f} s idle with the operator")
        self.settle()
        with_op, requests, cpu, wall = self.window(self.args.idle_seconds)
        sample = proc_sample(self.operator.pid or 0)
        self.raw_idle[label] = (with_op, wall)
        return {
            "metrics_with_operator_per_min": per_minute(with_op, wall),
            "audit_operator_per_min": {k: round(n * 60 / wall, 1) for k, n in by_verb_resource(requests).items()},
            "audit_operator_total_per_min": round(len(requests) * 60 / wall, 1),
            "operator_cpu_s": round(cpu, 2),
            "operator_cpu_percent": round(100 * cpu / wall, 1),
            "operator_rss_mib": sample.rss_mib,
            "operator_peak_rss_mib": sample.peak_rss_mib,
            "window_s": round(wall, 1),
        }

    def baseline(self, result: JSON) -> None:
        """The control plane's own requests with the operator stopped (once, at the end: a stop and restart
        mid-run makes the operator resume every object, a backlog that would skew what follows), subtracted
        from each idle window's /metrics counts."""
        log(f"operator stopped; {self.args.idle_seconds:.0f} s idle without it")
        self.operator.stop(timeout=20.0)
        time.sleep(3.0)  # its watches close
        without, _, _, wall0 = self.window(self.args.idle_seconds)
        for label, (with_op, wall) in self.raw_idle.items():
            operator_only = {k: with_op.get(k, 0) * 60 / wall - without.get(k, 0) * 60 / wall0 for k in with_op}
            result[label]["idle"].update(
                {
                    "metrics_without_operator_per_min": per_minute(without, wall0),
                    "metrics_operator_per_min": {
                        f"{v} {r}": round(n, 1)
                        for (v, r), n in sorted(operator_only.items(), key=lambda kv: -kv[1])
                        if abs(n) >= 0.05
                    },
                    "metrics_operator_total_per_min": round(sum(max(0.0, v) for v in operator_only.values()), 1),
                }
            )

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
        result["full"] = self.apply_ensembles(range(a.small_ensembles, a.ensembles), "full")
        result["full"]["pods"] = self.pods()
        self.settle()
        result["model_changes"] = self.changes()
        result["full"]["idle"] = self.idle("full")
        self.baseline(result)
        return result


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
    p.add_argument("--report", type=Path, default=None,
                   help="only print a saved result (its targets judged again) and write nothing")
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
    if args.report is not None:
        saved: JSON = json.loads(args.report.read_text())
        saved["targets"] = targets(saved)
        print_report(saved)
        return saved
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
    config = {k: v for k, v in vars(args).items() if k not in ("json", "workdir", "health_port", "report")}
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
