"""`KubeletStandIn` (a context manager for tests) and the command line `python -m e2e.kubelet`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from .api import JSON, KubeClient
from .container import RunSettings
from .network import DEFAULT_POD_CIDR, AddressPool, ensure_bridge, remove_bridge
from .node import NodeAgent, NodeSpec
from .pods import PodManager, wait_for
from .worker import PodWorker, pod_dir_name

log = logging.getLogger("e2e.kubelet")

_PASSED_THROUGH = ("PYTHONPATH", "LANG", "LC_ALL", "TZ")


def default_runtime_command() -> tuple[str, ...]:
    """The venv's `ensemble-runtime` console script, else `python -m ensemble_runtime`."""
    script = Path(sys.executable).parent / "ensemble-runtime"
    return (str(script),) if script.exists() else (sys.executable, "-m", "ensemble_runtime")


def default_base_env() -> dict[str, str]:
    """What an image would provide: PATH (this venv first), HOME; plus PYTHONPATH and locale from here."""
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
    }
    env.update({k: os.environ[k] for k in _PASSED_THROUGH if k in os.environ})
    return env


class KubeletStandIn:
    """Runs the pods bound to one node as local processes, until stopped.

        with KubeletStandIn(cp.kubeconfig_path, workdir=tmp_path) as kubelet:
            ...  # create pods with nodeSelector {"kubernetes.io/hostname": kubelet.node_name}
            kubelet.logs("default", "web-0", "web")

    On exit every pod's processes are killed and (unless `deregister=False`) the Node is deleted, so the
    scheduler stops sending pods to it; the pod garbage collector then removes its pods' objects.
    """

    def __init__(
        self,
        kubeconfig: Path,
        *,
        workdir: Path,
        node: NodeSpec | None = None,
        pod_cidr: str = DEFAULT_POD_CIDR,
        runtime_command: Sequence[str] | None = None,
        base_env: Mapping[str, str] | None = None,
        backoff_initial: float = 1.0,
        backoff_max: float = 10.0,
        sync_period: float = 0.5,
        heartbeat_seconds: float = 10.0,
        deregister: bool = True,
    ) -> None:
        self.workdir = workdir
        self.node = node or NodeSpec()
        self._client = KubeClient.from_kubeconfig(kubeconfig)
        self._pod_cidr = pod_cidr
        self._pool: AddressPool | None = None
        self._settings = RunSettings(
            runtime_command=tuple(runtime_command or default_runtime_command()),
            base_env=dict(base_env if base_env is not None else default_base_env()),
            backoff_initial=backoff_initial,
            backoff_max=backoff_max,
        )
        self._sync_period = sync_period
        self._deregister = deregister
        self._agent = NodeAgent(self._client, self.node, heartbeat_seconds)
        self._pods = PodManager(self._client, self.node.name, self._make_worker)
        self._log_handler: logging.Handler | None = None

    @property
    def node_name(self) -> str:
        return self.node.name

    @property
    def pod_cidr(self) -> str:
        """Where pod IPs come from; the first address is the gateway (the host side, e.g. for S3)."""
        if self._pool is None:
            raise RuntimeError("the kubelet stand-in is not started")
        return str(self._pool.network)

    def _make_worker(self, pod: JSON) -> PodWorker:
        assert self._pool is not None, "started"
        return PodWorker(
            pod, self._client, self._pool, self._settings, self.workdir, self.node.address, self._sync_period
        )

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(self.workdir / "kubelet.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(threadName)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        self._log_handler = handler
        cidr = self._pod_cidr
        ensure_bridge(cidr)  # pods are network namespaces hanging off this bridge (needs root)
        self._pool = AddressPool(cidr)
        self._agent.start()
        self._pods.start()
        wait_for(self._pods.synced.is_set, timeout, "the first list of pods")

    def stop(self) -> None:
        self._pods.stop()
        self._agent.stop(self._deregister)
        remove_bridge(self._pod_cidr)
        if self._log_handler is not None:
            log.removeHandler(self._log_handler)
            self._log_handler.close()
            self._log_handler = None

    # ------------------------------------------------------------------ looking in

    def pod_dir(self, namespace: str, pod: str) -> Path:
        """`<workdir>/<namespace>_<pod>`: container logs (`<container>.log`) and `volumes/<name>`."""
        return self.workdir / pod_dir_name(namespace, pod)

    def logs(self, namespace: str, pod: str, container: str) -> str:
        """Everything the container wrote (all its runs, appended), or "" before it first started."""
        path = self.pod_dir(namespace, pod) / f"{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def container_pid(self, namespace: str, pod: str, container: str) -> int | None:
        """The process id of the container's current run, if it is running."""
        for worker in self._pods.workers():
            if (worker.namespace, worker.name) == (namespace, pod):
                return worker.container_pid(container)
        return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.kubelet", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--node", default=NodeSpec().name, help="node name to register and serve")
    parser.add_argument("--workdir", type=Path, required=True, help="pod directories (logs, volumes) go here")
    parser.add_argument("--pod-cidr", default=DEFAULT_POD_CIDR, help="pod IPs come from here (made local)")
    parser.add_argument("--keep-node", action="store_true", help="do not delete the Node on exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(levelname)s %(message)s")
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with KubeletStandIn(
        args.kubeconfig,
        workdir=args.workdir,
        node=NodeSpec(name=args.node),
        pod_cidr=args.pod_cidr,
        deregister=not args.keep_node,
    ):
        log.info("serving node %s; pod directories under %s", args.node, args.workdir)
        done.wait()
    return 0
