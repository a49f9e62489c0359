"""Triton's generate extension on a real runtime (`POST /v2/models/{m}[/versions/{v}]/generate` and
`.../generate_stream`; http_generate, http_server): a flat JSON object in and out, server-sent events for the stream.

Real bytes over a real HTTP connection, through the native HTTP core (which forwards these routes to the aiohttp
app and streams its answer back) and through aiohttp's server alone. Where tritonserver is installed (tools/
setup-triton.sh), the same requests go to it too and the answers are compared: status, content type and body
(`test_matches_triton`). And the decoupled model's responses reach the client as it sends them, over ModelStreamInfer
too. Two answers differ on purpose, each tested here: a value of the wrong type or a body that is
not a JSON object is a 400 naming what is wrong (Triton: 500), and `generate` on a decoupled model that sends other
than one response is a 400 (Triton: that error in the body of a 200)."""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import onnx_models

from bench.triton_peer import not_installed_reason
from tests.integration.runtime import repo
from tests.integration.runtime.test_hostile_requests import under_attack
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ServerProcess

SSE = "text/event-stream; charset=utf-8"
JSON = "application/json"
LOADED = 120.0
ONE_RESPONSE = ("generate expects model to produce exactly 1 response, use generate stream for model that generates "
                "various number of responses")
TRITON_MISSING = not_installed_reason()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("generate")
    repo.generate_models(root)
    repo._model(root, "add_sub", repo.ADD_SUB_CONFIG, {"1/model.onnx": onnx_models.add_sub().SerializeToString()})
    return root


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate")


def _serving(root: Path, gate: Path, args: list[str]) -> RuntimeProcess:
    return RuntimeProcess([root], args, env={"GENERATE_GATE_DIR": str(gate)})


@pytest.fixture(scope="module", params=["native", "aiohttp"])
def server(request: pytest.FixtureRequest, root: Path, gate: Path) -> Iterator[RuntimeProcess]:
    with _serving(root, gate, [f"--http-frontend={request.param}"]) as proc:
        for model in (*repo.GENERATE_CONFIGS, "add_sub"):  # add_sub: what the hostile-request bounds check serves
            proc.wait_model_ready(model, LOADED)
        yield proc


def _post(server: ServerProcess, path: str, body: object, raw: bytes | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    try:
        data = raw if raw is not None else json.dumps(body).encode()
        connection.request("POST", path, body=data, headers={"Content-Type": JSON, **(headers or {})})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read()
    finally:
        connection.close()


def _events(body: bytes) -> list[dict[str, Any]]:
    """The server-sent events of a body: each `data: <json>` then a blank line, nothing else."""
    assert body.endswith(b"\n\n") or body == b"", body
    chunks = body.split(b"\n\n")[:-1]
    assert all(chunk.startswith(b"data: ") and b"\n" not in chunk for chunk in chunks), body
    return [json.loads(chunk[len(b"data: "):]) for chunk in chunks]


def test_text_in_text_out_with_parameters_and_id(server: RuntimeProcess) -> None:
    """Keys that are not inputs are request parameters, with those of `parameters`; `id` is the request's id too
    (and a parameter, as Triton passes it); the version in the path is served."""
    body = {"text_input": "hello", "parameters": {"temperature": 0.5, "stream": False}, "max_tokens": 7, "id": "r-1"}
    for path in ("/v2/models/echo_text/generate", "/v2/models/echo_text/versions/1/generate"):
        status, kind, raw = _post(server, path, body)
        assert (status, kind) == (200, JSON), raw
        assert json.loads(raw) == {
            "id": "r-1", "model_name": "echo_text", "model_version": "1",
            "text_output": 'hello params={"temperature":0.5,"stream":false,"max_tokens":7,"id":"r-1"} id=r-1',
        }


def test_shapes_and_datatypes_come_from_the_config(server: RuntimeProcess) -> None:
    """A scalar is one element, an array its elements; a batching model gets a batch of one; INT32 and BOOL from
    JSON numbers and booleans. One element comes back a scalar, more an array."""
    status, _, raw = _post(server, "/v2/models/numbers/generate", {"x": [1.0, 2.5, -3], "k": 3, "flag": True})
    assert status == 200, raw
    assert json.loads(raw) == {"model_name": "numbers", "model_version": "1", "n": 3, "y": [2.0, 5.0, -6.0],
                               "described": "x [1, 3] float32, k [1, 1] int32 [3], flag [1, 1] bool [True]"}
    status, _, raw = _post(server, "/v2/models/numbers/generate", {"x": 4.5})
    assert status == 200 and json.loads(raw)["y"] == 9.0 and json.loads(raw)["n"] == 1, raw


@pytest.mark.parametrize(("model", "body", "status", "message"), [
    ("echo_text", {"text_input": ["a", "b"]}, 400,
     "The schema can not convert input 'text_input' to tensor with proper shape"),
    ("echo_text", {}, 400, "missing required input(s) ['text_input']"),
    ("nope", {"text_input": "x"}, 404, "Request for unknown model: 'nope' is not found"),
    ("echo_text", {"text_input": 5}, 400, "input 'text_input': 'data' must hold only strings for datatype BYTES"),
    ("numbers", {"x": ["a"]}, 400, "input 'x': 'data' must hold only numbers for datatype FP32"),
    ("numbers", {"x": [1], "k": 2.5}, 400, "input 'k': 'data' must hold only integers for datatype INT32"),
    ("numbers", {"x": [[1, 2], [3, 4]]}, 400, "unexpected number of elements 4 in 'data' for input 'x'"),
    ("echo_text", {"text_input": "a", "extra": [1]}, 400, "'extra' is not an input of model 'echo_text'"),
    ("echo_text", {"text_input": "a", "parameters": [1]}, 400, "'parameters' of the request must be a JSON object"),
    ("echo_text", {"text_input": "a", "id": 5}, 400, "'id' of the generate request must be a string"),
    ("echo_text", "text", 400, "the generate request for 'echo_text' must be a JSON object, got str"),
])
@pytest.mark.parametrize("kind", ["generate", "generate_stream"])
def test_refusals_are_json_errors_and_the_server_serves_on(server: RuntimeProcess, model: str, body: object,
                                                          status: int, message: str, kind: str) -> None:
    """Refused before inference begins: a JSON error, on generate_stream too, as Triton answers."""
    got, content_type, raw = _post(server, f"/v2/models/{model}/{kind}", body)
    assert (got, content_type) == (status, JSON), raw
    assert message in json.loads(raw)["error"], raw
    assert _post(server, "/v2/models/echo_text/generate", {"text_input": "still"})[0] == 200


def test_malformed_json_is_refused(server: RuntimeProcess) -> None:
    status, _, raw = _post(server, "/v2/models/echo_text/generate", None, raw=b"{not json")
    assert status == 400 and "malformed JSON in the generate request for 'echo_text'" in json.loads(raw)["error"]


def test_generate_stream_sends_each_response_as_an_event(server: RuntimeProcess) -> None:
    status, kind, raw = _post(server, "/v2/models/tokens/generate_stream", {"text_input": "tok", "count": 3})
    assert (status, kind) == (200, SSE), raw
    assert [e["text_output"] for e in _events(raw)] == ["tok#0", "tok#1", "tok#2"]
    assert all(e["model_name"] == "tokens" and e["model_version"] == "1" for e in _events(raw))
    status, kind, raw = _post(server, "/v2/models/echo_text/generate_stream", {"text_input": "once"})  # not decoupled
    assert (status, kind) == (200, SSE) and [e["text_output"] for e in _events(raw)] == ['once params={} id=']
    status, kind, raw = _post(server, "/v2/models/tokens/generate_stream", {"text_input": "tok", "count": 0})
    assert (status, kind, raw) == (200, SSE, b"")  # the final flag alone sends nothing


def test_an_error_response_first_sets_the_status_and_is_an_event(server: RuntimeProcess) -> None:
    status, kind, raw = _post(server, "/v2/models/tokens/generate_stream", {"text_input": "tok", "count": -1})
    assert status >= 400 and kind == SSE, raw
    assert _events(raw) == [{"error": "negative count"}]


def test_generate_takes_exactly_one_response(server: RuntimeProcess) -> None:
    """A decoupled model that sends one response is answered; none or several is a 400 (Triton: a 200 whose body is
    that error), and the model's further responses are not waited for."""
    status, _, raw = _post(server, "/v2/models/tokens/generate", {"text_input": "tok", "count": 1})
    assert status == 200 and json.loads(raw)["text_output"] == "tok#0", raw
    for count in (0, 2):
        status, kind, raw = _post(server, "/v2/models/tokens/generate", {"text_input": "tok", "count": count})
        assert (status, kind, json.loads(raw)) == (400, JSON, {"error": ONE_RESPONSE})


def test_events_reach_the_client_as_the_model_sends_them(server: RuntimeProcess, gate: Path) -> None:
    """The first event arrives while the model still waits to send the second (an LLM's first token is not held
    until its last): through the native core's forwarding too."""
    (gate / "release").unlink(missing_ok=True)
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    try:
        body = json.dumps({"text_input": "live", "count": 2, "hold": True}).encode()
        connection.request("POST", "/v2/models/tokens/generate_stream", body=body, headers={"Content-Type": JSON})
        response = connection.getresponse()
        assert response.status == 200 and response.getheader("Content-Type") == SSE
        first = response.readline()  # `data: {...}` and its line end, while the model holds the second
        assert json.loads(first[len(b"data: "):])["text_output"] == "live#0"
        assert not (gate / "release").exists()
        (gate / "release").write_text("")
        assert [e["text_output"] for e in _events(first + response.read())] == ["live#0", "live#1"]
    finally:
        (gate / "release").write_text("")
        connection.close()


def test_a_client_leaving_mid_stream_loses_nothing_else(server: RuntimeProcess, gate: Path) -> None:
    """A client that goes away after the first event: the model's further sends are dropped, nothing is logged as
    an error, and the server serves on (the stream's next request included)."""
    (gate / "release").unlink(missing_ok=True)
    before = server.log_text()
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    try:
        body = json.dumps({"text_input": "gone", "count": 3, "hold": True}).encode()
        connection.request("POST", "/v2/models/tokens/generate_stream", body=body, headers={"Content-Type": JSON})
        response = connection.getresponse()
        assert json.loads(response.readline()[len(b"data: "):])["text_output"] == "gone#0"
    finally:
        connection.close()  # gone while the model holds its second response
    time.sleep(0.2)
    (gate / "release").write_text("")
    status, _, raw = _post(server, "/v2/models/tokens/generate_stream", {"text_input": "next", "count": 2})
    assert status == 200 and [e["text_output"] for e in _events(raw)] == ["next#0", "next#1"]
    logged = server.log_text()[len(before):]
    assert "Traceback" not in logged and "ERROR" not in logged, logged


def test_model_stream_infer_hears_each_response_as_it_is_sent(server: RuntimeProcess, gate: Path) -> None:
    """The same over gRPC: a decoupled model's response sent from `execute` reaches the stream while `execute` still
    runs. Before, the data plane read a request's responses only once `execute` had returned, so a model streaming
    tokens from `execute` delivered them all at its end."""
    (gate / "release").unlink(missing_ok=True)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"grpc"], dtype=np.object_))
    hold = grpcclient.InferInput("hold", [1], "BOOL")
    hold.set_data_from_numpy(np.array([True]))
    with server.grpc_client() as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer("tokens", [text, hold])
            result, error = answers.get(timeout=60)
            assert error is None and result.as_numpy("text_output").tolist() == [b"grpc#0"]
            assert not (gate / "release").exists()  # the model is still holding the rest
            (gate / "release").write_text("")
            got = [answers.get(timeout=60) for _ in range(2)]
            assert [r.as_numpy("text_output").tolist() for r, e in got if e is None] == [[b"grpc#1"], [b"grpc#2"]]
        finally:
            (gate / "release").write_text("")
            client.stop_stream()


def test_large_bodies_leave_the_loop_free(server: RuntimeProcess) -> None:
    """A 6 MiB generate body (a million numbers) is decoded and its million-number answer written off the event
    loop: liveness answers meanwhile, within the hostile-request bounds. One past --http-max-json-bytes is a 413
    without being read, and a body nested too deep a 400; the server serves on."""
    values = [0.25] * 1_000_000
    body = json.dumps({"x": values}).encode()

    def send() -> tuple[int, str, bytes]:
        return _post(server, "/v2/models/numbers/generate", None, raw=body)

    status, _, raw = under_attack(server, "generate, 1M numbers each way", send)
    assert status == 200 and json.loads(raw)["n"] == 1_000_000, raw[:300]
    too_large = b'{"x": [' + b"1," * (4 * 1024 * 1024) + b'1]}'
    status, _, raw = _post(server, "/v2/models/numbers/generate_stream", None, raw=too_large)
    assert status == 413 and "--http-max-json-bytes" in json.loads(raw)["error"], raw[:300]
    status, _, raw = _post(server, "/v2/models/numbers/generate", None, raw=b'{"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert status == 400 and "nested too deeply" in json.loads(raw)["error"], raw[:300]
    assert _post(server, "/v2/models/echo_text/generate", {"text_input": "still"})[0] == 200


def test_restricted_inference_covers_generate(root: Path, gate: Path) -> None:
    """--http-restricted-api on the inference category refuses both routes without the header (403, before the
    body is read) and serves them with it."""
    args = ["--http-restricted-api=inference:infer-key=secret"]
    with _serving(root, gate, args) as proc:
        proc.wait_model_ready("echo_text", LOADED)
        for kind in ("generate", "generate_stream"):
            status, _, raw = _post(proc, f"/v2/models/echo_text/{kind}", {"text_input": "x"})
            assert status == 403, raw
            status, _, raw = _post(proc, f"/v2/models/echo_text/{kind}", {"text_input": "x"},
                                   headers={"infer-key": "secret"})
            assert status == 200, raw


# ---- side by side with tritonserver ------------------------------------------------------------------------

SAME = [
    ("echo_text", "generate", {"text_input": "hi", "parameters": {"n": 3, "t": 0.5, "s": "x"}, "extra": True}),
    ("echo_text", "generate", {"text_input": "hi", "id": "req-9"}),
    ("echo_text", "generate_stream", {"text_input": "hi"}),
    ("echo_text", "generate", {"text_input": ["a", "b"]}),
    ("numbers", "generate", {"x": [1.0, 2.0, 3.0], "k": 2}),
    ("numbers", "generate", {"x": 4.5, "flag": False}),
    ("tokens", "generate_stream", {"text_input": "tok", "count": 2}),
    ("tokens", "generate_stream", {"text_input": "tok", "count": 0}),
    ("tokens", "generate", {"text_input": "tok", "count": 1}),
    ("nope", "generate", {"text_input": "x"}),
]


@pytest.fixture(scope="module")
def triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """tritonserver on the generate models alone (its install has no ONNX Runtime backend for add_sub)."""
    if TRITON_MISSING is not None:
        pytest.skip(TRITON_MISSING)
    from bench.triton_peer import TritonPeer

    root = tmp_path_factory.mktemp("generate-peer")
    repo.generate_models(root)
    with TritonPeer([root]) as peer:
        deadline = time.monotonic() + LOADED
        for model in repo.GENERATE_CONFIGS:
            with contextlib.suppress(Exception):
                peer.wait_model_ready(model, max(1.0, deadline - time.monotonic()))
        yield peer


@pytest.mark.triton
@pytest.mark.parametrize(("model", "kind", "body"), SAME)
def test_matches_triton(server: RuntimeProcess, triton: ServerProcess, model: str, kind: str, body: object) -> None:
    path = f"/v2/models/{model}/{kind}"
    ours, theirs = _post(server, path, body), _post(triton, path, body)
    assert ours[:2] == theirs[:2], (ours, theirs)
    if ours[1] == SSE:
        assert _events(ours[2]) == _events(theirs[2])
    else:
        assert json.loads(ours[2]) == json.loads(theirs[2])
