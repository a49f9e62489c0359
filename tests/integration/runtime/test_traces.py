"""Triton's trace extension on a real runtime: `GET/POST /v2/trace/setting` (and a model's), gRPC `TraceSetting`
(tritonclient's `get_trace_settings` / `update_trace_settings`), and the traces written for the requests the
settings sample, in Triton's JSON shape: a python model's request (REQUEST_START, QUEUE_START, the four compute
points, REQUEST_END, in time order; over ModelInfer and ModelStreamInfer) and a 2-step ensemble's (its own, and
one per step naming it as parent).
Refusals leave the settings as they were and the server serving. Where tritonserver is installed, the same
settings requests go to it too and the answers are compared, and so are the points its traces and ours name
(`test_matches_triton`; a request tritonserver fails for its python stub's one-second health window skips it:
`tests.support.peer_requests`)."""

from __future__ import annotations

import http.client
import itertools
import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from bench.models import build_chain_repository
from bench.triton_peer import not_installed_reason
from tests.support.peer_requests import peer_request
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ServerProcess
from tests.support.traces import read_traces, wait_traces

WAIT = 60.0  # seconds: a loaded 2-core machine
TRITON_MISSING = not_installed_reason()
STEP_POINTS = ["REQUEST_START", "QUEUE_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START",
               "COMPUTE_END", "REQUEST_END"]
MODEL_POINTS = [*STEP_POINTS[:-1], "INFER_RESPONSE_COMPLETE", "REQUEST_END"]
ENSEMBLE_POINTS = ["REQUEST_START", "QUEUE_START", "INFER_RESPONSE_COMPLETE", "REQUEST_END"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("traces")
    build_chain_repository(root, [2])  # add_one_0, add_one_1 and chain2
    return root


def _runtime(root: Path, trace_file: Path, *flags: str) -> RuntimeProcess:
    return RuntimeProcess([root], [f"--trace-config=triton,file={trace_file}", *(f"--trace-config={f}" for f in flags)])


@pytest.fixture
def server(root: Path, tmp_path: Path) -> Iterator[RuntimeProcess]:
    with _runtime(root, tmp_path / "trace.json") as proc:
        proc.wait_model_ready("chain2", WAIT)
        yield proc


def _request(server: ServerProcess, method: str, path: str, body: object = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=WAIT)
    try:
        connection.request(method, path, None if body is None else json.dumps(body).encode())
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def _infer(server: ServerProcess, model: str, request_id: str, protocol: str = "grpc") -> None:
    name = "IN" if model.startswith("chain") else "X"
    data = np.arange(16, dtype=np.float32)
    if protocol == "grpc":
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            tensor = grpcclient.InferInput(name, [16], "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer(model, [tensor], request_id=request_id)
    else:
        with httpclient.InferenceServerClient(server.http_url.removeprefix("http://")) as client:
            tensor = httpclient.InferInput(name, [16], "FP32")
            tensor.set_data_from_numpy(data)
            result = client.infer(model, [tensor], request_id=request_id)
    out = result.as_numpy("OUT" if model.startswith("chain") else "Y")
    assert out is not None
    np.testing.assert_array_equal(out, data + (2 if model == "chain2" else 1))


def _stream(server: ServerProcess, model: str, request_id: str) -> None:
    """One request over ModelStreamInfer, its answer awaited."""
    answers: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put(error or result))
        tensor = grpcclient.InferInput("X", [16], "FP32")
        tensor.set_data_from_numpy(np.zeros(16, np.float32))
        client.async_stream_infer(model, [tensor], request_id=request_id)
        answer = answers.get(timeout=WAIT)
        client.stop_stream()
    np.testing.assert_array_equal(answer.as_numpy("Y"), np.ones(16, np.float32))


def _in_time_order(points: list[tuple[str, int]]) -> bool:
    return all(a[1] <= b[1] for a, b in itertools.pairwise(points))


def test_settings_over_both_protocols(server: RuntimeProcess, tmp_path: Path) -> None:
    status, body = _request(server, "GET", "/v2/trace/setting")
    assert (status, body) == (200, {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                                    "log_frequency": "0", "trace_file": str(tmp_path / "trace.json"),
                                    "trace_mode": "triton"})
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        changed = client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "5"},
                                               as_json=True)["settings"]
        assert changed["trace_level"] == {"value": ["TIMESTAMPS"]} and changed["trace_rate"] == {"value": ["5"]}
        own = client.update_trace_settings("add_one_0", {"trace_count": "3"}, as_json=True)["settings"]
        assert own["trace_count"] == {"value": ["3"]} and own["trace_rate"] == {"value": ["5"]}
    assert _request(server, "GET", "/v2/trace/setting")[1]["trace_count"] == "-1"
    assert _request(server, "GET", "/v2/models/add_one_0/trace/setting")[1]["trace_count"] == "3"
    # null clears a model's own field (it follows the global one again) and sets a global one back to the start
    assert _request(server, "POST", "/v2/models/add_one_0/trace/setting", {"trace_count": None})[1][
        "trace_count"] == "-1"
    assert _request(server, "POST", "/v2/trace/setting", {"trace_rate": None})[1]["trace_rate"] == "1000"
    with httpclient.InferenceServerClient(server.http_url.removeprefix("http://")) as client:
        assert client.get_trace_settings(model_name="chain2")["trace_level"] == ["TIMESTAMPS"]


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"trace_file": "/tmp/elsewhere.json"}, 501, "trace file location can not be updated through network protocol"),
    ({"trace_level": ["TENSORS"]}, 400, "trace level TENSORS is not supported"),
    ({"trace_level": "TIMESTAMPS"}, 400, "expect an array of strings for 'trace_level'"),
    ({"trace_rate": 5}, 400, "expect a string for 'trace_rate'"),
    ({"trace_rate": "abc", "trace_level": ["TIMESTAMPS"]}, 400, "Unable to parse 'trace_rate', got: abc"),
    ({"log_frequency": "-1"}, 400, "'log_frequency' must be an integer from 0"),
])
def test_wrong_values_are_refused_and_change_nothing(server: RuntimeProcess, body: object, status: int,
                                                     message: str) -> None:
    before = _request(server, "GET", "/v2/trace/setting")[1]
    got, answer = _request(server, "POST", "/v2/trace/setting", body)
    assert (got, answer) == (status, {"error": answer["error"]}) and message in answer["error"]
    assert _request(server, "GET", "/v2/trace/setting")[1] == before
    assert not list(Path("/tmp").glob("elsewhere.json*"))
    _infer(server, "add_one_0", "after")


def test_an_unknown_model_has_no_settings_and_grpc_refuses_the_same(server: RuntimeProcess) -> None:
    status, body = _request(server, "GET", "/v2/models/nope/trace/setting")
    assert status == 404 and "nope" in body["error"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.update_trace_settings(settings={"trace_rate": ["1", "2"]})
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "expect a single value for 'trace_rate'" in str(refused.value.message())
        with pytest.raises(InferenceServerException) as refused:
            client.update_trace_settings(settings={"trace_file": "/tmp/x"})
        assert refused.value.status() == "StatusCode.UNIMPLEMENTED"


def test_traced_requests_are_written_every_log_frequency(root: Path, tmp_path: Path) -> None:
    trace_file = tmp_path / "trace.json"
    with _runtime(root, trace_file, "level=TIMESTAMPS", "rate=1", "log_frequency=1") as proc:
        proc.wait_model_ready("chain2", WAIT)
        _infer(proc, "add_one_0", "single", "grpc")
        _infer(proc, "chain2", "pair", "http")
        _stream(proc, "add_one_0", "streamed")
        traces = wait_traces(trace_file, 3, WAIT)
        # the statistics count traced requests as any other
        with proc.grpc_client() as client:
            stats = client.get_inference_statistics("add_one_0", as_json=True)["model_stats"][0]
            assert stats["inference_stats"]["success"]["count"] == "3"
    streamed = [t for t in traces.values() if t["request_id"] == "streamed"]
    assert len(streamed) == 1 and [name for name, _ in streamed[0]["points"]] == MODEL_POINTS
    single = [t for t in traces.values() if t["request_id"] == "single"]
    assert len(single) == 1 and single[0]["model_name"] == "add_one_0" and single[0]["model_version"] == 1
    assert [name for name, _ in single[0]["points"]] == MODEL_POINTS
    assert _in_time_order(single[0]["points"])
    pair = {t["model_name"]: t for t in traces.values() if t["request_id"] == "pair"}
    assert set(pair) == {"chain2", "add_one_0", "add_one_1"}
    parent = pair["chain2"]
    assert "parent_id" not in parent and [name for name, _ in parent["points"]] == ENSEMBLE_POINTS
    for step in ("add_one_0", "add_one_1"):
        assert pair[step]["parent_id"] == parent["id"]
        assert [name for name, _ in pair[step]["points"]] == STEP_POINTS
        assert _in_time_order(pair[step]["points"])
        start, end = dict(parent["points"])["REQUEST_START"], dict(parent["points"])["REQUEST_END"]
        assert start <= pair[step]["points"][0][1] and pair[step]["points"][-1][1] <= end
    assert dict(pair["add_one_0"]["points"])["REQUEST_END"] <= dict(pair["add_one_1"]["points"])["REQUEST_START"]


def test_rate_and_count_then_the_rest_at_stop(root: Path, tmp_path: Path) -> None:
    """One in every `trace_rate` requests while the count lasts; with log_frequency 0 the traces are written as
    the server stops, to the trace file itself."""
    trace_file = tmp_path / "trace.json"
    proc = _runtime(root, trace_file, "level=TIMESTAMPS", "rate=2", "count=3")
    with proc:
        proc.wait_model_ready("add_one_0", WAIT)
        for i in range(10):
            _infer(proc, "add_one_0", f"r{i}", "grpc" if i % 2 else "http")
        assert _request(proc, "GET", "/v2/trace/setting")[1]["trace_count"] == "0"
        assert not trace_file.exists()
    assert proc.stop() == 0
    traces = read_traces([trace_file])
    assert sorted(t["request_id"] for t in traces.values()) == ["r0", "r2", "r4"]


def test_restricted_like_the_other_categories(root: Path, tmp_path: Path) -> None:
    args = [f"--trace-config=triton,file={tmp_path / 't.json'}",
            "--http-restricted-api=trace:admin-key=s3cret", "--grpc-restricted-protocol=trace:admin-key=s3cret"]
    with RuntimeProcess([root], args) as proc:
        proc.wait_model_ready("chain2", WAIT)
        assert _request(proc, "POST", "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"]})[0] == 403
        with grpcclient.InferenceServerClient(proc.grpc_url) as client:
            with pytest.raises(InferenceServerException) as refused:
                client.get_trace_settings()
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
            allowed = client.get_trace_settings(headers={"triton-grpc-protocol-admin-key": "s3cret"}, as_json=True)
            assert allowed["settings"]["trace_level"] == {"value": ["OFF"]}


# ---- side by side with tritonserver ------------------------------------------------------------------------

SAME: list[tuple[str, str, object]] = [
    ("GET", "/v2/trace/setting", None),
    ("POST", "/v2/trace/setting", {"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "1"}),
    ("POST", "/v2/trace/setting", {"unknown_setting": "1", "trace_mode": "opentelemetry", "trace_count": "-1"}),
    ("POST", "/v2/trace/setting", {"trace_file": "/tmp/elsewhere.json"}),
    ("POST", "/v2/trace/setting", {"trace_rate": "abc"}),
    ("POST", "/v2/models/add_one_0/trace/setting", {"trace_rate": "2"}),
    ("GET", "/v2/models/add_one_0/trace/setting", None),
    ("POST", "/v2/models/add_one_0/trace/setting", {"trace_rate": None}),
    ("GET", "/v2/models/add_one_1/trace/setting", None),
    ("POST", "/v2/trace/setting", {}),
]


@pytest.mark.triton
def test_matches_triton(root: Path, tmp_path: Path) -> None:
    if TRITON_MISSING is not None:
        pytest.skip(TRITON_MISSING)
    from bench.triton_peer import TritonPeer

    mine_file, peer_file = tmp_path / "ours.json", tmp_path / "theirs.json"
    with (_runtime(root, mine_file) as ours,
          TritonPeer([root], [f"--trace-config=triton,file={peer_file}"]) as theirs):
        ours.wait_model_ready("chain2", WAIT)
        theirs.wait_model_ready("chain2", WAIT)
        for method, path, body in SAME:
            mine, peer = _request(ours, method, path, body), _request(theirs, method, path, body)
            if "trace_file" in peer[1]:
                peer[1]["trace_file"] = str(mine_file)
            assert mine == peer, (method, path, body, mine, peer)
        _infer(ours, "add_one_0", "single")
        _infer(ours, "chain2", "pair")
        with peer_request():
            _infer(theirs, "add_one_0", "single")
            _infer(theirs, "chain2", "pair")
        mine_traces = wait_traces(mine_file, 2, WAIT)
        peer_traces = wait_traces(peer_file, 2, WAIT)

    def shapes(traces: dict[int, dict[str, Any]]) -> list[tuple[str, str, bool, list[str]]]:
        """What each trace says, without ids, times and Triton's front end points (the points as a set: where
        INFER_RESPONSE_COMPLETE falls differs, inside the compute under tritonserver's python stub)."""
        return sorted((t["request_id"], t["model_name"], "parent_id" in t,
                       sorted(n for n, _ in t["points"] if not n.startswith(("GRPC_", "HTTP_"))))
                      for t in traces.values())

    assert shapes(mine_traces) == shapes(peer_traces)
