"""A real Kubernetes node beside a `ControlPlane`: containerd + runc + CNI bridge, kubelet, kube-proxy.

    with ControlPlane(nodes=(), routable_address=primary_ipv4()) as cp, RealNode(cp, images=[tar]) as node:
        cp.kubectl("apply", "-f", ...)   # pods run in real containers on `node.name`

Parts: kubelet and kube-proxy built like the control plane (`tools/build-tools.sh k8s-node`), containerd v2
from the Go module proxy (`containerd`), Debian's runc and containernetworking-plugins (`/usr/lib/cni`), the
pause image built from `tools/pause` (`pause`). The node advertises `nvidia.com/gpu` capacity (patched into
its status), so pods requesting a GPU schedule on it and run their CPU fallback.

Host-wide: one real node per machine (`node_host.host_lock`); the node's state lives in two fixed trees
(`NodeLayout`) and the kubelet's and kube-proxy's iptables chains; `stop` evicts the pods, stops the
daemons, runs `kube-proxy --cleanup` and sweeps the host (`node_host.sweep_host`), which `start` also does
first in case a crashed run left something. Logs go to a work directory kept when starting fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.infra import node_config, node_host
from tests.infra.api import JSON
from tests.infra.certs import CertKey, generate_client_cert, generate_serving_cert
from tests.infra.controlplane import ControlPlane
from tests.infra.kubeconfig import client_cert_kubeconfig, write_kubeconfig
from tests.infra.node_config import NodeLayout, NodePorts
from tests.infra.node_images import ImageArchive
from tests.infra.process import ManagedProcess, http_status, poll_until
from tests.infra.tools import ToolLocator
from tests.support.ports import free_ports

GPU_RESOURCE = "nvidia.com/gpu"
TEARDOWN_TAINT = {"key": "ensemble.test/teardown", "effect": "NoExecute"}


class RealNode:
    """containerd + kubelet + kube-proxy registered with `control_plane`, as a context manager."""

    def __init__(
        self,
        control_plane: ControlPlane,
        *,
        name: str = "ensemble-node",
        images: Sequence[ImageArchive] = (),
        gpus: int = 1,
        layout: NodeLayout | None = None,
        locator: ToolLocator | None = None,
        startup_timeout: float = 180.0,
        lock_timeout: float = 600.0,
        keep_workdir: bool = False,
    ) -> None:
        self.name = name
        self._cp = control_plane
        self._images = tuple(images)
        self._gpus = gpus
        self.layout = layout or NodeLayout()
        self._locator = locator or ToolLocator.from_env()
        self._startup_timeout = startup_timeout
        self._lock_timeout = lock_timeout
        self._keep_workdir = keep_workdir
        self._lock: contextlib.ExitStack | None = None
        self._processes: list[ManagedProcess] = []
        self._workdir: Path | None = None
        self._node_ip: str | None = None
        self.stale_found: list[str] = []  # what `start` swept up from an earlier run
        self.timings: dict[str, float] = {}  # seconds: start, images, node_ready (after kubelet start), stop

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        began = time.monotonic()
        binaries = {
            name: self._locator.binary(name)
            for name in ("kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2", "ctr")
        }
        pause = ImageArchive(self._locator.ensure("pause") / "image.tar", node_config.PAUSE_IMAGE)
        lock = contextlib.ExitStack()
        lock.enter_context(node_host.host_lock(self._lock_timeout))
        self._lock = lock
        self._workdir = Path(tempfile.mkdtemp(prefix="ensemble-node-"))
        try:
            self.stale_found = node_host.sweep_host(self.layout)
            self._start(binaries, (pause, *self._images))
        except BaseException:
            self._keep_workdir = True  # the error points at the logs in it
            self.stop()
            raise
        self.timings["start"] = time.monotonic() - began

    def _start(self, binaries: dict[str, Path], images: Sequence[ImageArchive]) -> None:
        layout = self.layout
        node_ip = self._node_ip = node_host.primary_ipv4()
        for directory in (layout.config_dir, layout.pki_dir, layout.cni_conf_dir, layout.state, layout.pod_logs):
            directory.mkdir(parents=True, exist_ok=True)
        ports = NodePorts(*free_ports(4))
        kubelet_kubeconfig, proxy_kubeconfig, serving = self._write_credentials(node_ip)

        config = layout.config_dir / "containerd.toml"
        config.write_text(node_config.containerd_config(layout))
        (layout.cni_conf_dir / f"10-{node_config.CNI_NETWORK}.conflist").write_text(node_config.cni_conflist(layout))
        containerd = self._spawn("containerd", node_config.containerd_argv(binaries["containerd"], config=config))
        poll_until(
            lambda: self.ctr("version", check=False).returncode == 0,
            timeout=self._startup_timeout,
            what="containerd to answer",
            alive=self._processes,
            detail=lambda: containerd.log_tail(),
        )
        began = time.monotonic()
        for image in images:
            self.import_image(image)
        self.timings["images"] = time.monotonic() - began

        kubelet_config = layout.config_dir / "kubelet.yaml"
        kubelet_config.write_text(
            node_config.kubelet_config(
                layout, ports, node_ip=node_ip, ca_file=self._cp.ca_cert_path, tls_cert=serving[0], tls_key=serving[1]
            )
        )
        began = time.monotonic()
        kubelet = self._spawn(
            "kubelet",
            node_config.kubelet_argv(
                binaries["kubelet"],
                layout,
                config=kubelet_config,
                kubeconfig=kubelet_kubeconfig,
                node_name=self.name,
                node_ip=node_ip,
            ),
        )
        poll_until(
            self.ready,
            timeout=self._startup_timeout,
            what=f"node {self.name} to become Ready",
            alive=self._processes,
            detail=lambda: kubelet.log_tail(),
        )
        self.timings["node_ready"] = time.monotonic() - began
        if self._gpus:
            self._advertise_gpus()

        proxy_config = layout.config_dir / "kube-proxy.yaml"
        proxy_config.write_text(node_config.kube_proxy_config(ports, kubeconfig=proxy_kubeconfig, node_name=self.name))
        proxy = self._spawn("kube-proxy", node_config.kube_proxy_argv(binaries["kube-proxy"], config=proxy_config))
        poll_until(
            lambda: http_status(f"http://127.0.0.1:{ports.proxy_healthz}/healthz") == 200,
            timeout=self._startup_timeout,
            what="kube-proxy to be healthy",
            alive=self._processes,
            detail=lambda: proxy.log_tail(),
        )

    def _write_credentials(self, node_ip: str) -> tuple[Path, Path, tuple[Path, Path]]:
        """Client certificates (kubelet as system:node:<name>, kube-proxy as system:kube-proxy) and the
        kubelet's serving certificate, all signed by the cluster CA."""
        pki = self._cp.pki
        ca = CertKey(pki.ca.cert.read_bytes(), pki.ca.key.read_bytes())
        directory = self.layout.pki_dir

        def kubeconfig(stem: str, user: str, pair: CertKey) -> Path:
            config = client_cert_kubeconfig(self._cp.api_url, ca.cert_pem, pair.cert_pem, pair.key_pem, user=user)
            return write_kubeconfig(directory / f"{stem}.kubeconfig", config)

        node_user = f"system:node:{self.name}"
        kubelet = kubeconfig("kubelet", node_user, generate_client_cert(ca, node_user, ["system:nodes"]))
        proxy = kubeconfig("kube-proxy", "system:kube-proxy", generate_client_cert(ca, "system:kube-proxy"))
        serving = generate_serving_cert(ca, self.name, dns_names=[self.name], ip_addresses=[node_ip, "127.0.0.1"])
        cert, key = directory / "kubelet-serving.crt", directory / "kubelet-serving.key"
        cert.write_bytes(serving.cert_pem)
        key.write_bytes(serving.key_pem)
        key.chmod(0o600)
        return kubelet, proxy, (cert, key)

    def _advertise_gpus(self) -> None:
        """Extended-resource capacity patched into the node's status; the kubelet keeps it and derives
        allocatable from it."""
        patch = {"status": {"capacity": {GPU_RESOURCE: str(self._gpus)}}}
        self._cp.kubectl("patch", "node", self.name, "--subresource=status", "--type=merge", "-p", json.dumps(patch))
        poll_until(
            lambda: self.node().get("status", {}).get("allocatable", {}).get(GPU_RESOURCE) == str(self._gpus),
            timeout=self._startup_timeout,
            what=f"{GPU_RESOURCE} in the allocatable of {self.name}",
            alive=self._processes,
        )

    def stop(self) -> None:
        """Evict the pods, stop the daemons, clean kube-proxy's rules and sweep the host. Idempotent; a
        node that does not hold the host lock has nothing to stop (and must not sweep another's state)."""
        if self._lock is None:
            return
        began = time.monotonic()
        try:
            if self.processes.get("kubelet") is not None and self.processes["kubelet"].running:
                with contextlib.suppress(Exception):  # best effort: the sweep below kills whatever is left
                    self._evict_pods()
            for proc in reversed(self._processes):
                proc.stop()
            self._processes.clear()
            proxy = self._locator.tool_dir("k8s-node") / "kube-proxy"
            if proxy.exists():
                subprocess.run([str(proxy), "--cleanup"], capture_output=True, timeout=120, check=False)
            node_host.sweep_host(self.layout)
        finally:
            if self._lock is not None:
                self._lock.close()
                self._lock = None
            if self._workdir is not None and not self._keep_workdir:
                shutil.rmtree(self._workdir, ignore_errors=True)
                self._workdir = None
        self.timings["stop"] = time.monotonic() - began

    def _evict_pods(self) -> None:
        """Taint the node NoExecute (the controller-manager evicts every pod, none comes back) and wait for
        the kubelet to stop their containers and tear down their sandboxes (CNI DEL, network namespaces)."""
        patch = {"spec": {"unschedulable": True, "taints": [TEARDOWN_TAINT]}}
        self._cp.kubectl("patch", "node", self.name, "--type=merge", "-p", json.dumps(patch))
        poll_until(
            lambda: not self.running_tasks(),
            timeout=120,
            what="the node's containers to stop",
        )

    # ---------------------------------------------------------------- accessors

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("node is not started")
        return self._workdir

    @property
    def node_ip(self) -> str:
        if self._node_ip is None:
            raise RuntimeError("node is not started")
        return self._node_ip

    @property
    def processes(self) -> dict[str, ManagedProcess]:
        return {p.name: p for p in self._processes}

    def logs(self, component: str, lines: int = 100) -> str:
        """Last lines of containerd's, the kubelet's or kube-proxy's log."""
        return self.processes[component].log_tail(lines)

    def node(self) -> JSON:
        return self._cp.api("GET", f"/api/v1/nodes/{self.name}")

    def ready(self) -> bool:
        try:
            return self._cp.node_ready(self.name)
        except Exception:  # not registered yet
            return False

    # ---------------------------------------------------------------- containerd

    def ctr(self, *args: str, check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """containerd's CLI against this node's containerd, in the CRI's namespace (k8s.io)."""
        ctr = self._locator.binary("ctr")
        argv = [str(ctr), "--address", str(self.layout.containerd_socket), "--namespace", "k8s.io", *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def import_image(self, image: ImageArchive) -> None:
        """Import an image tarball (docker-archive or OCI) so pods can use `image.tag` without a registry."""
        self.ctr("images", "import", "--snapshotter", "overlayfs", str(image.path))
        images = self.ctr("images", "list", "--quiet").stdout.split()
        if image.tag not in images and f"docker.io/{image.tag}" not in images:
            raise RuntimeError(f"importing {image.path} did not give {image.tag}: {images}")

    def running_tasks(self) -> list[str]:
        listing = self.ctr("tasks", "list", check=False).stdout.splitlines()[1:]
        return [line.split()[0] for line in listing if line.split() and line.split()[-1] == "RUNNING"]

    # ---------------------------------------------------------------- internals

    def _spawn(self, name: str, argv: Sequence[str]) -> ManagedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBE")}
        # containerd finds its shim beside itself, runc in /usr/sbin.
        shim_dir = self._locator.tool_dir("containerd")
        env["PATH"] = f"{shim_dir}:/usr/sbin:/usr/bin:/sbin:/bin"
        proc = ManagedProcess(name, argv, self.workdir / "logs" / f"{name}.log", env=env)
        self._processes.append(proc)
        proc.start()
        return proc
