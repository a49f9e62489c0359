"""Rollover and failures end to end on a real node, under steady load balanced across the ready endpoints.

One Ensemble `pair`: steps a and b, Models `step-a`/`step-b` (the example `versioned` ONNX model, which
answers Y = X + version and the version), side by side on X, so every response names both step versions;
2 replicas, latest-1 policy, S3 polled every 2 s. Steps, in order: new versions uploaded; a corrupt version
then its correction; MinIO stopped then restarted; a version pinned through the Models; the runtime image
changed (pods roll to a second tag of the built runtime image); a runtime container's process killed
(containerd, SIGKILL: the kubelet restarts it); an invalid Ensemble applied; the Ensemble deleted.

Per step the failed and mixed responses and p99 over the steady p99 go to e2e/results/rollover.json.
"Mixed" is a response from a version set other than the one before or the one after the step (or with
values that do not match the versions it reports).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ensemble_examples import onnx_models

from e2e.load import BalancedLoad, Outcome, p99, summarize
from e2e.real_stack import RealStack
from e2e.scenario import (
    BUCKET,
    JSON,
    delete_and_wait_gone,
    is_ready,
    kubectl_apply,
    live_pods,
    ready_endpoints,
    record,
    restart_counts,
    wait_ensemble,
)
from tests.integration.operator.support import condition, new_namespace, wait_for

pytestmark = [pytest.mark.realnode, pytest.mark.controlplane, pytest.mark.s3, pytest.mark.timeout(900)]

NAME = "pair"
STEPS = {"step-a": "step_a", "step-b": "step_b"}  # Model -> S3 prefix
GROUP = "serving.ensemble.dev/v1alpha1"
SWITCH_TIMEOUT = 60.0
STEADY_REQUESTS = 300


def step_model(stack: RealStack, name: str, policy: JSON) -> JSON:
    tensor = {"dataType": "TYPE_FP32", "dims": [4]}
    return {
        "apiVersion": GROUP,
        "kind": "Model",
        "metadata": {"name": name},
        "spec": {
            "source": f"s3://{BUCKET}/{STEPS[name]}",
            "platform": "onnxruntime_onnx",
            "maxBatchSize": 8,
            "versionPolicy": policy,
            "inputs": [{"name": "X", **tensor}],
            "outputs": [{"name": "Y", **tensor}, {"name": "version", "dataType": "TYPE_INT32", "dims": [1]}],
            "instanceGroups": [{"kind": "KIND_CPU", "count": 1}],
            "s3": {
                "endpointUrl": stack.minio.endpoint_url,
                "region": stack.minio.region,
                "secretRef": {"name": "model-store-credentials"},
            },
        },
    }


def pair_ensemble(image: str | None = None) -> JSON:
    steps = [
        {
            "name": short,
            "modelRef": {"name": f"step-{short}"},
            "inputMap": {"X": "X"},
            "outputMap": {"Y": f"{short}_y", "version": f"{short}_version"},
        }
        for short in ("a", "b")
    ]
    outputs = [
        tensor
        for short in ("a", "b")
        for tensor in (
            {"name": f"{short}_y", "dataType": "FP32", "dims": [4]},
            {"name": f"{short}_version", "dataType": "INT32", "dims": [1]},
        )
    ]
    runtime: JSON = {"pollIntervalSeconds": 2, "exitTimeoutSeconds": 10}
    if image is not None:
        runtime["image"] = image
    return {
        "apiVersion": GROUP,
        "kind": "Ensemble",
        "metadata": {"name": NAME},
        "spec": {
            "maxBatchSize": 8,
            "inputs": [{"name": "X", "dataType": "FP32", "dims": [4]}],
            "outputs": outputs,
            "steps": steps,
            "replicas": 2,
            "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
            "runtime": runtime,
            "rollout": {"maxSurge": 1, "progressDeadlineSeconds": 300},
        },
    }


LATEST_1: JSON = {"latest": {"numVersions": 1}}


class Rollover:
    """The state the steps share: the stack, the namespace, the load and the figures."""

    def __init__(self, stack: RealStack, ns: str, workdir: Path) -> None:
        self.stack, self.ns, self.workdir = stack, ns, workdir
        self.load: BalancedLoad | None = None
        self.steady_p99: float | None = None
        self.figures: dict[str, Any] = {}

    # ---------------------------------------------------------------- storage

    def put(self, key: str, body: bytes) -> None:
        self.stack.s3.put_object(Bucket=BUCKET, Key=key, Body=body)

    def upload(self, version: int, *, corrupt: frozenset[str] = frozenset()) -> None:
        """Version `version` of both steps (model files first, `.complete` markers last)."""
        for prefix in STEPS.values():
            body = os.urandom(4096) if prefix in corrupt else onnx_models.versioned(version).SerializeToString()
            self.put(f"{prefix}/{version}/model.onnx", body)
        for prefix in STEPS.values():
            self.put(f"{prefix}/{version}/.complete", b"")

    # ---------------------------------------------------------------- cluster

    def obj(self) -> JSON:
        return wait_ensemble(self.stack, self.ns, NAME, lambda o: True, "to exist")

    def wait(self, predicate: Any, what: str, timeout: float = SWITCH_TIMEOUT) -> JSON:
        return wait_ensemble(self.stack, self.ns, NAME, predicate, what, timeout=timeout)

    def versions_found(self) -> dict[str, Any]:
        """Each step Model's status.versionsFound (what the runtime pods listed in storage)."""
        models = (
            json.loads(self.stack.cp.kubectl("get", "model", m, "-n", self.ns, "-o", "json").stdout) for m in STEPS
        )
        return {m["metadata"]["name"]: m.get("status", {}).get("versionsFound") for m in models}

    def config_digests(self) -> dict[str, str | None]:
        """Each ready endpoint's `config_digest` (GET /v2/repository/status): the repository.json it applied."""
        out: dict[str, str | None] = {}
        headers = {"x-ensemble-control": self.control_token()}  # the pods restrict the repository API to it
        for ip in self.endpoints():
            request = urllib.request.Request(f"http://{ip}:8000/v2/repository/status", headers=headers)
            with urllib.request.urlopen(request, timeout=5) as response:
                out[ip] = json.loads(response.read()).get("config_digest")
        return out

    def control_token(self) -> str:
        """The Ensemble's control token, from the Secret the operator wrote for its pods (read as admin)."""
        secret = self.stack.cp.api("GET", f"/api/v1/namespaces/{self.ns}/secrets/{NAME}-control")
        return base64.b64decode(secret["data"]["token"]).decode()

    def config_map_digest(self) -> str:
        path = f"/api/v1/namespaces/{self.ns}/configmaps/{NAME}-repository"
        text: str = self.stack.cp.api("GET", path)["data"]["repository.json"]
        return hashlib.sha256(text.encode()).hexdigest()

    def endpoints(self) -> list[str]:
        return ready_endpoints(self.stack.cp, self.ns, NAME)

    def pods(self) -> dict[str, int]:
        return restart_counts(live_pods(self.stack.cp, self.ns, NAME))

    def wait_served(self, versions: tuple[int, int], since: float) -> None:
        """Every ready endpoint answers with `versions`, and status.servedVersions says so."""
        assert self.load is not None
        for address in self.endpoints():
            self.load.wait_for(
                f"{versions} from {address}",
                lambda o, a=address: o.endpoint == a and o.versions == versions,  # type: ignore[misc]
                since,
                SWITCH_TIMEOUT,
            )
        expected = dict(zip(STEPS, versions, strict=True))
        self.wait(
            lambda o: (o.get("status") or {}).get("servedVersions") == expected
            and (condition(o, "Progressing") or {}).get("status") == "False",
            f"servedVersions {expected}",
        )
        table = self.stack.cp.kubectl("get", "ensemble", "-n", self.ns, NAME).stdout
        assert f"step-a:{versions[0]},step-b:{versions[1]}" in table, table

    def window(self, name: str, since: float, allowed: set[tuple[int, int]]) -> dict[str, Any]:
        """Figures of the requests started since `since` (after some more finished), recorded under `name`."""
        assert self.load is not None
        self.load.wait_progress(time.monotonic())
        figures = summarize(self.load.outcomes(since), allowed, self.steady_p99)
        figures["seconds"] = round(time.monotonic() - since, 1)
        self.figures[name] = figures
        print(f"\n{name}: {json.dumps(figures)}")
        record("rollover.json", name, figures)
        return figures


@pytest.fixture
def rollover(real_stack: RealStack, tmp_path: Path) -> Iterator[Rollover]:
    stack = real_stack
    ns = new_namespace(stack.cp, "e2e-rollover")
    state = Rollover(stack, ns, tmp_path)
    try:
        yield state
    finally:
        if state.load is not None:
            state.load.stop()
        stack.cp.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_rollover_and_failures_under_load(rollover: Rollover) -> None:
    r, stack = rollover, rollover.stack
    r.upload(1)
    secret = next(d for d in stack.documents("text") if d["kind"] == "Secret")
    models = [step_model(stack, name, LATEST_1) for name in STEPS]
    kubectl_apply(stack.cp, r.ns, [secret, *models, pair_ensemble()], r.workdir)
    r.wait(is_ready, "Ready", timeout=180)
    wait_for(lambda: len(r.endpoints()) == 2, "2 ready endpoints", timeout=30)

    with BalancedLoad(r.endpoints, NAME, workers=4) as load:
        r.load = load
        since = time.monotonic()
        r.wait_served((1, 1), since)
        load.wait_progress(since, STEADY_REQUESTS)
        steady = load.outcomes(since)
        r.steady_p99 = p99(steady)
        r.window("steady", since, {(1, 1)})

        # 1. New versions of both steps: every replica switches in place.
        before = r.pods()
        since = time.monotonic()
        r.upload(2)
        r.wait_served((2, 2), since)
        fig = r.window("s3 upload v2", since, {(1, 1), (2, 2)})
        assert r.pods() == before, "pods restarted or were replaced"
        assert (fig["failed"], fig["mixed"]) == (0, 0), fig
        both = {"step-a": [1, 2], "step-b": [1, 2]}
        wait_for(lambda: r.versions_found() == both, "versionsFound [1, 2] on both Models", timeout=60)

        # 2. A corrupt version: the old set keeps serving, Degraded names it; the corrected upload recovers.
        since = time.monotonic()
        r.upload(3, corrupt=frozenset({"step_b"}))
        degraded = r.wait(
            lambda o: (condition(o, "Degraded") or {}).get("reason") == "VersionLoadFailed", "Degraded (load failed)"
        )
        message = condition(degraded, "Degraded")["message"]  # type: ignore[index]
        assert "step-b 3" in message, message
        assert degraded["status"]["servedVersions"] == {"step-a": 2, "step-b": 2}
        print(f"\ncorrupt version: Degraded: {message}")
        r.put("step_b/3/model.onnx", onnx_models.versioned(3).SerializeToString())
        r.wait_served((3, 3), since)
        r.wait(lambda o: (condition(o, "Degraded") or {}).get("status") == "False", "not Degraded")
        fig = r.window("corrupt v3 then corrected", since, {(2, 2), (3, 3)})
        assert r.pods() == before, "pods restarted or were replaced"
        assert (fig["failed"], fig["mixed"]) == (0, 0), fig

        # 3. MinIO stopped: serving goes on, status says storage is unreachable; recovery when it is back.
        since = time.monotonic()
        stack.minio.stop()
        try:
            down = r.wait(
                lambda o: (condition(o, "Degraded") or {}).get("reason") == "StorageUnreachable",
                "Degraded (storage unreachable)",
            )
            print(f"\nMinIO stopped: Degraded: {condition(down, 'Degraded')['message']}")  # type: ignore[index]
            load.wait_progress(time.monotonic())
        finally:
            with load.paused():  # the restart forks this process (see BalancedLoad.paused)
                stack.minio.start()
        r.wait(lambda o: (condition(o, "Degraded") or {}).get("status") == "False", "not Degraded after MinIO")
        fig = r.window("minio outage", since, {(3, 3)})
        assert r.pods() == before, "pods restarted or were replaced"
        assert (fig["failed"], fig["mixed"]) == (0, 0), fig

        # 4. A version pinned through the Models (versionPolicy specific): same guarantees.
        since = time.monotonic()
        pinned = [step_model(stack, name, {"specific": {"versions": [2]}}) for name in STEPS]
        kubectl_apply(stack.cp, r.ns, pinned, r.workdir)
        r.wait_served((2, 2), since)
        # What the operator compares to tell a pod on an older config (and nudge it again): equal everywhere.
        wait_for(lambda: set(r.config_digests().values()) == {r.config_map_digest()}, "pods on the new ConfigMap")
        fig = r.window("pin v2 via Model", since, {(3, 3), (2, 2)})
        assert r.pods() == before, "pods restarted or were replaced"
        assert (fig["failed"], fig["mixed"]) == (0, 0), fig

        # 5. The runtime image changed: the pods roll, no request fails.
        new_image = stack.tag_runtime_image("-e2e")
        since = time.monotonic()
        stack.cp.kubectl(
            "patch", "ensemble", NAME, "-n", r.ns, "--type=merge",
            "-p", json.dumps({"spec": {"runtime": {"image": new_image}}}),
        )  # fmt: skip
        rolled = wait_for(
            lambda: p if len(p := r.pods()) == 2 and not set(p) & set(before) else None,
            "two new pods",
            timeout=180,
            detail=lambda: stack.diagnostics(r.ns, NAME),
        )
        r.wait(is_ready, "Ready after the roll", timeout=120)
        wait_for(lambda: len(r.endpoints()) == 2, "2 ready endpoints after the roll", timeout=60)
        r.wait_served((2, 2), time.monotonic())
        fig = r.window("runtime image change (pods roll)", since, {(2, 2)})
        assert fig["mixed"] == 0, fig
        image_change_failed = fig["failed"]

        # 6. A runtime process killed: its pod restarts; the other replica answers everything.
        pod = next(p for p in live_pods(stack.cp, r.ns, NAME) if p["metadata"]["uid"] in rolled)
        pod_name, pod_ip, uid = pod["metadata"]["name"], pod["status"]["podIP"], pod["metadata"]["uid"]
        since = time.monotonic()
        stack.kill_container(r.ns, pod_name, "runtime")
        wait_for(
            lambda: r.pods().get(uid) == rolled[uid] + 1, f"{pod_name} restarted", timeout=60,
            detail=lambda: stack.diagnostics(r.ns, NAME),
        )  # fmt: skip
        r.wait(is_ready, "Ready after the restart", timeout=120)
        wait_for(lambda: len(r.endpoints()) == 2, "2 ready endpoints after the restart", timeout=60)
        fig = r.window("runtime process killed", since, {(2, 2)})
        window = load.outcomes(since)
        on_killed = [o for o in window if o.endpoint == pod_ip and o.error]
        on_other = [o for o in window if o.endpoint != pod_ip and o.error]
        fig.update(failed_on_killed_pod=len(on_killed), failed_on_other_pod=len(on_other))
        record("rollover.json", "runtime process killed", fig)
        print(f"\nkill: {len(on_killed)} failed on the killed pod, {len(on_other)} on the other")
        assert set(r.pods()) == set(rolled), "the killed pod was replaced instead of restarted"
        assert not on_other, on_other[:3]
        assert fig["mixed"] == 0, fig
        outcomes = load.stop()

    # 7. An invalid Ensemble: refused at admission, with the reason.
    invalid = pair_ensemble()
    invalid["metadata"]["name"] = "invalid"
    invalid["spec"]["steps"][1]["modelRef"]["name"] = "no-such-model"
    refused = kubectl_apply(stack.cp, r.ns, [invalid], r.workdir, check=False)
    assert refused.returncode != 0
    assert "no-such-model" in refused.stderr, refused.stderr
    print(f"\ninvalid Ensemble refused: {refused.stderr.strip()}")

    # 8. Deleting the Ensemble removes everything it created.
    seconds = delete_and_wait_gone(stack, r.ns, NAME)
    record("rollover.json", "delete seconds", round(seconds, 1))
    r.load = None
    assert_no_bad_values(outcomes)
    assert image_change_failed == 0, f"{image_change_failed} requests failed while the pods rolled: {r.figures}"


def assert_no_bad_values(outcomes: list[Outcome]) -> None:
    bad = [o for o in outcomes if not o.error and not o.values_ok]
    assert not bad, bad[:3]
