"""The runtime Deployment (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..api.v1alpha1 import Ensemble, Model
from .common import (
    GRPC_PORT,
    HTTP_PORT,
    MAX_CONNECTION_AGE_FLAG,
    METRICS_PORT,
    RESTART_HASH_ANNOTATION,
    Manifest,
    RuntimeDefaults,
    config_map_name,
    metadata,
    parse_bytes,
    selector_labels,
    stable_hash,
)
from .control import control_args, control_env, token_fingerprint

UID = 1000
CACHE_DIR = "/var/cache/ensemble"
LOAD_JOURNAL = f"{CACHE_DIR}/load-journal"
CONFIG_DIR = "/etc/ensemble"
TLS_DIR = "/etc/ensemble-tls"  # the gRPC port's certificate, key and client roots (spec.grpcTls's Secret)
PROBE_PERIOD_SECONDS = 10


CPU_LIMIT_ENV = "ENSEMBLE_CPU_LIMIT"


def _cpu_limit_env() -> dict[str, Any]:
    """The container's CPU limit in whole CPUs, rounded up (the node's allocatable CPUs where no limit is set),
    as the kubelet computes it; `$(ENSEMBLE_CPU_LIMIT)` in the runtime's args is expanded from it."""
    return {"name": CPU_LIMIT_ENV, "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1"}}}


def sets_flag(args: list[str], flag: str) -> bool:
    """Whether `args` set `flag` (`--flag value` or `--flag=value`)."""
    return any(arg == flag or arg.startswith(f"{flag}=") for arg in args)


def runtime_args(ensemble: Ensemble, restricted: bool = False, max_connection_age_seconds: int = 0) -> list[str]:
    """The runtime's flags; `restricted`: its control APIs need the per-Ensemble token (render/control.py);
    `max_connection_age_seconds`: the gRPC connections' age where the Ensemble's extraArgs do not set one."""
    rt = ensemble.spec.runtime
    args = [
        "--repository-config",
        f"{CONFIG_DIR}/repository.json",
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        str(rt.poll_interval_seconds),
        "--model-cache-dir",
        CACHE_DIR,
        "--load-journal",  # on the cache emptyDir: survives a container restart, so a version that killed
        LOAD_JOURNAL,  # the runtime while loading is skipped after it (no crash loop); gone with the pod
        "--grpc-port",
        str(GRPC_PORT),
        "--http-port",
        str(HTTP_PORT),
        "--metrics-port",
        str(METRICS_PORT),
        "--strict-readiness",
        "true",
        "--exit-timeout-secs",
        str(rt.exit_timeout_seconds),
        "--cpus",  # thread pools sized for the container's CPU limit, which the process's affinity does not show
        f"$({CPU_LIMIT_ENV})",
    ]
    if rt.memory_budget is not None:
        args += ["--memory-budget-bytes", str(parse_bytes(rt.memory_budget))]
        args += ["--memory-policy", rt.memory_policy or "drain-then-swap"]
    if restricted:
        args += control_args()
    args += _tls_args(ensemble)
    extra = list(rt.extra_args)
    if max_connection_age_seconds > 0 and not sets_flag(extra, MAX_CONNECTION_AGE_FLAG):
        args += [MAX_CONNECTION_AGE_FLAG, str(max_connection_age_seconds)]
    return args + extra


def _tls_args(ensemble: Ensemble) -> list[str]:
    """Triton's TLS flags for spec.grpcTls, its Secret's keys at TLS_DIR (none without it)."""
    tls = ensemble.spec.grpc_tls
    if tls is None:
        return []
    args = ["--grpc-server-cert", f"{TLS_DIR}/tls.crt", "--grpc-server-key", f"{TLS_DIR}/tls.key"]
    if tls.mutual:
        return ["--grpc-use-ssl-mutual", "true", *args, "--grpc-root-cert", f"{TLS_DIR}/ca.crt"]
    return ["--grpc-use-ssl", "true", *args]


def _tls_volume(ensemble: Ensemble) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the volume, its mount) of spec.grpcTls's Secret: only the keys the runtime reads, readable by the pod's
    group (fsGroup) and no one else."""
    tls = ensemble.spec.grpc_tls
    if tls is None:
        return [], []
    keys = ["tls.crt", "tls.key", *(["ca.crt"] if tls.mutual else [])]
    volume = {"name": "grpc-tls", "secret": {"secretName": tls.secret_name, "defaultMode": 0o440,
                                             "items": [{"key": key, "path": key} for key in keys]}}
    return [volume], [{"name": "grpc-tls", "mountPath": TLS_DIR, "readOnly": True}]


def _resources(ensemble: Ensemble, defaults: RuntimeDefaults) -> dict[str, dict[str, str]]:
    res = ensemble.spec.resources
    if res is None:
        return {"requests": dict(defaults.requests), "limits": dict(defaults.limits)}
    out: dict[str, dict[str, str]] = {}
    if res.requests:
        out["requests"] = {k: str(v) for k, v in sorted(res.requests.items())}
    if res.limits:
        out["limits"] = {k: str(v) for k, v in sorted(res.limits.items())}
    return out


def credentials(ensemble: Ensemble, models: Mapping[str, Model]) -> tuple[list[dict[str, Any]], str | None]:
    """Env vars from the first Model's S3 Secret and the service account (IRSA) to run as.

    validation.py rejects ensembles whose Models disagree, so the first one found speaks for all.
    """
    env: list[dict[str, Any]] = []
    service_account: str | None = None
    for name in sorted({s.model_ref.name for s in ensemble.spec.steps}):
        model = models.get(name)
        s3 = model.spec.s3 if model else None
        if s3 is None:
            continue
        if s3.secret_ref is not None and not env:
            ref = s3.secret_ref
            env = [
                {"name": var, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": key}}}
                for var, key in (
                    ("AWS_ACCESS_KEY_ID", ref.access_key_id_key),
                    ("AWS_SECRET_ACCESS_KEY", ref.secret_access_key_key),
                )
            ]
        if s3.service_account_name is not None and service_account is None:
            service_account = s3.service_account_name
    return env, service_account


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _pod_scheduling(ensemble: Ensemble) -> dict[str, Any]:
    sched = ensemble.spec.scheduling
    out: dict[str, Any] = {}
    if sched.node_selector:
        out["nodeSelector"] = dict(sorted(sched.node_selector.items()))
    if sched.tolerations:
        out["tolerations"] = [t.to_wire() for t in sched.tolerations]
    if sched.affinity:
        out["affinity"] = sched.affinity
    if sched.priority_class_name:
        out["priorityClassName"] = sched.priority_class_name
    return out


def render_deployment(ensemble: Ensemble, models: Mapping[str, Model], defaults: RuntimeDefaults) -> Manifest:
    spec, rt = ensemble.spec, ensemble.spec.runtime
    env, service_account = credentials(ensemble, models)
    tls_volumes, tls_mounts = _tls_volume(ensemble)
    container: dict[str, Any] = {
        "name": "runtime",
        "image": rt.image or defaults.image,
        "imagePullPolicy": rt.image_pull_policy or defaults.image_pull_policy,
        "command": ["ensemble-runtime"],
        "args": runtime_args(
            ensemble,
            restricted=bool(defaults.control_key),
            max_connection_age_seconds=defaults.grpc_max_connection_age_seconds,
        ),
        "ports": [
            {"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "env": [
            {"name": "HOME", "value": "/tmp"},
            _cpu_limit_env(),
            *env,
            *([control_env(ensemble)] if defaults.control_key else []),
        ],
        "resources": _resources(ensemble, defaults),
        "startupProbe": _probe(
            "/v2/health/ready",
            PROBE_PERIOD_SECONDS,
            max(1, rt.startup_timeout_seconds // PROBE_PERIOD_SECONDS),
        ),
        "readinessProbe": _probe("/v2/health/ready", 5, 3),
        "livenessProbe": _probe("/v2/health/live", PROBE_PERIOD_SECONDS, 6),
        "lifecycle": {
            "preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {defaults.pre_stop_sleep_seconds}"]}}
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "repository-config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "model-cache", "mountPath": CACHE_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
            *tls_mounts,
        ],
    }
    cache: dict[str, Any] = {}
    if rt.cache_size_limit is not None:
        cache["sizeLimit"] = str(rt.cache_size_limit)
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": rt.exit_timeout_seconds + defaults.pre_stop_sleep_seconds + 15,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": UID,
            "runAsGroup": UID,
            "fsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            {"name": "repository-config", "configMap": {"name": config_map_name(ensemble)}},
            {"name": "model-cache", "emptyDir": cache},
            {"name": "tmp", "emptyDir": {}},
            *tls_volumes,
        ],
        **_pod_scheduling(ensemble),
    }
    if service_account is not None:
        pod_spec["serviceAccountName"] = service_account
    # Everything in the pod template restarts pods when it changes; repository.json is deliberately
    # not in it (the runtime polls the mounted ConfigMap), so Model changes roll no pods.
    # A new control token (a new operator key) must reach the pods too: its fingerprint rolls them.
    restart_hash = stable_hash([pod_spec, token_fingerprint(defaults.control_key, ensemble)] if defaults.control_key
                               else pod_spec)
    deployment_spec: dict[str, Any] = {
        "selector": {"matchLabels": selector_labels(ensemble)},
        "progressDeadlineSeconds": spec.rollout.progress_deadline_seconds,
        "revisionHistoryLimit": 5,
        "strategy": {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": 0, "maxSurge": spec.rollout.max_surge},
        },
        "template": {
            "metadata": {
                "labels": metadata(ensemble, "")["labels"],
                "annotations": {RESTART_HASH_ANNOTATION: restart_hash},
            },
            "spec": pod_spec,
        },
    }
    if spec.autoscaling is None:
        deployment_spec = {"replicas": spec.replicas, **deployment_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(ensemble, ensemble.metadata.name),
        "spec": deployment_spec,
    }
