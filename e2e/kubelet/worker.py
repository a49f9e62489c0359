"""One pod on the node: a thread that sets it up, runs its containers and tears it down when deleted."""

from __future__ import annotations

import logging
import shutil
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from .api import JSON, ApiError, KubeClient, pod_path
from .container import ContainerRunner, RunSettings
from .network import AddressPool, attach_pod, detach_pod
from .objects import ConfigError, Objects
from .process import PodContext
from .status import StatusWriter, now_rfc3339, pod_status
from .volumes import PodVolumes

log = logging.getLogger(__name__)

TICK = 0.1  # seconds between looks at processes and probes


def pod_dir_name(namespace: str, name: str) -> str:
    return f"{namespace}_{name}"


class PodWorker:
    """Owns one pod (by UID). `update()` hands it newer versions of the object; `gone()` says the object
    was removed from the API; `shutdown()` stops its processes without touching the API object."""

    def __init__(
        self,
        pod: JSON,
        client: KubeClient,
        pool: AddressPool,
        settings: RunSettings,
        workdir: Path,
        host_ip: str,
        sync_period: float,
    ) -> None:
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.pod_dir = workdir / pod_dir_name(self.namespace, self.name)
        self.pod_ip = ""
        self._pod = pod
        self._client, self._pool, self._settings = client, pool, settings
        self._objects = Objects(client)
        self._host_ip = host_ip
        self._sync_period = sync_period
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._gone = self._shutdown = False
        grace = self._grace()
        self._init = [
            ContainerRunner(c, self.pod_dir, settings, grace) for c in pod["spec"].get("initContainers") or []
        ]
        self._main = [ContainerRunner(c, self.pod_dir, settings, grace) for c in pod["spec"]["containers"]]
        self._since: dict[str, tuple[bool, str]] = {}
        self._start_time = now_rfc3339()
        self._writer = StatusWriter(client, self.namespace, self.name)
        self._thread = threading.Thread(target=self._run, name=f"pod {self.namespace}/{self.name}", daemon=True)

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        self._thread.start()

    def update(self, pod: JSON) -> None:
        with self._lock:
            self._pod = pod
        self._wake.set()

    def gone(self) -> None:
        self._gone = True
        self._wake.set()

    def shutdown(self) -> None:
        self._shutdown = True
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def container_pid(self, container: str) -> int | None:
        for runner in self._init + self._main:
            if runner.name == container and runner.process is not None:
                return runner.process.pid
        return None

    # ------------------------------------------------------------------ the pod's life

    @property
    def pod(self) -> JSON:
        with self._lock:
            return self._pod

    def _grace(self) -> float:
        pod = self.pod
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        return float(grace)

    def _stopping(self) -> bool:
        return self._gone or self._shutdown or bool(self.pod["metadata"].get("deletionTimestamp"))

    def _context(self) -> PodContext:
        return PodContext(self.pod, self.pod_ip, self._host_ip, self._objects)

    def _run(self) -> None:
        try:
            self._live()
        except Exception:  # a broken pod must not take the stand-in down; the reason goes to its log
            log.exception("pod %s/%s failed", self.namespace, self.name)
            (self.pod_dir / "kubelet-error.log").write_text(traceback.format_exc())
        finally:
            for runner in self._init + self._main:
                if runner.process is not None:
                    runner.terminate(self._context(), 0.0)
            if self.pod_ip:
                detach_pod(self.pod_ip)
            self._pool.release(self.uid)

    def _live(self) -> None:
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.pod_dir / "volumes", ignore_errors=True)  # emptyDirs start empty
        self.pod_ip = self._pool.allocate(self.uid)
        attach_pod(str(self._pool.network), self.pod_ip)
        self._publish()
        volumes = PodVolumes(self.pod, self.pod_dir, self._objects, self.pod_ip, self._host_ip)
        while not self._stopping():
            try:
                volumes.setup()
                break
            except (ConfigError, ApiError, OSError) as exc:
                for runner in self._main:
                    runner.status.waiting("ContainerCreating", str(exc))
                self._publish()
                self._sleep(1.0)
        next_sync = time.monotonic() + self._sync_period
        annotations = self.pod["metadata"].get("annotations") or {}
        while not self._stopping():
            now = time.monotonic()
            pod = self.pod
            volumes.update(pod)
            # As the kubelet: volumes are refreshed on the periodic sync, and at once when the pod object
            # changes (here: its annotations; the operator marks pods with their config's hash).
            changed = (pod["metadata"].get("annotations") or {}) != annotations
            if now >= next_sync or changed:
                self._api_call("volume sync", volumes.sync)
                next_sync = now + self._sync_period
                annotations = pod["metadata"].get("annotations") or {}
            self._tick(now, volumes)
            self._publish()
            self._sleep(TICK)
        self._terminate()

    def _tick(self, now: float, volumes: PodVolumes) -> None:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        ctx = self._context()
        for runner in self._init:
            if not runner.done:
                runner.tick(now, "Never" if policy == "Never" else "OnFailure", ctx, volumes)
                return  # init containers run one at a time, each to completion
            if runner.status.exit_code != 0:
                return  # failed for good (restartPolicy Never): the pod has failed
        for runner in self._main:
            runner.tick(now, policy, ctx, volumes)

    def _phase(self) -> str:
        if any(r.done and r.status.exit_code != 0 for r in self._init):
            return "Failed"
        never_started = any(r.process is None and r.status.last_terminated is None for r in self._main)
        if not all(r.done for r in self._init) or never_started:
            return "Pending"
        if all(r.done for r in self._main):
            return "Succeeded" if all(r.status.exit_code == 0 for r in self._main) else "Failed"
        return "Running"

    def _publish(self) -> None:
        status = pod_status(
            self._phase(),
            self.pod_ip,
            self._host_ip,
            self._start_time,
            [r.status for r in self._init],
            [r.status for r in self._main],
            self._since,
        )
        self._api_call("status update", lambda: self._writer.write(status))

    def _api_call(self, what: str, call: Callable[[], None]) -> None:
        """Run `call`; an API hiccup is logged and left to a later tick to retry."""
        try:
            call()
        except (ApiError, OSError) as exc:
            log.warning("%s of pod %s/%s failed: %s", what, self.namespace, self.name, exc)

    def _sleep(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def _terminate(self) -> None:
        grace = 0.0 if self._gone or self._shutdown else self._grace()
        ctx = self._context()
        stoppers = [threading.Thread(target=r.terminate, args=(ctx, grace), daemon=True) for r in self._main]
        for runner in self._init:
            runner.terminate(ctx, grace)
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()
        if self._gone or self._shutdown:
            return
        self._publish()
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": self.uid},
        }
        try:
            self._client.request("DELETE", pod_path(self.namespace, self.name), body)
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise
        log.info("pod %s/%s terminated and removed", self.namespace, self.name)
