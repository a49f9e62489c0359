"""One container of a pod over its lifetime: start, probes, restarts with backoff, termination."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .api import JSON, ApiError
from .network import netns_name
from .objects import ConfigError
from .probes import ProbeState, run_handler
from .process import ContainerProcess, PodContext, container_argv, container_env
from .status import ContainerStatus
from .volumes import PodVolumes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunSettings:
    """Node-wide settings every container run uses."""

    runtime_command: tuple[str, ...]
    base_env: Mapping[str, str]
    backoff_initial: float = 1.0  # kubelet: 10 s, doubling to 300 s; shorter here so tests see restarts
    backoff_max: float = 10.0


class ContainerRunner:
    """Drives one container: call `tick()` often; `terminate()` once when the pod goes away."""

    def __init__(self, spec: JSON, pod_dir: Path, settings: RunSettings, grace: float) -> None:
        self.spec = spec
        self.log_path = pod_dir / f"{spec['name']}.log"
        self.status = ContainerStatus(spec["name"], spec.get("image", ""))
        self.process: ContainerProcess | None = None
        self._settings = settings
        self._grace = grace
        self._start_at: float | None = 0.0  # monotonic time of the next (re)start; None: never again
        self._probes: dict[str, ProbeState] = {}

    @property
    def name(self) -> str:
        name: str = self.spec["name"]
        return name

    @property
    def done(self) -> bool:
        """Terminated for good (it will not be restarted)."""
        return self.process is None and self._start_at is None

    def tick(self, now: float, restart_policy: str, ctx: PodContext, volumes: PodVolumes) -> None:
        if self.process is None:
            if self._start_at is not None and now >= self._start_at:
                self._start(now, ctx, volumes)
            return
        code = self.process.poll()
        if code is not None:
            self._exited(code, restart_policy, now)
            return
        self._probe(now, ctx, restart_policy)

    def _start(self, now: float, ctx: PodContext, volumes: PodVolumes) -> None:
        try:
            env = container_env(self.spec, ctx, self._settings.base_env)
            argv = container_argv(self.spec, env, self._settings.runtime_command, ctx.pod_ip)
            mounts = volumes.mounts(self.spec)
        except (ConfigError, ApiError, OSError) as exc:  # missing or unreadable ConfigMap/Secret: retry
            self.status.waiting("CreateContainerConfigError", str(exc))
            self._start_at = now + 1.0
            return
        if self.status.last_terminated is not None:
            self.status.restart_count += 1
        self.process = ContainerProcess(
            argv, env, mounts, self.spec.get("workingDir"), self.log_path, netns_name(ctx.pod_ip)
        )
        log.info(
            "started %s/%s container %s: pid %d: %s",
            ctx.namespace,
            ctx.pod["metadata"]["name"],
            self.name,
            self.process.pid,
            argv,
        )
        self.status.running(f"e2e://{self.process.pid}")
        self._probes = {
            kind: ProbeState(self.spec[f"{kind}Probe"], now, result=(kind == "liveness"))
            for kind in ("startup", "liveness", "readiness")
            if self.spec.get(f"{kind}Probe")
        }
        self._update_flags()

    def _update_flags(self) -> None:
        startup = self._probes.get("startup")
        self.status.started = startup is None or startup.result
        readiness = self._probes.get("readiness")
        self.status.ready = self.status.started and (readiness is None or readiness.result)

    def _check(self, probe: ProbeState, ctx: PodContext) -> bool:
        assert self.process is not None
        return run_handler(probe.spec, self.spec, ctx.pod_ip, self.process.exec, probe.timeout)

    def _probe(self, now: float, ctx: PodContext, restart_policy: str) -> None:
        startup = self._probes.get("startup")
        if startup is not None and not startup.result:
            if startup.due(now):
                startup.record(self._check(startup, ctx), now)
                if startup.failures >= int(startup.spec.get("failureThreshold", 3)):
                    self._kill("startup probe failed", ctx, restart_policy)
                    return
            self._update_flags()
            return
        liveness = self._probes.get("liveness")
        if liveness is not None and liveness.due(now) and not liveness.record(self._check(liveness, ctx), now):
            self._kill("liveness probe failed", ctx, restart_policy)
            return
        readiness = self._probes.get("readiness")
        if readiness is not None and readiness.due(now):
            readiness.record(self._check(readiness, ctx), now)
        self._update_flags()

    def _kill(self, why: str, ctx: PodContext, restart_policy: str) -> None:
        assert self.process is not None
        log.info("killing container %s (pid %d): %s", self.name, self.process.pid, why)
        code = self.process.stop(self._grace, before=lambda deadline: self._pre_stop(ctx, deadline))
        self._exited(code, restart_policy, time.monotonic())

    def _exited(self, code: int, restart_policy: str, now: float) -> None:
        self.process = None
        self.status.terminated(code)
        restart = restart_policy == "Always" or (restart_policy == "OnFailure" and code != 0)
        if not restart:
            self._start_at = None
            return
        delay = min(
            self._settings.backoff_max, self._settings.backoff_initial * 2 ** min(self.status.restart_count, 16)
        )
        self._start_at = now + delay
        self.status.waiting("CrashLoopBackOff", f"back-off {delay:.0f}s restarting failed container {self.name}")

    def _pre_stop(self, ctx: PodContext, deadline: float) -> None:
        handler = (self.spec.get("lifecycle") or {}).get("preStop")
        if handler is None or self.process is None:
            return
        try:
            ok = run_handler(handler, self.spec, ctx.pod_ip, self.process.exec, max(0.0, deadline - time.monotonic()))
        except (OSError, ValueError) as exc:
            ok = False
            log.warning("preStop of %s failed: %s", self.name, exc)
        log.info("preStop of %s: %s", self.name, "ok" if ok else "failed")

    def terminate(self, ctx: PodContext, grace: float) -> None:
        """Stop for good: preStop, SIGTERM, SIGKILL after `grace` seconds."""
        self._start_at = None
        if self.process is None:
            return
        code = self.process.stop(grace, before=lambda deadline: self._pre_stop(ctx, deadline))
        self.process = None
        self.status.terminated(code)
