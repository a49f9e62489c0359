"""The native HTTP front end (--http-frontend=native, the default) against a real runtime process with real
clients. Each answer is compared with what the aiohttp front end gives to the same bytes, from a second process
over the same repository. The infer endpoint is answered by the core (no `Server` header), and every other route is
forwarded to the aiohttp app (whose answers name the product in one, and no versions). ENSEMBLE_TEST_HTTP_FRONTEND=aiohttp runs the
other runtime tests on aiohttp."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import stat
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.http as httpclient
from ensemble_runtime.dtypes import serialize_bytes

from tests.support.runtime_process import RuntimeProcess
from tests.support.sigterm import answered_through_sigterm

LIMIT = 256 * 1024
JSON_LIMIT = 64 * 1024
RESTRICTED = "inference:infer-key=s3cret"
Answer = tuple[int, dict[str, str], bytes]


def _start(repository: Path, frontend: str) -> RuntimeProcess:
    return RuntimeProcess([repository], [f"--http-frontend={frontend}", "--strict-readiness=false",
                                         f"--http-max-body-bytes={LIMIT}", f"--http-max-json-bytes={JSON_LIMIT}",
                                         f"--http-restricted-api={RESTRICTED}"]).start()


@pytest.fixture(scope="module")
def servers(repository: Path) -> Iterator[dict[str, RuntimeProcess]]:
    native, aiohttp = _start(repository, "native"), _start(repository, "aiohttp")
    try:
        for proc in (native, aiohttp):
            proc.wait_ready()
            proc.wait_model_ready("add_sub")
        yield {"native": native, "aiohttp": aiohttp}
    finally:
        native.stop()
        aiohttp.stop()


def _call(proc: RuntimeProcess, method: str, path: str, body: bytes | Iterable[bytes] = b"",
          headers: dict[str, str] | None = None) -> Answer:
    """(status, headers with lower-case names, body) of one request on a fresh connection."""
    host, port = proc.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {}, encode_chunked=not isinstance(body, bytes))
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _infer_body(binary: bool, outputs_binary: bool = False) -> tuple[bytes, dict[str, str]]:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    b = np.full((1, 16), 0.5, np.float32)
    inputs: list[dict[str, object]] = []
    tail = b""
    for name, array in (("INPUT0", a), ("INPUT1", b)):
        entry: dict[str, object] = {"name": name, "datatype": "FP32", "shape": [1, 16]}
        if binary:
            entry["parameters"] = {"binary_data_size": array.nbytes}
            tail += array.tobytes()
        else:
            entry["data"] = array.reshape(-1).tolist()
        inputs.append(entry)
    outputs = [{"name": "OUTPUT0", "parameters": {"binary_data": outputs_binary}}, {"name": "OUTPUT1"}]
    head = json.dumps({"id": "r1", "inputs": inputs, "outputs": outputs}).encode()
    headers = {"infer-key": "s3cret", "Content-Type": "application/json"}
    if binary:
        headers["Inference-Header-Content-Length"] = str(len(head))
    return head + tail, headers


def _same(servers: dict[str, RuntimeProcess], method: str, path: str, body: bytes | list[bytes] = b"",
          headers: dict[str, str] | None = None) -> Answer:
    """Both front ends' answers, which must agree in status, content type, header length and body."""
    native = _call(servers["native"], method, path, body, headers)
    aiohttp = _call(servers["aiohttp"], method, path, body, headers)
    keys = ("content-type", "inference-header-content-length")
    assert (native[0], [native[1].get(k) for k in keys], native[2]) == (aiohttp[0], [aiohttp[1].get(k) for k in keys], aiohttp[2])
    return native


def _answered_by_core(answer: Answer) -> bool:
    return "server" not in answer[1]  # the app's answers name the product in one


@pytest.mark.parametrize(("binary", "outputs_binary"), [(False, False), (True, False), (True, True)])
def test_infer_is_answered_by_the_core_as_aiohttp_answers(servers: dict[str, RuntimeProcess], binary: bool,
                                                          outputs_binary: bool) -> None:
    body, headers = _infer_body(binary, outputs_binary)
    for path in ("/v2/models/add_sub/infer", "/v2/models/add_sub/versions/1/infer"):
        status, reply_headers, answer = _same(servers, "POST", path, body, headers)
        assert status == 200, answer
        assert _answered_by_core((status, reply_headers, answer))
    if outputs_binary:
        head = int(reply_headers["inference-header-content-length"])
        out = np.frombuffer(answer[head:], np.float32)
        np.testing.assert_array_equal(out, np.arange(16, dtype=np.float32) + 0.5)
        assert json.loads(answer[:head])["id"] == "r1"


@pytest.mark.parametrize("text", ["not asked for", "binary", "JSON"])
def test_binary_outputs_of_every_kind_as_aiohttp_writes_them(servers: dict[str, RuntimeProcess], text: str) -> None:
    """`types` (fp16, int8, bool and BYTES through Identity), every input as binary data, byte for byte as aiohttp
    answers: the numbers alone written by the core from the arrays themselves; with the BYTES output, as binary
    data or JSON, by Python's encoding."""
    for proc in servers.values():
        proc.wait_model_ready("types")
    arrays: dict[str, npt.NDArray[Any]] = {
        "fp16_in": np.array([[1.5, -2]], np.float16), "int8_in": np.array([[-3, 4]], np.int8),
        "flag_in": np.array([[True, False]]),
    }
    inputs: list[dict[str, object]] = []
    tail = b""
    for name, array in arrays.items():
        datatype = {"f": "FP16", "i": "INT8", "b": "BOOL"}[array.dtype.kind]
        inputs.append({"name": name, "datatype": datatype, "shape": [1, 2],
                       "parameters": {"binary_data_size": array.nbytes}})
        tail += array.tobytes()
    encoded = serialize_bytes(np.array([[b"ab", b""]], dtype=np.object_))
    inputs.append({"name": "text_in", "datatype": "BYTES", "shape": [1, 2],
                   "parameters": {"binary_data_size": len(encoded)}})
    tail += encoded
    outputs = [{"name": n, "parameters": {"binary_data": True}} for n in ("fp16_out", "int8_out", "flag_out")]
    if text != "not asked for":
        outputs.append({"name": "text_out", "parameters": {"binary_data": text == "binary"}})
    head = json.dumps({"id": "t", "inputs": inputs, "outputs": outputs}).encode()
    headers = {"infer-key": "s3cret", "Content-Type": "application/json",
               "Inference-Header-Content-Length": str(len(head))}
    status, reply_headers, answer = _same(servers, "POST", "/v2/models/types/infer", head + tail, headers)
    assert status == 200, answer
    length = int(reply_headers["inference-header-content-length"])
    described = json.loads(answer[:length])["outputs"]
    assert [o["datatype"] for o in described] == ["FP16", "INT8", "BOOL", "BYTES"][:len(outputs)]
    assert answer[length:].startswith(tail[:6])  # fp16, int8, bool, in order


@pytest.mark.parametrize("case", ["bad_json", "no_inputs", "short_binary", "missing_model", "missing_version",
                                  "header_length_junk", "empty"])
def test_infer_errors_as_aiohttp_answers_them(servers: dict[str, RuntimeProcess], case: str) -> None:
    body, headers = _infer_body(True)
    path = "/v2/models/add_sub/infer"
    if case == "bad_json":
        body, headers = b'{"inputs": [', {"infer-key": "s3cret"}
    elif case == "no_inputs":
        body, headers = b'{"inputs": []}', {"infer-key": "s3cret"}
    elif case == "short_binary":
        body = body[:-4]
    elif case == "missing_model":
        path = "/v2/models/nope/infer"
    elif case == "missing_version":
        path = "/v2/models/add_sub/versions/9/infer"
    elif case == "header_length_junk":
        headers["Inference-Header-Content-Length"] = "12x"
    else:
        body, headers = b"", {"infer-key": "s3cret"}
    status, reply_headers, answer = _same(servers, "POST", path, body, headers)
    assert 400 <= status < 500 and json.loads(answer)["error"], answer
    assert _answered_by_core((status, reply_headers, answer))


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v2"), ("GET", "/v2/health/ready"), ("GET", "/v2/models/add_sub"), ("GET", "/v2/models/add_sub/config"),
    ("GET", "/v2/models/add_sub/ready"), ("GET", "/v2/models/add_sub/infer"), ("POST", "/v2/nowhere"),
    ("POST", "/v2/repository/index"), ("PUT", "/v2/models/add_sub/infer"),
])
def test_other_routes_are_forwarded_to_the_app(servers: dict[str, RuntimeProcess], method: str, path: str) -> None:
    answer = _same(servers, method, path)
    assert not _answered_by_core(answer)


@pytest.mark.parametrize("path", ["/v2/models/add%5Fsub/infer", "/v2/models/add_sub/infer?x=1"])
def test_infer_paths_the_core_leaves_alone_still_infer(servers: dict[str, RuntimeProcess], path: str) -> None:
    body, headers = _infer_body(False)
    answer = _same(servers, "POST", path, body, headers)
    assert answer[0] == 200 and not _answered_by_core(answer), answer


def test_compressed_request_goes_through_the_app(servers: dict[str, RuntimeProcess]) -> None:
    body, headers = _infer_body(True)
    headers.update({"Content-Encoding": "gzip", "Accept-Encoding": "gzip"})
    answer = _call(servers["native"], "POST", "/v2/models/add_sub/infer", gzip.compress(body), headers)
    status, reply_headers, reply = answer
    assert status == 200 and reply_headers.get("content-encoding") == "gzip", reply
    assert json.loads(gzip.decompress(reply))["outputs"][0]["data"][1] == 1.5
    assert not _answered_by_core(answer)


def _inflate(coding: str | None, body: bytes) -> bytes:
    if coding == "gzip":
        return gzip.decompress(body)
    return zlib.decompress(body) if coding == "deflate" else body


# (Accept-Encoding, the coding of the answer): as Triton answers them (checked against the peer in
# tests/integration/triton_examples/test_infer.py::test_infer_answer_codings)
ACCEPTED = [("gzip, deflate", "gzip"), ("deflate, gzip", "deflate"), ("br, deflate;q=0.5", "deflate"),
            ("gzip;q=0.4, deflate;q=0.6", "deflate"), ("gzip;q=0", None), ("*", None), ("identity", None), ("br", None)]


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize(("accept", "coding"), ACCEPTED)
def test_compressed_answers_by_the_core_as_the_app_gives_them(servers: dict[str, RuntimeProcess], binary: bool,
                                                              accept: str, coding: str | None) -> None:
    """Most clients send Accept-Encoding unasked (python-requests, httpx, Go): the core compresses the answer
    itself, with the coding the client prefers, and the request keeps the fast path. Errors are not compressed."""
    body, headers = _infer_body(binary, outputs_binary=binary)
    headers["Accept-Encoding"] = accept
    answers = {name: _call(proc, "POST", "/v2/models/add_sub/infer", body, headers) for name, proc in servers.items()}
    native, aiohttp = answers["native"], answers["aiohttp"]
    assert _answered_by_core(native) and not _answered_by_core(aiohttp)
    for status, reply_headers, _ in answers.values():
        assert status == 200 and reply_headers.get("content-encoding") == coding, reply_headers
    assert _inflate(coding, native[2]) == _inflate(coding, aiohttp[2])
    assert native[1].get("inference-header-content-length") == aiohttp[1].get("inference-header-content-length")
    headers["Accept-Encoding"] = accept
    refused = _call(servers["native"], "POST", "/v2/models/no_such_model/infer", body, headers)
    assert refused[0] == 404 and "content-encoding" not in refused[1] and json.loads(refused[2])["error"]


def test_restricted_inference_needs_its_header(servers: dict[str, RuntimeProcess]) -> None:
    body, headers = _infer_body(True)
    del headers["infer-key"]
    status, reply_headers, answer = _same(servers, "POST", "/v2/models/add_sub/infer", body, headers)
    assert status == 403 and "expecting header 'infer-key'" in json.loads(answer)["error"]
    assert _answered_by_core((status, reply_headers, answer))
    headers["infer-key"] = "s3cret!"
    assert _same(servers, "POST", "/v2/models/add_sub/infer", body, headers)[0] == 403


@pytest.mark.parametrize("chunked", [False, True])
def test_bodies_over_the_limits_are_refused_and_the_connection_closed(servers: dict[str, RuntimeProcess],
                                                                      chunked: bool) -> None:
    headers = {"infer-key": "s3cret", "Inference-Header-Content-Length": "10"}
    big = b"x" * (2 * LIMIT)
    body: bytes | list[bytes] = [big[i:i + 65536] for i in range(0, len(big), 65536)] if chunked else big
    status, reply_headers, answer = _same(servers, "POST", "/v2/models/add_sub/infer", body, headers)
    assert status == 413 and f"exceeds the limit of {LIMIT} bytes" in json.loads(answer)["error"]
    assert reply_headers.get("connection") == "close"
    json_headers = {"infer-key": "s3cret"}  # all JSON: the JSON limit
    status, _, answer = _same(servers, "POST", "/v2/models/add_sub/infer", b" " * (2 * JSON_LIMIT), json_headers)
    assert status == 413 and f"JSON in a request body exceeds the limit of {JSON_LIMIT} bytes" in answer.decode()
    header_too_long = {**headers, "Inference-Header-Content-Length": str(JSON_LIMIT + 1)}
    status, _, answer = _same(servers, "POST", "/v2/models/add_sub/infer", b"{}", header_too_long)
    assert status == 413 and "JSON in a request body" in answer.decode()


def test_kept_alive_connections_serve_many_requests_concurrently(servers: dict[str, RuntimeProcess]) -> None:
    native = servers["native"]
    client = httpclient.InferenceServerClient(native.http_url, concurrency=4)
    try:
        arrays = [np.full((1, 16), i, np.float32) for i in range(200)]
        pending = []
        for i, a in enumerate(arrays):
            inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "FP32")]
            inputs[0].set_data_from_numpy(a, binary_data=bool(i % 2))
            inputs[1].set_data_from_numpy(a, binary_data=True)
            pending.append(client.async_infer("add_sub", inputs, headers={"infer-key": "s3cret"}))
        for a, request in zip(arrays, pending, strict=True):
            result = request.get_result()
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a * 0)
    finally:
        client.close()


def test_a_silent_client_does_not_hold_the_port(servers: dict[str, RuntimeProcess]) -> None:
    """A client that opens connections and sends nothing, or half a request, does not stop others."""
    native = servers["native"]
    host, port = native.http_url.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port))) for _ in range(20)]
    try:
        idle[0].sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        body, headers = _infer_body(True)
        assert _call(native, "POST", "/v2/models/add_sub/infer", body, headers)[0] == 200
    finally:
        for conn in idle:
            conn.close()


@pytest.mark.parametrize("frontend", ["native", "aiohttp"])
def test_no_answer_names_the_software_or_its_version(servers: dict[str, RuntimeProcess], frontend: str) -> None:
    # aiohttp's own Server header is "Python/3.11 aiohttp/3.x.y"
    proc = servers[frontend]
    body, headers = _infer_body(True)
    answers = [
        _call(proc, "POST", "/v2/models/add_sub/infer", body, headers),  # the core's, on the native front end
        _call(proc, "GET", "/v2/models/add_sub"),  # forwarded to the app there
        _call(proc, "GET", "/v2/nowhere"),
        _call(proc, "POST", "/v2/models/add_sub/infer", b"{", {"Content-Type": "application/json"}),  # restricted
    ]
    conn = http.client.HTTPConnection("127.0.0.1", proc.metrics_port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        response.read()
        answers.append((response.status, {k.lower(): v for k, v in response.getheaders()}, b""))
    finally:
        conn.close()
    assert [a[0] for a in answers] == [200, 200, 404, 403, 200], [a[:2] for a in answers]
    for answer in answers:
        assert answer[1].get("server", "ensemble-runtime") == "ensemble-runtime", answer[1]


def test_the_apps_socket_is_private_and_removed_at_exit(repository: Path) -> None:
    proc = RuntimeProcess([repository], ["--model-control-mode=explicit", "--http-frontend=native"]).start()
    try:
        deadline = time.monotonic() + 60  # gRPC answers before the HTTP port is up: wait for its log line
        while (found := re.search(r"routes it forwards go to (\S+)", proc.log_text())) is None:
            assert time.monotonic() < deadline, proc.log_text()
            time.sleep(0.05)
        socket_path = Path(found.group(1))
        directory = socket_path.parent
        assert stat.S_ISSOCK(socket_path.stat().st_mode)
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, oct(directory.stat().st_mode)
        assert directory.stat().st_uid == os.getuid()
    finally:
        assert proc.stop() == 0
    assert not directory.exists()


def test_sigterm_finishes_an_http_request_in_flight(repository: Path, tmp_path: Path) -> None:
    answered_through_sigterm(repository, tmp_path / "started", "http", ["--http-frontend=native"])
