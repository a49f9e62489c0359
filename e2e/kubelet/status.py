"""Pod status as the kubelet reports it, written through the API's status subresource."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from .api import JSON, MERGE_PATCH, ApiError, KubeClient, pod_path


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ContainerStatus:
    """One container's state: waiting (with a reason), running, or terminated."""

    name: str
    image: str
    state: str = "waiting"
    reason: str = "ContainerCreating"
    message: str = ""
    started_at: str = ""
    finished_at: str = ""
    exit_code: int = 0
    container_id: str = ""
    restart_count: int = 0
    ready: bool = False
    started: bool = False
    last_terminated: JSON | None = None

    def waiting(self, reason: str, message: str = "") -> None:
        self.state, self.reason, self.message, self.ready, self.started = "waiting", reason, message, False, False

    def running(self, container_id: str) -> None:
        self.state, self.reason, self.message = "running", "", ""
        self.started_at, self.container_id = now_rfc3339(), container_id

    def terminated(self, exit_code: int, reason: str = "") -> None:
        self.state, self.exit_code = "terminated", exit_code
        self.reason = reason or ("Completed" if exit_code == 0 else "Error")
        self.finished_at, self.ready, self.started = now_rfc3339(), False, False
        self.last_terminated = {"terminated": self._terminated()}

    def _terminated(self) -> JSON:
        out: JSON = {
            "exitCode": self.exit_code,
            "reason": self.reason,
            "containerID": self.container_id,
            "finishedAt": self.finished_at,
        }
        if self.started_at:
            out["startedAt"] = self.started_at
        return out

    def to_api(self) -> JSON:
        state: JSON
        if self.state == "running":
            state = {"running": {"startedAt": self.started_at}}
        elif self.state == "terminated":
            state = {"terminated": self._terminated()}
        else:
            state = {"waiting": {"reason": self.reason, **({"message": self.message} if self.message else {})}}
        out: JSON = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "state": state,
            "lastState": (self.last_terminated if self.state != "terminated" and self.last_terminated else {}),
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        return out


def _condition(kind: str, ok: bool, since: dict[str, tuple[bool, str]]) -> JSON:
    if kind not in since or since[kind][0] != ok:
        since[kind] = (ok, now_rfc3339())
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "lastTransitionTime": since[kind][1],
        "lastProbeTime": None,
    }


def pod_status(
    phase: str,
    pod_ip: str,
    host_ip: str,
    start_time: str,
    init: list[ContainerStatus],
    containers: list[ContainerStatus],
    since: dict[str, tuple[bool, str]],
) -> JSON:
    """The status object; `since` remembers each condition's last transition across calls."""
    initialized = all(c.state == "terminated" and c.exit_code == 0 for c in init)
    ready = bool(containers) and all(c.ready for c in containers)
    conditions = [
        _condition("PodReadyToStartContainers", bool(pod_ip), since),
        _condition("Initialized", initialized, since),
        _condition("Ready", ready, since),
        _condition("ContainersReady", ready, since),
        _condition("PodScheduled", True, since),
    ]
    status: JSON = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": start_time,
        "containerStatuses": [c.to_api() for c in containers],
    }
    if pod_ip:
        status["podIP"], status["podIPs"] = pod_ip, [{"ip": pod_ip}]
    if init:
        status["initContainerStatuses"] = [c.to_api() for c in init]
    return status


class StatusWriter:
    """PATCHes a pod's status when it differs from the last one written."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self._client = client
        self._path = pod_path(namespace, name) + "/status"
        self._last: Any = None

    def write(self, status: JSON) -> None:
        if status == self._last:
            return
        try:
            self._client.request("PATCH", self._path, {"status": status}, content_type=MERGE_PATCH)
        except ApiError as exc:
            if exc.status != 404:  # a pod removed meanwhile has no status to write
                raise
        self._last = status
