"""The operator scale benchmark's verdicts and printed report (pure: the result document in, text out)."""

from __future__ import annotations

import math
from typing import Any

from bench.scale_support import POD_HTTP_PORT

JSON = dict[str, Any]
TARGET_IDLE_RATIO = 1.5
TARGET_CHANGE_P99_S = 5.0
IDLE_CPU_FLOOR_PERCENT = 5.0


def targets(result: JSON) -> dict[str, JSON]:
    small, full = result["small"]["idle"], result["full"]["idle"]
    out: dict[str, JSON] = {}
    ratios = {}
    for key in ("metrics_operator_total_per_min", "audit_operator_total_per_min"):
        ratios[key] = round(full[key] / small[key], 2) if small[key] > 0 else (1.0 if full[key] == 0 else math.inf)
    # CPU too: an operator that cannot keep up with its own timers does fewer requests per minute the more
    # it has to do, so a flat request rate alone could hide growth. A CPU share under the floor counts as flat.
    cpu_small, cpu_full = small["operator_cpu_percent"], full["operator_cpu_percent"]
    cpu_ok = cpu_full <= max(TARGET_IDLE_RATIO * cpu_small, IDLE_CPU_FLOOR_PERCENT)
    ratios["operator_cpu_percent"] = round(cpu_full / cpu_small, 2) if cpu_small > 0 else math.inf
    out["idle_independent_of_unchanged_ensembles"] = {
        "pass": ratios["audit_operator_total_per_min"] <= TARGET_IDLE_RATIO and cpu_ok,
        "detail": f"operator idle requests/min at {result['full']['ensembles']} vs {result['small']['ensembles']} "
        f"Ensembles: audit {full['audit_operator_total_per_min']} / {small['audit_operator_total_per_min']} = "
        f"{ratios['audit_operator_total_per_min']}x, metrics minus baseline {full['metrics_operator_total_per_min']}"
        f" / {small['metrics_operator_total_per_min']} = {ratios['metrics_operator_total_per_min']}x; operator CPU "
        f"{cpu_full}% / {cpu_small}% of a core = {ratios['operator_cpu_percent']}x (target <= {TARGET_IDLE_RATIO}x "
        f"for requests and CPU, or CPU <= {IDLE_CPU_FLOOR_PERCENT}%)",
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
