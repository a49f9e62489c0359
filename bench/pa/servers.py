"""The servers perf_analyzer measures: configurations of ours (extra runtime arguments) and the Triton peer,
optionally pinned to one CPU with `taskset` (children, e.g. Triton's python stubs, inherit the affinity)."""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.pa.report import TRITON
from bench.triton_peer import TritonInstall, TritonPeer
from tests.infra.certs import generate_ca, generate_serving_cert
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ClientTls, ServerProcess


@dataclass(frozen=True)
class Pinning:
    """CPU lists for `taskset -c`: the server's and the load generator's (None: not pinned)."""

    server: str | None = None
    client: str | None = None

    def server_prefix(self) -> list[str]:
        return ["taskset", "-c", self.server] if self.server else []

    def client_prefix(self) -> list[str]:
        return ["taskset", "-c", self.client] if self.client else []


def choose_pinning(pin: bool | None) -> Pinning:
    """Server on the first CPU this process may use, perf_analyzer on the second; by default (`pin` None) only
    where there are at least two."""
    cpus = sorted(os.sched_getaffinity(0))
    if pin is False or (pin is None and len(cpus) < 2):
        return Pinning()
    if len(cpus) < 2:
        raise SystemExit(f"--pin needs at least 2 CPUs, this process may use {cpus}")
    return Pinning(server=str(cpus[0]), client=str(cpus[1]))


@dataclass(frozen=True)
class OursConfig:
    """One configuration of our runtime: a name for the tables and extra command-line arguments."""

    name: str
    args: tuple[str, ...] = ()
    tree: Path | None = None  # a `runtime/` directory to run instead of this checkout's (A/B between trees)


def parse_ours(text: str, common: Sequence[str] = ()) -> OursConfig:
    """`NAME[@RUNTIME_DIR]=ARGS` (ARGS split like a shell would, may be empty) plus the `--ours-arg` arguments for
    all; RUNTIME_DIR: the `runtime/` directory of another tree (a worktree with its own built extension)."""
    label, _, args = text.partition("=")
    name, _, tree = label.partition("@")
    if not name or name == TRITON:
        raise ValueError(f"--ours {text!r}: expected NAME[@RUNTIME_DIR]=ARGS with a NAME other than {TRITON!r}")
    if tree and not (Path(tree) / "ensemble_runtime").is_dir():
        raise ValueError(f"--ours {text!r}: {tree} holds no ensemble_runtime package")
    return OursConfig(name, (*common, *shlex.split(args)), Path(tree).resolve() if tree else None)


def ours_configs(specs: Sequence[str], common: Sequence[str]) -> list[OursConfig]:
    configs = [parse_ours(s, common) for s in specs] or [OursConfig("ours", tuple(common))]
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f"--ours names must differ: {names}")
    return configs


class PinnedRuntime(RuntimeProcess):
    """Our runtime, its command line behind `taskset` when pinned."""

    def __init__(self, repositories: Sequence[Path], config: OursConfig, pinning: Pinning) -> None:
        super().__init__(repositories, config.args)
        self.prefix = pinning.server_prefix()
        if config.tree is not None:  # its package first, before this checkout's
            self.env["PYTHONPATH"] = os.pathsep.join([str(config.tree), self.env["PYTHONPATH"]])

    def command(self) -> tuple[Sequence[str], Mapping[str, str]]:
        args, env = super().command()
        return [*self.prefix, *args], env


class PinnedTriton(TritonPeer):
    """The Triton peer, its command line behind `taskset` when pinned (the stubs it forks inherit it), and behind
    `chrt --batch 0` with `batch`: every thread of it and of its stubs under SCHED_BATCH, as ours runs with
    `--thread-policy=batch`, to tell what the policy alone gives either server."""

    def __init__(self, repositories: Sequence[Path], install: TritonInstall, pinning: Pinning, batch: bool = False,
                 extra_args: Sequence[str] = ()) -> None:
        super().__init__(repositories, extra_args, install=install)
        self.prefix = [*pinning.server_prefix(), *(["chrt", "--batch", "0"] if batch else [])]

    def command(self) -> tuple[Sequence[str], Mapping[str, str]]:
        args, env = super().command()
        return [*self.prefix, *args], env


class FloorServer(ServerProcess):
    """`bench.pa.floor` (the native core and one loop wake-up per call, nothing else), gRPC only, pinned like
    the servers."""

    label = "floor"

    def __init__(self, pinning: Pinning, threads: int = 1, in_core: bool = False, onnx_lane: Path | None = None) -> None:
        super().__init__()
        self.prefix = pinning.server_prefix()
        self.threads = threads
        self.in_core = in_core  # --in-core: the core answers ModelInfer itself
        self.onnx_lane = onnx_lane  # --onnx-lane: this ONNX model served on the core's lane

    def command(self) -> tuple[Sequence[str], Mapping[str, str]]:
        root = str(Path(__file__).resolve().parents[2])
        paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        return [*self.prefix, sys.executable, "-m", "bench.pa.floor", f"--grpc-port={self.grpc_port}",
                f"--threads={self.threads}", *(["--in-core"] if self.in_core else []),
                *([f"--onnx-lane={self.onnx_lane}"] if self.onnx_lane else [])], env


def server_url(server: ServerProcess, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.http_url


@contextlib.contextmanager
def busy_neighbor(pinning: Pinning) -> Iterator[None]:
    """A process that keeps the servers' CPU busy (a loop, under the default policy) for the block: a core shared
    with another workload, as on a node where the runtime's pod has no CPUs of its own."""
    process = subprocess.Popen([*pinning.server_prefix(), sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def tls_setup(directory: Path, rsa_key: bool = False) -> tuple[ClientTls, list[str]]:
    """A CA and a server certificate for 127.0.0.1 (a P-256 key, or RSA 2048), written under `directory`: how
    clients reach the servers, and the flags with which ours and Triton (the same flags) serve gRPC over TLS."""
    directory.mkdir(parents=True)
    ca = generate_ca("perf-analyzer-bench")
    server = generate_serving_cert(ca, "server", dns_names=["localhost"], ip_addresses=["127.0.0.1"], rsa_key=rsa_key)
    for name, pem in (("ca.crt", ca.cert_pem), ("server.crt", server.cert_pem), ("server.key", server.key_pem)):
        (directory / name).write_bytes(pem)
    return ClientTls(directory / "ca.crt"), ["--grpc-use-ssl=true", f"--grpc-server-cert={directory / 'server.crt'}",
                                             f"--grpc-server-key={directory / 'server.key'}"]
