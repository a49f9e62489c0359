"""What the demo needs built before it can start a cluster: the Debian packages of the node, the Go-built tools
(control plane, kubelet, containerd, pause image, helm, MinIO) and the runtime and operator images.

Each comes from the project's own scripts (tools/*.sh), cached outside the repository and keyed by version or
by what went into it, so a second run finds everything built. A missing piece is built with its output in a
log file while a ticker shows how long it usually takes on a 2-core machine, cold.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from demo.progress import Progress, clock_text
from tests.infra.images import BUILD_SCRIPT as IMAGES_SCRIPT
from tests.infra.images import Image, ImageArtifact, ImageLocator
from tests.infra.tools import REPO_ROOT, Tool, ToolLocator

NODE_PACKAGES_SCRIPT = REPO_ROOT / "tools" / "setup-node-packages.sh"
TOOLS_SCRIPT = REPO_ROOT / "tools" / "build-tools.sh"


@dataclass(frozen=True, slots=True)
class Piece:
    name: str
    what: str
    # usual seconds to build it from nothing on a 2-core machine, busy (a cold `.ci/run`'s log, rounded up)
    cold_s: float


TOOLS: tuple[tuple[Tool, Piece], ...] = (
    ("k8s", Piece("k8s", "Kubernetes control plane and kubectl (Go, from the module proxy)", 330)),
    ("k8s-node", Piece("k8s-node", "kubelet and kube-proxy", 60)),
    ("etcd", Piece("etcd", "etcd", 45)),
    ("containerd", Piece("containerd", "containerd v2", 60)),
    ("pause", Piece("pause", "the pause image (from source)", 15)),
    ("helm", Piece("helm", "Helm", 80)),
    ("minio", Piece("minio", "MinIO (the S3 model repository)", 110)),
)
IMAGES: tuple[tuple[Image, Piece], ...] = (
    ("runtime-cpu", Piece("runtime-cpu", "the runtime image (CPU; first a Debian base with debootstrap)", 210)),
    ("operator", Piece("operator", "the operator image", 75)),
)


class BuildFailed(RuntimeError):
    pass


def _run_logged(progress: Progress, piece: Piece, argv: list[str], log_dir: Path, env: dict[str, str] | None = None) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"build-{piece.name}.log"
    with log.open("wb") as handle, progress.ticking(f"building {piece.what}", piece.cold_s):
        code = subprocess.call(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BuildFailed(f"building {piece.what} failed (exit {code}); log {log}:\n{tail}")


def ensure_tools(progress: Progress, log_dir: Path, locator: ToolLocator) -> None:
    """Node packages and every tool the embedded cluster runs, building what is missing."""
    code = subprocess.call(["bash", str(NODE_PACKAGES_SCRIPT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if code != 0:
        raise BuildFailed(f"{NODE_PACKAGES_SCRIPT} failed (exit {code}); run it to see why")
    missing = [(tool, piece) for tool, piece in TOOLS if not locator.tool_dir(tool).is_dir()]
    if not missing:
        progress.say(f"tools: all {len(TOOLS)} cached ({', '.join(tool for tool, _ in TOOLS)})")
        return
    total = sum(piece.cold_s for _, piece in missing)
    progress.say(f"tools: building {len(missing)} of {len(TOOLS)} (first run only; usually about {clock_text(total)})")
    for tool, piece in missing:
        _run_logged(progress, piece, ["bash", str(TOOLS_SCRIPT), tool], log_dir)


def ensure_images(progress: Progress, log_dir: Path) -> dict[Image, ImageArtifact]:
    """The runtime and operator images for the current sources (docker-archive tarballs), built if missing."""
    locator = ImageLocator(python=sys.executable)
    artifacts: dict[Image, ImageArtifact] = {}
    for image, piece in IMAGES:
        artifact = locator.describe(image)
        if artifact.tarball.is_file():
            progress.say(f"image {artifact.reference}: cached")
        else:
            env = {**os.environ, "PYTHON": sys.executable}
            _run_logged(progress, piece, ["bash", str(IMAGES_SCRIPT), image], log_dir, env)
            artifact = locator.describe(image)
            if not artifact.tarball.is_file():
                raise BuildFailed(f"{IMAGES_SCRIPT} {image} did not write {artifact.tarball}")
            progress.say(f"image {artifact.reference}: built")
        artifacts[image] = artifact
    return artifacts
