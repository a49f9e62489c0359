"""Helpers for the image tests: containers run as Kubernetes runs them, and waiting on their state."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.infra.images import DockerDaemon
from tests.infra.process import poll_until

T = TypeVar("T")

# As the operator's runtime pods and the chart's operator pod run (render/workload.py, the chart's
# deployment.yaml): read-only root, /tmp writable (an emptyDir there), no capabilities, no privilege gain.
# Host network: the tests reach the ports on loopback; the daemon has no bridge.
POD_LIKE = (
    "--network", "host",
    "--read-only",
    "--tmpfs", "/tmp:rw,mode=1777",
    "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges",
)  # fmt: skip


@dataclass(frozen=True)
class Exit:
    code: int
    oom_killed: bool
    seconds_after_signal: float


def state(daemon: DockerDaemon, container: str) -> dict[str, Any]:
    (document,) = daemon.inspect(container)
    result: dict[str, Any] = document["State"]  # type: ignore[assignment]
    return result


def host_pid(daemon: DockerDaemon, container: str) -> int:
    """The host's PID of the container's PID 1."""
    return int(state(daemon, container)["Pid"])


def process_ids(pid: int) -> tuple[list[int], list[int]]:
    """(real, effective, saved, fs) uids and gids of a host process, from /proc."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return [int(v) for v in fields["Uid"].split()], [int(v) for v in fields["Gid"].split()]


def command_line(pid: int) -> list[str]:
    return [part.decode() for part in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if part]


def wait_running(daemon: DockerDaemon, container: str, probe: Callable[[], T | None], *, timeout: float, what: str) -> T:
    """Call `probe` until it returns something other than None (its exceptions count as "not yet"), failing at
    once, with the container's logs, if the container stops."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        if not state(daemon, container)["Running"]:
            raise AssertionError(f"container stopped while waiting for {what}:\n{daemon.logs(container)}")
        try:
            result = probe()
        except Exception as exc:  # the probe's failures are what we are waiting out
            last_error, result = exc, None
        if result is not None:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error!r})\n"
                f"{daemon.logs(container)}"
            )
        time.sleep(0.5)


def terminate(daemon: DockerDaemon, container: str, *, timeout: float) -> Exit:
    """Send SIGTERM to the container's PID 1 (as the kubelet does on pod deletion) and wait for it to exit.

    Nothing sends SIGKILL: a PID 1 that ignores SIGTERM (the kernel drops signals PID 1 has no handler for)
    keeps running and the wait times out.
    """
    sent = time.monotonic()
    daemon.docker("kill", "--signal", "TERM", container)
    poll_until(
        lambda: not state(daemon, container)["Running"],
        timeout=timeout,
        what="the container to exit after SIGTERM",
        detail=lambda: daemon.logs(container),
    )
    elapsed = time.monotonic() - sent
    final = state(daemon, container)
    return Exit(code=int(final["ExitCode"]), oom_killed=bool(final["OOMKilled"]), seconds_after_signal=elapsed)
