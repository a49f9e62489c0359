"""The built CPU runtime image, run as Kubernetes runs it (read-only root, uid 1000, no capabilities), serving
the example models it embeds to real tritonclient requests from the host; SIGTERM to its PID 1 ends it."""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from ensemble_examples.client import run_checks

from tests.infra.images import DockerDaemon
from tests.support.ports import free_port

from .support import POD_LIKE, command_line, host_pid, process_ids, state, terminate, wait_running

EXAMPLES = "/opt/ensemble/examples"  # where docker/runtime-cpu.Dockerfile writes the example repository


def runtime_args(http: int, grpc: int, metrics: int, *extra: str) -> list[str]:
    return [
        "--model-repository", EXAMPLES,
        "--http-address", "127.0.0.1", "--http-port", str(http),
        "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc),
        "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics),
        *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def serving(docker_daemon: DockerDaemon, runtime_image: str) -> Iterator[tuple[str, int, int]]:
    """A runtime container serving every example model: (container, http port, grpc port)."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    container = docker_daemon.run_detached(runtime_image, runtime_args(http, grpc, metrics), options=POD_LIKE)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        wait_running(
            docker_daemon, container, lambda: client.is_server_ready() or None, timeout=240, what="the runtime ready"
        )
        client.close()
        yield container, http, grpc
    finally:
        docker_daemon.docker("rm", "--force", container, check=False)


def test_serves_every_example_model_over_grpc(serving: tuple[str, int, int]) -> None:
    _, _, grpc = serving
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    out = io.StringIO()
    try:
        failures = run_checks(client, out)
    finally:
        client.close()
    assert failures == 0, out.getvalue()


def test_answers_an_http_inference(serving: tuple[str, int, int]) -> None:
    _, http, _ = serving
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_runs_as_uid_1000_on_a_read_only_root(docker_daemon: DockerDaemon, serving: tuple[str, int, int]) -> None:
    container, _, _ = serving
    uids, gids = process_ids(host_pid(docker_daemon, container))
    assert uids == [1000] * 4 and gids == [1000] * 4
    (document,) = docker_daemon.inspect(container)
    assert document["Config"]["User"] == "1000:1000"  # type: ignore[index]
    write = docker_daemon.docker("exec", container, "sh", "-c", "touch /opt/ensemble/x", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr


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
