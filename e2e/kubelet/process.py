"""A container as a local process: environment, command line, a private mount namespace, signals.

Each container runs as `unshare --mount --propagation private -- python enter.py <spec>`: `enter.py`
bind-mounts every volume directory onto its mountPath (creating the mount point on the host if missing;
the bind is only visible inside the container's own mount namespace), changes to `workingDir` and `exec`s
the container's command, so the process the kubelet stand-in signals is the container's main process.
The image is ignored: the programs installed on this machine stand in for it. A container that has no
`command` (or whose command is `ensemble-runtime`) runs our runtime with the container's args.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .api import JSON
from .network import runtime_address_args
from .objects import ConfigError, Objects, field_value

RUNTIME_COMMAND = "ensemble-runtime"
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes `$(VAR)` expansion: defined variables are replaced, `$$` escapes, the rest stays."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR.sub(replace, text)


@dataclass(frozen=True)
class PodContext:
    """What a container's environment and probes need to know about its pod."""

    pod: JSON
    pod_ip: str
    host_ip: str
    objects: Objects

    @property
    def namespace(self) -> str:
        namespace: str = self.pod["metadata"]["namespace"]
        return namespace


def container_env(container: JSON, ctx: PodContext, base: Mapping[str, str]) -> dict[str, str]:
    """`base` (the stand-in's defaults: PATH, HOME, ...) + HOSTNAME + envFrom + env, in kubelet's order."""
    env = {**base, "HOSTNAME": ctx.pod["metadata"]["name"]}
    for source in container.get("envFrom") or []:
        kind = "configMap" if "configMapRef" in source else "secret"
        ref = source.get("configMapRef") or source["secretRef"]
        data = ctx.objects.source(kind, ctx.namespace, ref["name"], bool(ref.get("optional")))
        env.update({source.get("prefix", "") + k: v.decode() for k, v in data.items()})
    for var in container.get("env") or []:
        value = _env_value(var, container, ctx, env)
        if value is not None:
            env[var["name"]] = value
    return env


def _env_value(var: JSON, container: JSON, ctx: PodContext, env: Mapping[str, str]) -> str | None:
    if "valueFrom" not in var:
        return expand(var.get("value", ""), env)
    source = var["valueFrom"]
    if "fieldRef" in source:
        return field_value(ctx.pod, source["fieldRef"]["fieldPath"], ctx.pod_ip, ctx.host_ip)
    for kind in ("configMap", "secret"):
        if f"{kind}KeyRef" in source:
            value = ctx.objects.key(kind, ctx.namespace, source[f"{kind}KeyRef"])
            return None if value is None else value.decode()
    if "resourceFieldRef" in source:
        ref = source["resourceFieldRef"]
        kind, _, resource = ref["resource"].partition(".")
        return str((container.get("resources") or {}).get(kind, {}).get(resource, "0"))
    raise ConfigError(f"unsupported valueFrom for {var['name']}: {sorted(source)}")


def is_runtime(container: JSON) -> bool:
    command = container.get("command") or []
    return not command or os.path.basename(command[0]) == RUNTIME_COMMAND


def container_argv(container: JSON, env: Mapping[str, str], runtime: Sequence[str], pod_ip: str) -> list[str]:
    """The command line: command + args with `$(VAR)` expanded; the runtime (image entrypoint) if no command."""
    args = [expand(a, env) for a in container.get("args") or []]
    if not is_runtime(container):
        return [expand(c, env) for c in container["command"]] + args
    extra = [expand(c, env) for c in (container.get("command") or [])[1:]]
    return [*runtime, *extra, *args, *runtime_address_args(pod_ip)]


@dataclass(frozen=True)
class Mount:
    source: Path
    target: str
    read_only: bool = False


def stand_in_image() -> list[str]:
    """What stands in for the image (the project checkout, its venv, the base Python): a volume mounted over
    a parent of these (an emptyDir on /tmp, when the checkout lives under /tmp) must not hide them."""
    project = Path(__file__).resolve().parents[2]
    paths = {str(project), sys.prefix, sys.base_prefix}
    return sorted(p for p in paths if Path(p).is_dir())


def _tool(name: str) -> str:
    return shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin") or name


def wrapper_argv(
    mounts: Sequence[Mount], working_dir: str | None, argv: Sequence[str], netns: str | None = None
) -> list[str]:
    """In the pod's network namespace, `unshare` a private mount namespace, then `enter.py` binds the
    volumes and execs `argv`."""
    spec = {
        "mounts": [{"source": str(m.source), "target": m.target, "read_only": m.read_only} for m in mounts],
        "working_dir": working_dir,
        "argv": list(argv),
        "keep": stand_in_image(),
    }
    enter = [sys.executable, "-I", "-S", str(Path(__file__).with_name("enter.py")), json.dumps(spec)]
    in_netns = [_tool("ip"), "netns", "exec", netns] if netns else []
    return [*in_netns, _tool("unshare"), "--mount", "--propagation", "private", "--", *enter]


class ContainerProcess:
    """One run of a container; stdout and stderr are appended to `log_path`."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        mounts: Sequence[Mount],
        working_dir: str | None,
        log_path: Path,
        netns: str | None = None,
    ) -> None:
        self.env = dict(env)
        self.working_dir = working_dir
        wrapper = wrapper_argv(mounts, working_dir, argv, netns)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                wrapper,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd="/",
            )
        self.started_at = time.time()

    @property
    def pid(self) -> int:
        return self._popen.pid

    def poll(self) -> int | None:
        """The exit code once exited (a signal N gives 128 + N, as container runtimes report it)."""
        code = self._popen.poll()
        return None if code is None else (128 - code if code < 0 else code)

    def signal(self, sig: signal.Signals, group: bool = False) -> None:
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig) if group else os.kill(self.pid, sig)

    def stop(self, grace: float, before: Callable[[float], None] | None = None) -> int:
        """Run `before(deadline)` (preStop), SIGTERM, wait until the grace period ends, SIGKILL the group."""
        deadline = time.monotonic() + grace
        if before is not None and grace > 0 and self.poll() is None:
            before(deadline)
        self.signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=max(0.0, deadline - time.monotonic()))
        self.signal(signal.SIGKILL, group=True)
        self._popen.wait()
        code = self.poll()
        assert code is not None
        return code

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        """A command line running `argv` inside this container's mount namespace (probes, preStop)."""
        wd = [f"--wd={self.working_dir}"] if self.working_dir else []
        return [_tool("nsenter"), f"--target={self.pid}", "--mount", "--net", *wd, "--", *argv]

    def exec(self, argv: Sequence[str], timeout: float) -> int:
        """Run `argv` in the container (its env, its mounts); its exit code, or -1 on timeout."""
        try:
            result = subprocess.run(
                self.exec_argv(argv),
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return -1
        return result.returncode
