"""A runtime image (CPU or GPU) serving the example models it embeds, run as Kubernetes runs it, and the checks
both images must pass: every example over gRPC, an HTTP inference, uid 1000 on a read-only root."""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from ensemble_examples.client import run_checks

from tests.infra.images import DockerDaemon
from tests.support.ports import free_port

from .support import POD_LIKE, host_pid, process_ids, wait_running

EXAMPLES = "/opt/ensemble/examples"  # where the runtime Dockerfiles write the example repository
VENV = "/opt/ensemble"


def runtime_args(http: int, grpc: int, metrics: int, *extra: str) -> list[str]:
    return [
        "--model-repository", EXAMPLES,
        "--http-address", "127.0.0.1", "--http-port", str(http),
        "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc),
        "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics),
        *extra,
    ]  # fmt: skip


@contextmanager
def serving(daemon: DockerDaemon, image: str, *, timeout: float) -> Iterator[tuple[str, int, int]]:
    """A container of `image` serving every example model, ready: (container, http port, grpc port)."""
    http, grpc, metrics = free_port(), free_port(), free_port()
    container = daemon.run_detached(image, runtime_args(http, grpc, metrics), options=POD_LIKE)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        wait_running(daemon, container, lambda: client.is_server_ready() or None, timeout=timeout,
                     what="the runtime ready")
        client.close()
        yield container, http, grpc
    finally:
        daemon.docker("rm", "--force", container, check=False)


def assert_examples_answer_over_grpc(grpc: int) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
    out = io.StringIO()
    try:
        failures = run_checks(client, out)
    finally:
        client.close()
    assert failures == 0, out.getvalue()


def assert_http_add_sub(http: int) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{http}")
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.float32)
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    result = client.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def assert_uid_1000_on_a_read_only_root(daemon: DockerDaemon, container: str) -> None:
    uids, gids = process_ids(host_pid(daemon, container))
    assert uids == [1000] * 4 and gids == [1000] * 4
    write = daemon.docker("exec", container, "sh", "-c", f"touch {VENV}/x", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr
