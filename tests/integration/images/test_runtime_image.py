"""The built CPU runtime image, run as Kubernetes runs it (read-only root, uid 1000, no capabilities), serving
the example models it embeds to real tritonclient requests from the host; SIGTERM to its PID 1 ends it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient

from tests.infra.images import DockerDaemon
from tests.support.ports import free_port

from .serving import (
    assert_examples_answer_over_grpc,
    assert_http_add_sub,
    assert_uid_1000_on_a_read_only_root,
    runtime_args,
)
from .serving import serving as image_serving
from .support import POD_LIKE, command_line, host_pid, state, terminate, wait_running


@pytest.fixture(scope="module")
def serving(docker_daemon: DockerDaemon, runtime_image: str) -> Iterator[tuple[str, int, int]]:
    """A runtime container serving every example model: (container, http port, grpc port)."""
    with image_serving(docker_daemon, runtime_image, timeout=240) as running:
        yield running


def test_serves_every_example_model_over_grpc(serving: tuple[str, int, int]) -> None:
    assert_examples_answer_over_grpc(serving[2])


def test_answers_an_http_inference(serving: tuple[str, int, int]) -> None:
    assert_http_add_sub(serving[1])


def test_runs_as_uid_1000_on_a_read_only_root(docker_daemon: DockerDaemon, serving: tuple[str, int, int]) -> None:
    container, _, _ = serving
    assert_uid_1000_on_a_read_only_root(docker_daemon, container)
    (document,) = docker_daemon.inspect(container)
    assert document["Config"]["User"] == "1000:1000"  # type: ignore[index]


def test_sigterm_to_pid_1_ends_the_container(docker_daemon: DockerDaemon, runtime_image: str) -> None:
    """The runtime is PID 1 (no init in the image); it must handle SIGTERM itself and exit 0 after draining."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    args = runtime_args(http, grpc, metrics, "--model-control-mode", "explicit", "--load-model", "add_sub")
    container = docker_daemon.run_detached(runtime_image, args, options=POD_LIKE)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        wait_running(
            docker_daemon, container, lambda: client.is_model_ready("add_sub") or None, timeout=240, what="add_sub"
        )
        client.close()
        assert command_line(host_pid(docker_daemon, container))[1:2] == ["/opt/ensemble/bin/ensemble-runtime"]
        # Well inside the 30 s grace period a pod gets by default; nothing here ever sends SIGKILL.
        ended = terminate(docker_daemon, container, timeout=30)
        print(f"runtime container exited {ended.seconds_after_signal:.2f} s after SIGTERM")
        assert ended.code == 0 and not ended.oom_killed, docker_daemon.logs(container)
        assert not state(docker_daemon, container)["Running"]
    finally:
        docker_daemon.docker("rm", "--force", container, check=False)
