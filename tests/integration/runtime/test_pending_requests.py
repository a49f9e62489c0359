"""`nv_inference_pending_request_count` (the gauge Kubernetes autoscalers read from Triton): requests waiting
for an instance, not those running. Three requests to a model of one instance whose execution waits for the
test: one runs, two wait; once released, none. Ours, and the real Triton side by side where installed."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from bench.triton_peer import TritonPeer, not_installed_reason
from tests.integration.runtime.repo import MODELS
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ServerProcess

_NO_TRITON = not_installed_reason()
_TRITON = pytest.param("triton", marks=[pytest.mark.triton, pytest.mark.skipif(_NO_TRITON is not None,
                                                                               reason=_NO_TRITON or "")])
CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
SAMPLE = 'nv_inference_pending_request_count{model="py_held",version="1"} '


@pytest.fixture(params=["ours", _TRITON])
def held(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    model = tmp_path / "repo" / "py_held"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_bytes((MODELS / "py_held" / "model.py").read_bytes())
    marks = tmp_path / "held"
    marks.mkdir()
    proc: ServerProcess
    if request.param == "triton":
        proc = TritonPeer([tmp_path / "repo"])
        proc.env["HELD_MODEL_DIR"] = str(marks)
    else:
        proc = RuntimeProcess([tmp_path / "repo"], env={"HELD_MODEL_DIR": str(marks)})
    with proc:
        proc.wait_model_ready("py_held")
        try:
            yield proc, marks
        finally:
            (marks / "release").write_text("")


def _pending(proc: ServerProcess) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{proc.metrics_port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    assert "# TYPE nv_inference_pending_request_count gauge" in text
    line = next(line for line in text.splitlines() if line.startswith(SAMPLE))
    return float(line.removeprefix(SAMPLE))


def _until(proc: ServerProcess, value: float) -> float:
    deadline = time.monotonic() + 30
    while (found := _pending(proc)) != value and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_waiting_requests_are_pending_and_the_running_one_is_not(held: tuple[ServerProcess, Path]) -> None:
    proc, marks = held
    assert _pending(proc) == 0
    answers: list[float] = []

    def call(value: float) -> None:
        with proc.http_client() as client:
            item = httpclient.InferInput("X", [1], "FP32")
            item.set_data_from_numpy(np.array([value], np.float32))
            answers.append(float(client.infer("py_held", [item]).as_numpy("Y")[0]))

    threads = [threading.Thread(target=call, args=(float(v),)) for v in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while not (marks / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _until(proc, 2) == 2  # one runs (held), two wait for the one instance
    (marks / "release").write_text("")
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(answers) == [0.0, 1.0, 2.0]
    assert _until(proc, 0) == 0
