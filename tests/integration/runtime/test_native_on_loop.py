"""Native cores the event loop's thread drives (`--grpc-native-threads 0`, `--http-native-threads 0`): no thread of
their own, the same answers over both protocols (unary, streamed, forwarded routes), their timers still fire (the
loop's tick), and SIGTERM still finishes what is in flight. The rest of the native cores' behaviour under this
mode is the suite's own: `ENSEMBLE_TEST_NATIVE_THREADS=0` runs every runtime process of a test run with it."""

from __future__ import annotations

import contextlib
import os
import queue
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.cpus import pinned
from tests.support.grpc_port import connect
from tests.support.runtime_process import NATIVE_THREADS_ENV, RuntimeProcess
from tests.support.sigterm import answered_through_sigterm
from tests.support.sockets import LOADED, wait_closed

ON_LOOP = ["--grpc-frontend=native", "--http-frontend=native", "--grpc-native-threads=0", "--http-native-threads=0"]
HANDSHAKE_SECS = 1.0


@pytest.fixture(scope="module")
def on_loop(repository: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([repository], [*ON_LOOP, "--strict-readiness=false",
                                       f"--grpc-handshake-timeout-secs={HANDSHAKE_SECS}"]) as proc:
        proc.wait_ready()
        proc.wait_model_ready("add_sub")
        proc.wait_model_ready("py_add_sub")
        yield proc


def _threads(proc: RuntimeProcess) -> list[str]:
    tasks = Path(f"/proc/{proc.pid}/task")
    return [(task / "comm").read_text().strip() for task in tasks.iterdir()]


def _inputs(a: np.ndarray, b: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = [grpcclient.InferInput("INPUT0", list(a.shape), "FP32"), grpcclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def _http_inputs(a: np.ndarray, b: np.ndarray, binary: bool) -> list[httpclient.InferInput]:
    inputs = [httpclient.InferInput("INPUT0", list(a.shape), "FP32"), httpclient.InferInput("INPUT1", list(b.shape), "FP32")]
    inputs[0].set_data_from_numpy(a, binary_data=binary)
    inputs[1].set_data_from_numpy(b, binary_data=binary)
    return inputs


def test_no_core_thread_serves_the_ports(on_loop: RuntimeProcess) -> None:
    names = _threads(on_loop)
    assert "grpc-core" not in names, names
    assert names.count("http-core") == 1, names  # the metrics port's core keeps its thread


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: a runtime with one and one with two")
@pytest.mark.skipif(bool(os.environ.get(NATIVE_THREADS_ENV)), reason=f"{NATIVE_THREADS_ENV} sets the cores' threads")
@pytest.mark.parametrize("limit", ["affinity", "--cpus"])
def test_by_default_the_cores_run_on_the_loop_where_the_runtime_has_one_cpu(repository: Path, limit: str) -> None:
    """One CPU by affinity (taskset, a static CPU manager) or by --cpus (the container's CPU limit, which the
    operator passes): no core thread; two CPUs: the cores have theirs."""
    cpus = sorted(os.sched_getaffinity(0))
    one = pinned({cpus[0]}) if limit == "affinity" else contextlib.nullcontext()
    flags = ["--strict-readiness=false", *(["--cpus=1"] if limit == "--cpus" else [])]
    with one, RuntimeProcess([repository], flags) as proc:
        proc.wait_ready()
        names = _threads(proc)
        assert "grpc-core" not in names and names.count("http-core") == 1, names
        with grpcclient.InferenceServerClient(proc.grpc_url) as client:
            assert client.is_server_live()
    with RuntimeProcess([repository], ["--strict-readiness=false", "--cpus=2"]) as proc:
        proc.wait_ready()
        names = _threads(proc)
        assert "grpc-core" in names and names.count("http-core") >= 2, names


@pytest.mark.parametrize(("model", "shape"), [("add_sub", (1, 16)), ("py_add_sub", (4,))])
def test_both_protocols_answer(on_loop: RuntimeProcess, model: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.random(shape, np.float32), rng.random(shape, np.float32)
    with on_loop.grpc_client() as client:
        for _ in range(50):  # one connection, many calls: each answer is written before the next call is read
            result = client.infer(model, _inputs(a, b))
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
            np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)
        assert client.get_model_metadata(model).name == model  # forwarded to the Python handlers
    http = httpclient.InferenceServerClient(on_loop.http_url)
    try:
        for binary in (True, False):
            result = http.infer(model, _http_inputs(a, b, binary))
            np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
        assert http.get_model_metadata(model)["name"] == model  # the core's forward to the aiohttp app
        assert http.is_server_ready()
    finally:
        http.close()


def test_a_stream_answers_every_request(on_loop: RuntimeProcess) -> None:
    answers: queue.Queue[object] = queue.Queue()
    a, b = np.full((1, 16), 2, np.float32), np.ones((1, 16), np.float32)
    with on_loop.grpc_client() as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        try:
            for i in range(20):
                client.async_stream_infer("add_sub", _inputs(a * i, b), request_id=str(i))
            got = {}
            for _ in range(20):
                answer = answers.get(timeout=LOADED)
                assert not isinstance(answer, InferenceServerException), answer
                got[answer.get_response().id] = answer.as_numpy("OUTPUT0")  # type: ignore[attr-defined]
        finally:
            client.stop_stream()
    assert sorted(got, key=int) == [str(i) for i in range(20)]
    for i, out in got.items():
        np.testing.assert_allclose(out, a * int(i) + b)


def test_the_cores_timers_fire(on_loop: RuntimeProcess) -> None:
    """A connection that never opens HTTP/2 is closed at the handshake deadline: a timer of the core, which only
    the loop's tick turns the runtime for (nothing else happens on the connection)."""
    start = time.monotonic()
    with connect(on_loop) as sock:
        wait_closed(sock, HANDSHAKE_SECS + LOADED)
    took = time.monotonic() - start
    assert took >= HANDSHAKE_SECS - 0.1, f"closed after {took:.2f} s, before the deadline"
    with on_loop.grpc_client() as client:
        assert client.is_server_live()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sigterm_finishes_a_request_in_flight(repository: Path, tmp_path: Path, protocol: str) -> None:
    answered_through_sigterm(repository, tmp_path / "started", protocol, ON_LOOP)
