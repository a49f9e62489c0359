"""`--thread-policy` on a real runtime process: by default every thread it runs (the event loop, the native cores'
threads, model instances' threads, the event loop's workers) keeps the policy the process was started with, after
real requests over both protocols; with `batch`, each is SCHED_BATCH, but for the native cores' threads, which
wait for the next request under the default policy once every call is answered, and under SCHED_BATCH while a
unary call or a request a stream read is being answered (runtime/native/src/idle_policy.rs).
And each stays on the CPUs the process was started on: ONNX Runtime's own default would pin a thread to every core
of the machine."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.cpus import pinned as pinned_to
from tests.support.runtime_process import RuntimeProcess


def _inputs(module: type[grpcclient.InferInput] | type[httpclient.InferInput], shape: list[int]) -> list[Any]:
    inputs = [module(name, shape, "FP32") for name in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(np.ones(shape, np.float32))
    return inputs


def _serve_a_little(proc: RuntimeProcess) -> None:
    """Requests that run on each kind of thread: ONNX and python models, over gRPC and HTTP."""
    with proc.grpc_client() as client:
        np.testing.assert_array_equal(client.infer("add_sub", _inputs(grpcclient.InferInput, [1, 16])).as_numpy("OUTPUT0"),
                                      np.full((1, 16), 2, np.float32))
        np.testing.assert_array_equal(client.infer("py_add_sub", _inputs(grpcclient.InferInput, [4])).as_numpy("OUTPUT0"),
                                      np.full(4, 2, np.float32))
    with proc.http_client() as http:
        np.testing.assert_array_equal(http.infer("py_add_sub", _inputs(httpclient.InferInput, [4])).as_numpy("OUTPUT1"),
                                      np.zeros(4, np.float32))


def _threads(pid: int) -> list[tuple[str, int]]:
    """(name, scheduling policy) of every thread of `pid` now."""
    out: list[tuple[str, int]] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            name = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
            policy = os.sched_getscheduler(int(tid))
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
        out.append((name, policy))
    return out


CORES = ("grpc-core", "http-core")  # the native cores' threads


def _check(threads: list[tuple[str, int]], policy: int, pid: int, idle_cores: int | None = None) -> None:
    """Every thread under `policy`; the native cores' threads under `idle_cores` where given."""
    names = [name for name, _ in threads]
    main = Path(f"/proc/{pid}/comm").read_text().strip()  # python threads keep the executable's name
    assert set(CORES) <= set(names), threads
    assert names.count(main) >= 3, threads  # the event loop's and py_add_sub's two instances'
    assert all(p == policy for name, p in threads if name not in CORES), threads
    cores = policy if idle_cores is None else idle_cores
    assert all(p == cores for name, p in threads if name in CORES), threads


def test_every_thread_keeps_the_policy_it_was_started_with_by_default(server: RuntimeProcess) -> None:
    started_with = os.sched_getscheduler(0)
    assert started_with != os.SCHED_BATCH, "run this test from a process that is not SCHED_BATCH itself"
    _serve_a_little(server)
    _check(_threads(server.pid), started_with, server.pid)


def test_batch_puts_every_thread_under_sched_batch_but_idle_cores(repository: Path) -> None:
    """Under SCHED_BATCH a woken thread preempts nothing, another process's included: a core's thread waiting for
    the next request waits under the default policy, so that a request arriving on a CPU another workload keeps
    busy is taken at once. Here every call has been answered, so the cores' threads wait under SCHED_OTHER."""
    with RuntimeProcess([repository], ["--strict-readiness=false", "--thread-policy=batch"]) as proc:
        proc.wait_model_ready("py_add_sub")
        proc.wait_model_ready("add_sub")
        _serve_a_little(proc)
        # a core's thread switches as it goes to wait, just after its last answer was written: wait for it
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            threads = _threads(proc.pid)
            if all(p == os.SCHED_OTHER for name, p in threads if name in CORES):
                break
            time.sleep(0.05)
        _check(threads, os.SCHED_BATCH, proc.pid, idle_cores=os.SCHED_OTHER)


def _cores_until(proc: RuntimeProcess, policy: int, deadline: float) -> None:
    """Wait until every thread of the native gRPC core is under `policy` (a core's thread switches as it parks; the
    HTTP core's, with nothing in flight, stay under the default policy)."""
    while True:
        threads = _threads(proc.pid)
        cores = [p for name, p in threads if name == "grpc-core"]
        if cores and all(p == policy for p in cores):
            return
        assert time.monotonic() < deadline, (policy, threads)
        time.sleep(0.05)


def _held_inputs() -> list[grpcclient.InferInput]:
    x = grpcclient.InferInput("X", [1], "FP32")
    x.set_data_from_numpy(np.array([7], np.float32))
    return [x]


def test_batch_cores_wait_under_sched_batch_while_a_call_or_a_stream_request_is_answered(
    repository: Path, held_repository: Path, held_dir: Path
) -> None:
    """While a call is being answered, a core's thread waits under SCHED_BATCH (its next wake-up is most likely the
    runtime's own answer), whether the call is unary or a request a ModelStreamInfer read; once it is answered,
    under the default policy again, though the stream stays open. Before, a stream's requests did not count: the
    cores waited under the default policy however many a stream had in flight."""
    with RuntimeProcess([repository, held_repository], ["--strict-readiness=false", "--thread-policy=batch"],
                        env={"HELD_MODEL_DIR": str(held_dir)}) as proc:
        proc.wait_model_ready("py_held")
        deadline = time.monotonic() + 60
        answers: list[Any] = []
        with proc.grpc_client() as client:
            _hold_again(held_dir)
            client.async_infer("py_held", _held_inputs(), callback=lambda result, error: answers.append(error or result))
            _wait_file(held_dir / "started", deadline)
            _cores_until(proc, os.SCHED_BATCH, deadline)  # the unary call is in flight
            _release_and_check(held_dir, answers, deadline)
            _cores_until(proc, os.SCHED_OTHER, deadline)

            _hold_again(held_dir)
            client.start_stream(callback=lambda result, error: answers.append(error or result))
            try:
                client.async_stream_infer("py_held", _held_inputs(), request_id="held")
                _wait_file(held_dir / "started", deadline)
                _cores_until(proc, os.SCHED_BATCH, deadline)  # the stream's request is in flight
                _release_and_check(held_dir, answers, deadline)
                _cores_until(proc, os.SCHED_OTHER, deadline)  # answered; the stream is still open
            finally:
                client.stop_stream()


def _hold_again(held_dir: Path) -> None:
    for name in ("started", "release"):
        (held_dir / name).unlink(missing_ok=True)


def _release_and_check(held_dir: Path, answers: list[Any], deadline: float) -> None:
    """Let `py_held` answer, and check the answer (X = 7 comes back)."""
    (held_dir / "release").write_text("")
    while not answers:
        assert time.monotonic() < deadline, "never answered"
        time.sleep(0.01)
    np.testing.assert_array_equal(answers.pop().as_numpy("Y"), [7])


def _wait_file(path: Path, deadline: float) -> None:
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.01)


def test_every_thread_stays_on_the_cpus_it_was_started_on(repository: Path) -> None:
    available = sorted(os.sched_getaffinity(0))
    if len(available) < 2:
        pytest.skip("needs two CPUs: one to start the runtime on, one it must not reach")
    pinned = {available[0]}
    with pinned_to(pinned), RuntimeProcess([repository], ["--strict-readiness=false"]) as proc:
        proc.wait_model_ready("py_add_sub")
        proc.wait_model_ready("add_sub")
        _serve_a_little(proc)  # ONNX Runtime's threads start at its session's first run at the latest
        spread = {}
        for tid in os.listdir(f"/proc/{proc.pid}/task"):
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
                spread[tid] = os.sched_getaffinity(int(tid))
        assert len(spread) >= 5, spread
        assert not {tid: cpus for tid, cpus in spread.items() if cpus != pinned}  # threads moved elsewhere
