"""The image tarballs are what a node without a registry takes: `ctr -n k8s.io images import` (the CRI's
namespace, where the kubelet looks) names the image as its reference, which is what pods and the chart use."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.infra.images import DockerDaemon, ImageLocator, require_image


def test_runtime_tarball_imports_into_containerd_under_its_reference(
    docker_daemon: DockerDaemon, image_locator: ImageLocator
) -> None:
    ctr = shutil.which("ctr")
    if ctr is None:
        pytest.skip("ctr is not installed (Debian's containerd package has it; `make images` installs it)")
    artifact = require_image("runtime-cpu", image_locator)
    base = [ctr, "--address", str(docker_daemon.containerd_address), "--namespace", "k8s.io"]
    subprocess.run([*base, "images", "import", str(artifact.tarball)], check=True, capture_output=True, timeout=600)
    listed = subprocess.run([*base, "images", "ls", "--quiet"], check=True, capture_output=True, text=True).stdout
    assert artifact.reference in listed.split()
    assert artifact.reference.startswith("localhost/ensemble-runtime:")
