"""The project's container images, built by `tools/build-images.sh`, and a private Docker daemon to run them.

The images are docker-archive tarballs in the tools cache
(``${ENSEMBLE_TOOLS_CACHE:-~/.cache/ensemble-operator/tools}/images/<image>-<key>.tar``), keyed by a hash of
what went into them; the script is the one place that computes the key, so we ask it (``--print``). A
missing image is built on demand only when ``ENSEMBLE_BUILD_TOOLS=1`` (a cold build takes minutes);
otherwise `ImageUnavailable` names the command that builds it, and `require_image` turns that into a skip.

`DockerDaemon` runs `tools/dockerd.sh`: containerd and dockerd of their own, in a temporary directory, with
no bridge and no iptables changes (containers use the host's network, or none).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, Self

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
BUILD_SCRIPT: Final = REPO_ROOT / "tools" / "build-images.sh"
DOCKERD_SCRIPT: Final = REPO_ROOT / "tools" / "dockerd.sh"
BUILD_ON_DEMAND_ENV: Final = "ENSEMBLE_BUILD_TOOLS"

Image = Literal["runtime-cpu", "runtime-gpu", "operator"]


class ImageUnavailable(RuntimeError):
    """An image is not built (and building on demand is off or failed), or cannot be run here."""


@dataclass(frozen=True)
class ImageArtifact:
    """One built (or expected) image: its tarball and the reference it is tagged with inside it."""

    name: str
    key: str
    tarball: Path
    reference: str  # e.g. localhost/ensemble-runtime:<key>; what `docker load` / `ctr images import` name it

    @property
    def repository(self) -> str:
        return self.reference.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.reference.rsplit(":", 1)[1]


def parse_artifact(document: str) -> ImageArtifact:
    """The artifact described by `build-images.sh --print NAME`'s JSON line."""
    data = json.loads(document)
    return ImageArtifact(
        name=str(data["name"]), key=str(data["key"]), tarball=Path(data["tarball"]), reference=str(data["reference"])
    )


@dataclass(frozen=True)
class ImageLocator:
    """Resolves image names to their tarballs in the cache, building on demand if allowed."""

    build_on_demand: bool = False
    build_timeout_s: float = 3600
    # The Python the wheels are built with: part of the key (its version and platform).
    python: str = field(default_factory=lambda: sys.executable)
    # More environment for the script, over os.environ: e.g. {"TENSORRT": "1"} for the GPU image with TensorRT.
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> ImageLocator:
        return cls(build_on_demand=os.environ.get(BUILD_ON_DEMAND_ENV, "") in {"1", "true", "yes"})

    def _env(self) -> dict[str, str]:
        return {**os.environ, "PYTHON": self.python, **self.env}

    def describe(self, name: Image) -> ImageArtifact:
        """What `name` is (or would be) for the current sources, whether or not it is built."""
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--print", name], check=True, capture_output=True, text=True, env=self._env()
        )
        return parse_artifact(result.stdout)

    def ensure(self, name: Image) -> ImageArtifact:
        """The artifact of `name`, built first if needed and allowed."""
        artifact = self.describe(name)
        if artifact.tarball.is_file():
            return artifact
        command = f"make images (or {BUILD_SCRIPT.relative_to(REPO_ROOT)} {name})"
        if not self.build_on_demand:
            raise ImageUnavailable(
                f"image {name} is not built for these sources (expected {artifact.tarball}); run `{command}` "
                f"or set {BUILD_ON_DEMAND_ENV}=1 to build it on demand"
            )
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), name],
            capture_output=True,
            text=True,
            timeout=self.build_timeout_s,
            env=self._env(),
        )
        artifact = self.describe(name)
        if result.returncode != 0 or not artifact.tarball.is_file():
            output = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            raise ImageUnavailable(f"`{command}` failed (exit {result.returncode}):\n{output}")
        return artifact


def docker_unavailable_reason() -> str | None:
    """Why a private Docker daemon cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "running images needs root (a private dockerd and containerd)"
    missing = [b for b in ("dockerd", "containerd", "runc") if shutil.which(b) is None]
    if missing:
        return f"{', '.join(missing)} not installed; `make images` installs Debian's docker.io"
    return None


class DockerDaemon:
    """A private dockerd (tools/dockerd.sh) for the duration of a `with` block."""

    def __init__(self, workdir: Path | None = None) -> None:
        self._workdir = workdir
        self._host: str | None = None
        self._docker = shutil.which("docker", path="/usr/bin") or shutil.which("docker") or "docker"

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        reason = docker_unavailable_reason()
        if reason is not None:
            raise ImageUnavailable(reason)
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="ensemble-dockerd-"))
        result = subprocess.run(
            ["bash", str(DOCKERD_SCRIPT), "start", str(self._workdir)], capture_output=True, text=True, timeout=300
        )
        if result.returncode != 0:
            raise ImageUnavailable(f"dockerd did not start (exit {result.returncode}):\n{result.stderr}")
        self._host = result.stdout.strip()

    def stop(self) -> None:
        if self._workdir is not None:
            subprocess.run(["bash", str(DOCKERD_SCRIPT), "stop", str(self._workdir)], check=False, timeout=300)
            self._host = None

    @property
    def containerd_address(self) -> Path:
        """The socket of the daemon's own containerd (tools/dockerd.sh), for `ctr --address`."""
        if self._workdir is None or self._host is None:
            raise RuntimeError("dockerd is not started")
        return self._workdir / "run" / "containerd.sock"

    @property
    def host(self) -> str:
        if self._host is None:
            raise RuntimeError("dockerd is not started")
        return self._host

    def docker(
        self, *args: str, check: bool = True, timeout: float = 300.0, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run the docker CLI against this daemon."""
        result = subprocess.run(
            [self._docker, "-H", self.host, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "DOCKER_BUILDKIT": "0", **(env or {})},
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
        return result

    def load(self, artifact: ImageArtifact) -> str:
        """`docker load` the artifact's tarball; returns its reference."""
        self.docker("load", "--input", str(artifact.tarball), timeout=600)
        return artifact.reference

    def inspect(self, *objects: str) -> list[dict[str, object]]:
        documents: list[dict[str, object]] = json.loads(self.docker("inspect", *objects).stdout)
        return documents

    def run_detached(self, image: str, args: Sequence[str] = (), *, options: Sequence[str] = ()) -> str:
        """`docker run -d [options] image args`; returns the container id."""
        return self.docker("run", "--detach", *options, image, *args).stdout.strip()

    def logs(self, container: str) -> str:
        result = self.docker("logs", "--tail", "60", container, check=False)
        return result.stdout + result.stderr


def require_image(name: Image, locator: ImageLocator | None = None) -> ImageArtifact:
    """The artifact of `name`; skips the calling test (pytest.skip) when it is unavailable."""
    import pytest  # test-only dependency; keep module import light for non-pytest callers

    locator = locator or ImageLocator.from_env()
    try:
        return locator.ensure(name)
    except ImageUnavailable as exc:
        pytest.skip(str(exc))
