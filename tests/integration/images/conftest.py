"""Fixtures: a private Docker daemon for the package and the project's images loaded into it.

The images are the tarballs `make images` leaves in the tools cache (tests/infra/images.py); a missing one
skips with the command that builds it (or is built first with ENSEMBLE_BUILD_TOOLS=1).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.infra.images import DockerDaemon, ImageLocator, ImageUnavailable, docker_unavailable_reason, require_image


@pytest.fixture(scope="package")
def image_locator() -> ImageLocator:
    return ImageLocator.from_env()


@pytest.fixture(scope="package")
def docker_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DockerDaemon]:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    daemon = DockerDaemon(tmp_path_factory.mktemp("dockerd"))
    try:
        daemon.start()
    except ImageUnavailable as exc:
        daemon.stop()
        pytest.fail(str(exc))
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture(scope="package")
def runtime_image(image_locator: ImageLocator, docker_daemon: DockerDaemon) -> str:
    """The CPU runtime image's reference, loaded into the daemon."""
    return docker_daemon.load(require_image("runtime-cpu", image_locator))


@pytest.fixture(scope="package")
def operator_image(image_locator: ImageLocator, docker_daemon: DockerDaemon) -> str:
    """The operator image's reference, loaded into the daemon."""
    return docker_daemon.load(require_image("operator", image_locator))
