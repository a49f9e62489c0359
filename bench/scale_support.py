"""Pure helpers of the operator scale benchmark (bench/operator_scale.py): the layout of Models and Ensembles,
their manifests, the API server's request counter (Prometheus text), the audit log's records, /proc figures.
No I/O here except reading /proc and files named by the caller."""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

JSON = dict[str, Any]
GROUP_VERSION = "serving.ensemble.dev/v1alpha1"
POD_HTTP_PORT = 8000  # ensemble_contract.ports.HTTP_PORT: where the operator probes every pod
CHANGE_PARAMETER = "revision"  # the Model spec.parameters key a change bumps (it reaches repository.json)


# ---------------------------------------------------------------- layout


def models_of(ensemble: int, ensembles: int, models: int) -> list[int]:
    """Indices of the Models Ensemble `ensemble` chains, so that `ensembles` Ensembles cover all `models`:
    ceil(models/ensembles) + 1 consecutive Models from an evenly spread start (neighbours share one)."""
    width = min(models, max(2, math.ceil(models / ensembles) + 1))
    start = ensemble * models // ensembles
    return [(start + j) % models for j in range(width)]


def users_of(models: int, ensembles: int, model: int) -> list[int]:
    """Indices of the Ensembles (of `ensembles`) that use Model `model`."""
    return [e for e in range(ensembles) if model in models_of(e, ensembles, models)]


def model_name(index: int) -> str:
    return f"m{index:04d}"


def ensemble_name(index: int) -> str:
    return f"e{index:04d}"


def model_manifest(index: int, namespace: str, revision: str = "0") -> JSON:
    tensor = {"dataType": "TYPE_FP32", "dims": [4]}
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Model",
        "metadata": {"name": model_name(index), "namespace": namespace},
        "spec": {
            "source": f"s3://models/scale/{model_name(index)}",
            "backend": "python",
            "maxBatchSize": 8,
            "inputs": [{"name": "IN", **tensor}],
            "outputs": [{"name": "OUT", **tensor}],
            "parameters": {CHANGE_PARAMETER: revision},
            "s3": {"endpointUrl": "http://minio.storage.svc:9000", "region": "us-east-1"},
        },
    }


def ensemble_manifest(index: int, namespace: str, model_indices: Sequence[int], replicas: int) -> JSON:
    tensor = {"dataType": "FP32", "dims": [4]}
    steps = []
    for j, model in enumerate(model_indices):
        source = "IN" if j == 0 else f"t{j - 1}"
        target = "OUT" if j == len(model_indices) - 1 else f"t{j}"
        steps.append(
            {
                "name": f"s{j}",
                "modelRef": {"name": model_name(model)},
                "inputMap": {"IN": source},
                "outputMap": {"OUT": target},
            }
        )
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Ensemble",
        "metadata": {"name": ensemble_name(index), "namespace": namespace},
        "spec": {
            "maxBatchSize": 8,
            "inputs": [{"name": "IN", **tensor}],
            "outputs": [{"name": "OUT", **tensor}],
            "steps": steps,
            "replicas": replicas,
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        },
    }


def is_ready(ensemble: Mapping[str, Any]) -> bool:
    """Phase Ready for the current generation, as the operator reports it."""
    status = ensemble.get("status") or {}
    generation = (ensemble.get("metadata") or {}).get("generation")
    return bool(status.get("phase") == "Ready" and status.get("observedGeneration") == generation)


# ---------------------------------------------------------------- apiserver_request_total


def request_counts(metrics_text: str) -> Counter[tuple[str, str]]:
    """apiserver_request_total summed by (verb, resource) from /metrics; resource is `group/resource[/sub]`
    (`-` for non-resource requests such as /metrics itself)."""
    counts: Counter[tuple[str, str]] = Counter()
    for line in metrics_text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels_text, _, value = line[len("apiserver_request_total{"):].rpartition("} ")
        labels = _labels(labels_text)
        resource = labels.get("resource", "")
        if resource:
            group = labels.get("group", "") or "core"
            resource = f"{group}/{resource}" + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        counts[(labels.get("verb", "?"), resource or "-")] += int(float(value))
    return counts


def _labels(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split('",'):
        key, _, value = part.partition('="')
        out[key.strip()] = value.rstrip('"')
    return out


def per_minute(delta: Mapping[tuple[str, str], float], seconds: float) -> dict[str, float]:
    """`delta` as "VERB resource" -> requests per minute, largest first, zeros left out."""
    rates = {f"{verb} {res}": round(n * 60.0 / seconds, 1) for (verb, res), n in delta.items() if n}
    return dict(sorted(rates.items(), key=lambda kv: -kv[1]))


def subtract(a: Mapping[tuple[str, str], float], b: Mapping[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {k: a.get(k, 0) - b.get(k, 0) for k in set(a) | set(b)}


# ---------------------------------------------------------------- audit log (the operator's requests)


@dataclass(frozen=True)
class Request:
    """One request the operator made, from the API server's audit log."""

    at: float  # epoch seconds the API server received it
    verb: str  # Kubernetes verb: get, list, watch, create, patch, update, delete
    resource: str  # resource[/subresource]
    namespace: str
    name: str

    @property
    def write(self) -> bool:
        return self.verb in {"create", "update", "patch", "delete", "deletecollection"}


class AuditReader:
    """Reads new lines of an audit log (JSON lines) from where it stopped; keeps one user's requests."""

    def __init__(self, path: Path, user: str) -> None:
        self._path = path
        self._user = user
        self._offset = 0
        self.requests: list[Request] = []

    def poll(self) -> None:
        if not self._path.exists():
            return
        with self._path.open("rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        for line in data[:complete].splitlines():
            event = json.loads(line)
            if event.get("user", {}).get("username") != self._user:
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "-") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            self.requests.append(
                Request(
                    at=_epoch(event["requestReceivedTimestamp"]),
                    verb=event.get("verb", "?"),
                    resource=resource,
                    namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""),
                )
            )

    def between(self, start: float, end: float) -> list[Request]:
        self.poll()
        return [r for r in self.requests if start <= r.at < end]


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def by_verb_resource(requests: Iterable[Request]) -> dict[str, int]:
    counts = Counter(f"{r.verb} {r.resource}" for r in requests)
    return dict(counts.most_common())


def ensemble_of(request: Request, ensembles: Iterable[str]) -> str | None:
    """The Ensemble a named request concerns (its objects are named after it, pods `<name>-...`)."""
    if not request.name:
        return None
    for name in ensembles:
        if request.name == name or request.name.startswith(f"{name}-") or request.name.startswith(f"{name}."):
            return name
    return None


# ---------------------------------------------------------------- /proc


@dataclass(frozen=True)
class ProcSample:
    cpu_s: float  # user + system
    rss_mib: float
    peak_rss_mib: float


def proc_sample(pid: int) -> ProcSample:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime (fields 14 and 15 of stat)
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )

    def mib(key: str) -> float:
        return round(int(status.get(key, "0 kB").split()[0]) / 1024, 1)

    return ProcSample(cpu_s=cpu, rss_mib=mib("VmRSS"), peak_rss_mib=mib("VmHWM"))


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return ordered[index]
