"""Find the binaries built by `tools/build-tools.sh` (Kubernetes, etcd, kwok, helm, MinIO).

They live outside the repository, in
``${ENSEMBLE_TOOLS_CACHE:-~/.cache/ensemble-operator/tools}/<tool>-<version>/``;
the script is the one place that knows the versions, so we ask it for the directory. A missing tool is
built on demand only when ``ENSEMBLE_BUILD_TOOLS=1`` (cold builds take minutes to tens of minutes);
otherwise `ToolUnavailable` says which command builds it, and `require` turns that into a pytest skip.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
BUILD_SCRIPT: Final = REPO_ROOT / "tools" / "build-tools.sh"
BUILD_ON_DEMAND_ENV: Final = "ENSEMBLE_BUILD_TOOLS"

Tool = Literal["k8s", "etcd", "kwok", "helm", "minio", "k8s-node", "containerd", "pause"]

# Which tool (build target) provides which binary.
BINARIES: Final[dict[str, Tool]] = {
    "kube-apiserver": "k8s",
    "kube-controller-manager": "k8s",
    "kube-scheduler": "k8s",
    "kubectl": "k8s",
    "etcd": "etcd",
    "kwok": "kwok",
    "helm": "helm",
    "minio": "minio",
    # The real node (tests/infra/node.py); the pause image is `pause/image.tar`.
    "kubelet": "k8s-node",
    "kube-proxy": "k8s-node",
    "containerd": "containerd",
    "containerd-shim-runc-v2": "containerd",
    "ctr": "containerd",
}


class ToolUnavailable(RuntimeError):
    """A binary is not built (and building on demand is off or failed)."""


@dataclass(frozen=True)
class ToolLocator:
    """Resolves binary names to paths in the tools cache, building on demand if allowed."""

    build_on_demand: bool = False
    build_timeout_s: float = 3 * 3600

    @classmethod
    def from_env(cls) -> ToolLocator:
        return cls(build_on_demand=os.environ.get(BUILD_ON_DEMAND_ENV, "") in {"1", "true", "yes"})

    def tool_dir(self, tool: Tool) -> Path:
        """The cache directory of `tool` (whether or not it has been built)."""
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--print-dir", tool],
            check=True,
            capture_output=True,
            text=True,
        )
        return Path(result.stdout.strip())

    def ensure(self, tool: Tool) -> Path:
        """The cache directory of `tool`, built first if needed and allowed."""
        directory = self.tool_dir(tool)
        if directory.is_dir():
            return directory
        command = f"{BUILD_SCRIPT.relative_to(REPO_ROOT)} {tool}"
        if not self.build_on_demand:
            raise ToolUnavailable(
                f"{tool} is not built (expected {directory}); run `{command}` "
                f"or set {BUILD_ON_DEMAND_ENV}=1 to build it on demand"
            )
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), tool],
            capture_output=True,
            text=True,
            timeout=self.build_timeout_s,
        )
        if result.returncode != 0 or not directory.is_dir():
            output = "\n".join((result.stdout + result.stderr).splitlines()[-30:])
            raise ToolUnavailable(f"`{command}` failed (exit {result.returncode}):\n{output}")
        return directory

    def binary(self, name: str) -> Path:
        """Absolute path of the binary `name` (one of `BINARIES`)."""
        try:
            tool = BINARIES[name]
        except KeyError:
            raise ValueError(f"unknown binary {name!r}; known: {sorted(BINARIES)}") from None
        path = self.ensure(tool) / name
        if not os.access(path, os.X_OK):
            raise ToolUnavailable(f"{path} is missing or not executable; delete {path.parent} and rebuild")
        return path

    def kwok_stages_dir(self) -> Path:
        """The kwok Stage manifests (node/pod lifecycles) copied next to the kwok binary."""
        return self.ensure("kwok") / "stages"


def require(*names: str, locator: ToolLocator | None = None) -> dict[str, Path]:
    """Paths of the binaries `names`; skips the calling test (pytest.skip) when one is unavailable."""
    import pytest  # test-only dependency; keep module import light for non-pytest callers

    locator = locator or ToolLocator.from_env()
    try:
        return {name: locator.binary(name) for name in names}
    except ToolUnavailable as exc:
        pytest.skip(str(exc))
