"""SIGTERM while a request executes: the runtime answers it before it exits (for the native front ends' tests)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.runtime_process import RuntimeProcess


def answered_through_sigterm(repository: Path, marker: Path, protocol: str, flags: Sequence[str] = (),
                             draining: Callable[[RuntimeProcess, float], None] | None = None) -> RuntimeProcess:
    """Serves `py_slow` (from `repository`, which marks its execution's start at `marker`) with `flags`, sends
    SIGTERM while a request over `protocol` executes, and checks the request's answer and a clean exit.
    `draining(proc, deadline)` runs right after the signal, while that request still executes. Returns the
    stopped process (its log stays readable)."""
    proc = RuntimeProcess([repository], ["--model-control-mode=explicit", "--load-model=py_slow",
                                         "--exit-timeout-secs=20", *flags],
                          env={"SLOW_MODEL_MARKER": str(marker)}).start()
    proc.wait_model_ready("py_slow")
    results: list[object] = []

    def call() -> None:
        module = grpcclient if protocol == "grpc" else httpclient
        client = (grpcclient.InferenceServerClient(proc.grpc_url) if protocol == "grpc"
                  else httpclient.InferenceServerClient(proc.http_url, network_timeout=60))
        item = module.InferInput("X", [1], "FP32")
        item.set_data_from_numpy(np.array([7.0], np.float32))
        try:
            results.append(client.infer("py_slow", [item]).as_numpy("Y"))
        except InferenceServerException as exc:
            results.append(exc)
        finally:
            client.close()

    worker = threading.Thread(target=call)
    worker.start()
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.exists(), proc.log_text()
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGTERM)  # the request is executing now
    if draining is not None:
        draining(proc, deadline)
    worker.join(30)
    assert proc.stop() == 0, proc.log_text()
    assert len(results) == 1 and not isinstance(results[0], InferenceServerException), results
    np.testing.assert_array_equal(results[0], [7.0])
    return proc
