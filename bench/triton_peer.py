"""The real NVIDIA Triton Inference Server as a peer for benchmarks and compatibility tests.

`tools/setup-triton.sh` installs it (from the nvidia-pytriton wheel: tritonserver 2.51 with the python
backend only, CPU) into `${ENSEMBLE_TOOLS_CACHE:-$HOME/.cache/ensemble-operator/tools}/triton-<version>/`
and writes `peer.env` there. `TritonPeer` starts it on a model repository, on free loopback ports, the way
`tests.support.runtime_process.RuntimeProcess` starts ours, and has the same methods:

    with TritonPeer([repository]) as peer:
        peer.wait_ready()
        client = peer.grpc_client()
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tests.support.server_process import ServerProcess

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_SCRIPT = REPO_ROOT / "tools" / "setup-triton.sh"


class TritonPeerNotInstalled(RuntimeError):
    """The peer's install directory (or its `peer.env`) is missing: run tools/setup-triton.sh."""


@dataclass(frozen=True)
class TritonInstall:
    """What `tools/setup-triton.sh` wrote to `<install>/peer.env`."""

    root: Path
    pytriton_version: str
    python_version: str
    tritonserver: Path
    backend_directory: Path
    backends: tuple[str, ...]
    ld_library_path: str
    path_prepend: str

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The server's environment: the wheel's bundled libraries and the python the stub embeds, first.

        The stub's embedded CPython finds its prefix (stdlib, site-packages with numpy) by searching PATH
        for `python3`, hence the venv's bin directory first on PATH.
        """
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (self.ld_library_path, env.get("LD_LIBRARY_PATH")) if p)
        env["PATH"] = os.pathsep.join(p for p in (self.path_prepend, env.get("PATH")) if p)
        env.pop("PYTHONHOME", None)
        env.pop("PYTHONPATH", None)  # ours would shadow the stub's own triton_python_backend_utils
        return env


def install_dir() -> Path:
    """Where tools/setup-triton.sh installs (or installed) the peer; `TRITON_PEER_DIR` overrides it."""
    override = os.environ.get("TRITON_PEER_DIR")
    if override:
        return Path(override)
    result = subprocess.run(["bash", str(SETUP_SCRIPT), "--print-dir"], capture_output=True, text=True, check=True)
    return Path(result.stdout.strip())


def find_install() -> TritonInstall | None:
    """The installed peer, or None when tools/setup-triton.sh has not been run."""
    root = install_dir()
    env_file = root / "peer.env"
    if not env_file.is_file():
        return None
    values: dict[str, str] = {}
    for line in env_file.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    install = TritonInstall(
        root=root,
        pytriton_version=values["PYTRITON_VERSION"],
        python_version=values["PYTHON_VERSION"],
        tritonserver=Path(values["TRITONSERVER"]),
        backend_directory=Path(values["BACKEND_DIRECTORY"]),
        backends=tuple(values.get("BACKENDS", "").split()),
        ld_library_path=values.get("LD_LIBRARY_PATH", ""),
        path_prepend=values.get("PATH_PREPEND", ""),
    )
    return install if install.tritonserver.is_file() else None


def require_install() -> TritonInstall:
    install = find_install()
    if install is None:
        raise TritonPeerNotInstalled(
            f"the real Triton peer is not installed in {install_dir()}; run tools/setup-triton.sh "
            "(pip-installs nvidia-pytriton into a separate venv there, about a minute)"
        )
    return install


def not_installed_reason() -> str | None:
    """A skip reason when the peer is missing, else None (for `pytest.mark.skipif`)."""
    try:
        require_install()
    except (TritonPeerNotInstalled, subprocess.CalledProcessError, OSError) as exc:
        return str(exc)
    return None


def stub_missed_health_window(message: str) -> bool:
    """Whether `message`, an error tritonserver answered, is its python backend failing a request because it took
    the model's stub for hung. That backend waits for a stub's answer one second at a time and, after each second
    without one, fails the request unless the stub's health thread (which flags it every 300 ms) has flagged it in
    that second; both windows are one second of the realtime clock, fixed in its code. A machine that holds the
    stub's process a second, or steps its clock, fails a request that a healthy stub was answering. The peer's own
    failure, not the server it is compared with."""
    return "Stub process '" in message and "' is not healthy" in message


class TritonPeer(ServerProcess):
    """Starts the real `tritonserver` on `repositories`; `wait_live` polls ServerLive with a deadline."""

    label = "tritonserver"

    def __init__(self, repositories: Sequence[Path | str], extra_args: Sequence[str] = (),
                 install: TritonInstall | None = None) -> None:
        super().__init__()
        self.install = install or require_install()
        self.args = [
            str(self.install.tritonserver),
            *(f"--model-repository={r}" for r in repositories),
            f"--backend-directory={self.install.backend_directory}",
            *self.ports_args(),
            "--allow-gpu-metrics=false", "--exit-timeout-secs=10",
            *extra_args,
        ]
        self.env = self.install.environment()

    def command(self) -> tuple[Sequence[str], Mapping[str, str]]:
        return self.args, self.env

    def start(self, timeout: float = 120.0) -> Self:
        return super().start(timeout)

    def after_stop(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):  # python-backend stubs left behind by a killed server
            os.killpg(self.proc.pid, signal.SIGKILL)
