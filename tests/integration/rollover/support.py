"""Shared by the S3 rollover acceptance test, the failure tests and `bench/rollover.py`.

- `upload_pipeline` / `step_config` / `ensemble_config`: the `pipe` ensemble (steps `step_a`, `step_b`, both
  the example `versioned` ONNX model, run side by side on X) in Triton's layout on S3.
- `Load`: concurrent tritonclient streams (threads, one client each), bounded by a deadline and a request
  cap, recording every outcome with the version set that answered.
- Runtime probes: the storage status endpoint, the `ensemble_repository_*` metrics, the index, and
  `wait_syncs` to line an upload up right after a poll (so no poll falls between two related uploads).
"""

from __future__ import annotations

import functools
import json
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
from ensemble_examples import configs
from google.protobuf import text_format
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException

from tests.infra.process import poll_until
from tests.integration.s3.helpers import S3Helper
from tests.support.load import ThreadedLoad
from tests.support.runtime_process import RuntimeProcess

ENSEMBLE = "pipe"
STEPS = ("step_a", "step_b")
PREFIX = "repo"
POLL_SECS = 1.0
SETTLE_SECS = 0.5
LATEST_1 = "latest { num_versions: 1 }"


def runtime_args(cache_dir: str, poll_secs: float = POLL_SECS) -> list[str]:
    return [
        "--model-control-mode=poll",
        f"--repository-poll-secs={poll_secs}",
        f"--repository-settle-secs={SETTLE_SECS}",
        f"--model-cache-dir={cache_dir}",
        "--strict-readiness=false",
    ]


def repository_uri(endpoint_url: str, bucket: str = "models", prefix: str = PREFIX) -> str:
    """Triton's form, s3://host:port/bucket/prefix: the endpoint comes from the URI."""
    return f"s3://{endpoint_url.removeprefix('http://')}/{bucket}/{prefix}"


# ---- the repository on S3 ---------------------------------------------------------------------------
def step_config(name: str, policy: str = LATEST_1) -> str:
    config = configs.versioned()
    config.name = name
    text_format.Parse(f"version_policy {{ {policy} }}", config)
    return text_format.MessageToString(config)


def ensemble_config(name: str = ENSEMBLE) -> str:
    """X -> step_a (a_y, a_version) and X -> step_b (b_y, b_version), each step on its latest version."""
    config = mc.ModelConfig(name=name, platform="ensemble", max_batch_size=8)
    config.input.add(name="X", data_type=mc.TYPE_FP32, dims=[4])
    for step in STEPS:
        short = step.removeprefix("step_")
        config.output.add(name=f"{short}_y", data_type=mc.TYPE_FP32, dims=[4])
        config.output.add(name=f"{short}_version", data_type=mc.TYPE_INT32, dims=[1])
        entry = config.ensemble_scheduling.step.add(model_name=step, model_version=-1)
        entry.input_map["X"] = "X"
        entry.output_map["Y"] = f"{short}_y"
        entry.output_map["version"] = f"{short}_version"
    return text_format.MessageToString(config)


def upload_pipeline(s3: S3Helper, versions: Sequence[int] = (1,), *, policy: str = LATEST_1) -> None:
    """Both steps (config, versions with `.complete` markers) and the ensemble's config under PREFIX."""
    for step in STEPS:
        s3.put(f"{PREFIX}/{step}/config.pbtxt", step_config(step, policy))
        for version in versions:
            s3.put_version(f"{PREFIX}/{step}", version, marker=True)
    s3.put(f"{PREFIX}/{ENSEMBLE}/config.pbtxt", ensemble_config())


@contextmanager
def serving(uri: str, cache_dir: str, env: dict[str, str] | None = None) -> Iterator[RuntimeProcess]:
    """The runtime serving `uri` in poll mode, once the ensemble is ready; stopped on exit."""
    with RuntimeProcess([uri], runtime_args(cache_dir), env) as proc:
        proc.wait_model_ready(ENSEMBLE, timeout=60)
        yield proc


# ---- load ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Outcome:
    worker: int
    started: float  # time.monotonic() just before the call
    finished: float  # and just after it
    versions: tuple[int, ...] = ()  # (a_version, b_version) for the ensemble, (version,) for a model
    reported: str = ""  # the ensemble_versions response parameter
    values_ok: bool = True  # every Y == X + the version that step reported
    error: str = ""

    @property
    def latency(self) -> float:
        return self.finished - self.started


def _x(worker: int, i: int) -> npt.NDArray[np.float32]:
    base = float((worker * 100_003 + i) % 10_000)
    return np.array([[base + j for j in range(4)]], np.float32)


class Load(ThreadedLoad[Outcome]):
    """`workers` threads, each with its own gRPC client, calling `model` back to back until `stop()`,
    `deadline_s` or `max_requests` (all threads together), whichever comes first."""

    def __init__(
        self,
        url: str,
        model: str = ENSEMBLE,
        *,
        workers: int = 8,
        deadline_s: float = 45.0,
        max_requests: int = 200_000,
    ) -> None:
        super().__init__(workers, deadline_s)
        self.url = url
        self.model = model
        self.max_requests = max_requests

    def outcomes(self) -> list[Outcome]:
        with self._changed:
            return list(self._outcomes)

    def _work(self, worker: int) -> None:
        with grpcclient.InferenceServerClient(self.url) as client:
            for i in range(self.max_requests):
                if not self._running():
                    return
                with self._changed:
                    if len(self._outcomes) >= self.max_requests:
                        return
                self._record(self._call(client, worker, i))

    def _call(self, client: grpcclient.InferenceServerClient, worker: int, i: int) -> Outcome:
        x = _x(worker, i)
        item = grpcclient.InferInput("X", list(x.shape), "FP32")
        item.set_data_from_numpy(x)
        started = time.monotonic()
        try:
            result = client.infer(self.model, [item], request_id=f"{worker}-{i}")
        except InferenceServerException as exc:
            return Outcome(worker, started, time.monotonic(), error=f"{exc.status()}: {exc.message()}")
        finished = time.monotonic()
        if self.model != ENSEMBLE:
            version = int(result.as_numpy("version")[0, 0])
            ok = bool(np.array_equal(result.as_numpy("Y"), x + version))
            return Outcome(worker, started, finished, (version,), "", ok)
        versions = tuple(int(result.as_numpy(f"{s.removeprefix('step_')}_version")[0, 0]) for s in STEPS)
        ok = all(
            np.array_equal(result.as_numpy(f"{s.removeprefix('step_')}_y"), x + v)
            for s, v in zip(STEPS, versions, strict=True)
        )
        reported = str(result.get_response().parameters["ensemble_versions"].string_param)
        return Outcome(worker, started, finished, versions, reported, ok)

    def wait_for(self, what: str, match: Callable[[Outcome], bool], after: float, timeout: float = 30.0) -> Outcome:
        """The first outcome (by finish time) that started after `after` and matches; waits with a deadline."""

        def found() -> Outcome | None:
            hits = [o for o in self._outcomes if o.started > after and match(o)]
            return min(hits, key=lambda o: o.finished) if hits else None

        with self._changed:
            hit = self._changed.wait_for(found, timeout)
        if hit is None:
            seen = sorted({o.versions for o in self.outcomes() if o.started > after})
            raise AssertionError(f"no response with {what} within {timeout}s (version sets seen: {seen})")
        return hit

    def wait_progress(self, after: float, per_worker: int = 5, timeout: float = 30.0) -> None:
        """Every worker has finished `per_worker` requests started after `after`."""

        def enough() -> bool:
            counts = [0] * self.workers
            for o in self._outcomes:
                if o.started > after:
                    counts[o.worker] += 1
            return min(counts) >= per_worker

        with self._changed:
            done = self._changed.wait_for(enough, timeout)
        assert done, f"the load made no progress after t={after:.3f} ({len(self.outcomes())} requests so far)"


def consistency_problems(outcomes: Sequence[Outcome]) -> dict[str, list[Outcome]]:
    """Failed requests, mixed version sets, sets that disagree with `ensemble_versions`, wrong values."""
    return {
        "failed": [o for o in outcomes if o.error],
        "mixed": [o for o in outcomes if not o.error and len(set(o.versions)) != 1],
        "misreported": [
            o
            for o in outcomes
            if not o.error
            and o.reported
            and o.reported != ",".join(f"{s}:{v}" for s, v in zip(STEPS, o.versions, strict=True))
        ],
        "wrong_values": [o for o in outcomes if not o.error and not o.values_ok],
    }


def assert_consistent(outcomes: Sequence[Outcome]) -> None:
    problems = {kind: found for kind, found in consistency_problems(outcomes).items() if found}
    summary = {kind: (len(found), found[:3]) for kind, found in problems.items()}
    assert not problems, f"{len(outcomes)} requests: {summary}"
    assert outcomes, "no requests were made"


# ---- runtime probes -------------------------------------------------------------------------------------
def http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def storage_status(proc: RuntimeProcess) -> dict[str, Any]:
    status: dict[str, Any] = http_json(f"http://127.0.0.1:{proc.http_port}/v2/repository/status")
    return status


def metric(proc: RuntimeProcess, name: str) -> float:
    """The value of a `ensemble_repository_*` metric for the (only) source; a counter's by the name
    prometheus_client's parser gives its samples (`<name>_total`; /metrics writes `<name>`, as Triton does)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=5.0) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise KeyError(f"metric {name} not exposed")


def last_sync(proc: RuntimeProcess) -> float:
    return metric(proc, "ensemble_repository_last_sync_timestamp_seconds")


def wait_syncs(proc: RuntimeProcess, count: int = 1, timeout: float = 30.0) -> None:
    """Return right after `count` more syncs have listed the repository successfully.

    A poll sleeps `poll_secs` after the previous one finished, so an upload made right after this returns
    lands whole before the next listing (the uploads here take milliseconds)."""
    seen = last_sync(proc)
    for n in range(count):
        seen = poll_until(
            functools.partial(_newer_sync, proc, seen),
            timeout=timeout,
            interval=0.02,
            what=f"sync {n + 1} of {count}",
            detail=lambda: proc.log_text()[-3000:],
        )


def _newer_sync(proc: RuntimeProcess, than: float) -> float | None:
    value = last_sync(proc)
    return value if value != than else None


def index_entries(proc: RuntimeProcess, model: str) -> dict[str, dict[str, str]]:
    """version -> index entry (state, reason) of `model`."""
    with proc.grpc_client() as client:
        models: list[dict[str, str]] = client.get_model_repository_index(as_json=True)["models"]
    return {e.get("version", ""): e for e in models if e["name"] == model}


def served_versions(proc: RuntimeProcess, model: str) -> list[str]:
    with proc.grpc_client() as client:
        return list(client.get_model_metadata(model).versions)


def wait_until(probe: Callable[[], Any], what: str, proc: RuntimeProcess, timeout: float = 30.0) -> Any:
    return poll_until(probe, timeout=timeout, interval=0.05, what=what, detail=lambda: proc.log_text()[-4000:])
