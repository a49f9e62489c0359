"""Hostile and careless requests against a real server process, over gRPC and HTTP (issue 10, findings 4 and 6).

Each attack is sent as real bytes while a thread probes liveness on both transports; the test asserts a clear
4xx / INVALID_ARGUMENT, a bound on the server's memory peak (VmHWM) and on the worst liveness latency, and that
a good request still works afterwards. The liveness bound asserted is loose (a busy 2-core machine); the figures
measured are printed (run with -s to see them).
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from ensemble_examples import onnx_models
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.integration.runtime import repo
from tests.support.liveness import LivenessProbe, memory_kib
from tests.support.runtime_process import RuntimeProcess

T = TypeVar("T")
MiB = 1024 * 1024
MAX_BODY = 32 * MiB
LIVENESS_BOUND_S = 1.0  # the issue asks for 100 ms; measured figures are printed, the bound is for a busy CI box
PEAK_GROWTH_BOUND_KIB = 160 * 1024  # every attack here used to cost 1 GiB or more
PY_INPLACE_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


def build_repository(root: Path) -> Path:
    repo._model(root, "add_sub", repo.ADD_SUB_CONFIG, {"1/model.onnx": onnx_models.add_sub().SerializeToString()})
    repo._model(root, "py_inplace", PY_INPLACE_CONFIG, {"1/model.py": repo.MODELS / "py_inplace" / "model.py"})
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    root = build_repository(tmp_path_factory.mktemp("hostile"))
    args = ["--model-control-mode=explicit", "--load-model=add_sub", "--load-model=py_inplace",
            f"--http-max-body-bytes={MAX_BODY}"]
    with RuntimeProcess([root], args) as proc:
        proc.wait_model_ready("add_sub")
        proc.wait_model_ready("py_inplace")
        yield proc


# ---- helpers -------------------------------------------------------------------------------------------


def still_serving(server: RuntimeProcess) -> None:
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    with server.grpc_client() as client:
        inputs = [grpcclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for item in inputs:
            item.set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
    with server.http_client() as hclient:
        hinputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
        for hitem in hinputs:
            hitem.set_data_from_numpy(a, binary_data=False)
        np.testing.assert_array_equal(hclient.infer("add_sub", hinputs).as_numpy("OUTPUT1"), a - a)


def under_attack(server: RuntimeProcess, name: str, send: Callable[[], T]) -> T:
    """`send()` while liveness is probed; asserts the latency and memory bounds and that serving goes on."""
    before = memory_kib(server.pid)
    with LivenessProbe(server.http_url, server.grpc_url) as probe:
        deadline = time.monotonic() + 30
        while probe.probes < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        result = send()
    growth = memory_kib(server.pid) - before
    print(f"\n[{name}] {probe.report()}; VmHWM +{growth // 1024} MiB")
    assert not probe.failures, probe.failures
    assert probe.worst_s < LIVENESS_BOUND_S, f"{name}: {probe.report()}"
    assert growth < PEAK_GROWTH_BOUND_KIB, f"{name}: memory peak grew by {growth // 1024} MiB"
    still_serving(server)
    return result


def grpc_error(server: RuntimeProcess, call: str, request: object) -> tuple[grpc.StatusCode, str]:
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            getattr(stub, call)(request, timeout=60)
        return info.value.code(), info.value.details() or ""


def http_call(server: RuntimeProcess, method: str, path: str, body: bytes = b"",
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = server.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()  # names: lower case
    finally:
        conn.close()


def error_of(body: bytes) -> str:
    return str(json.loads(body)["error"])


def binary_infer_body(inputs: list[tuple[str, str, list[int], bytes]], outputs: list[dict[str, object]] | None = None
                      ) -> tuple[bytes, dict[str, str]]:
    header: dict[str, object] = {"inputs": [
        {"name": n, "datatype": d, "shape": s, "parameters": {"binary_data_size": len(raw)}} for n, d, s, raw in inputs
    ]}
    if outputs is not None:
        header["outputs"] = outputs
    head = json.dumps(header).encode()
    body = head + b"".join(raw for *_, raw in inputs)
    return body, {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}


# ---- finding 4: memory and event-loop amplification -------------------------------------------------------

SMALL_BYTES = struct.pack("<I", 31) + b"a" * 31  # 35 bytes: one BYTES element


@pytest.mark.parametrize("model", ["add_sub", "nope"])
def test_bytes_shape_bomb_grpc(server: RuntimeProcess, model: str) -> None:
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype="BYTES", shape=[2**27])
    request.raw_input_contents.append(SMALL_BYTES)
    code, details = under_attack(server, f"gRPC BYTES [2**27] ({model})", lambda: grpc_error(server, "ModelInfer", request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert "ends after 1 of 134217728 elements" in details


def test_shape_overflow_grpc(server: RuntimeProcess) -> None:
    for shape, raw in (([2**62, 2**62], b""), ([0, 2**62, 2**62], b"")):
        request = service_pb2.ModelInferRequest(model_name="add_sub")
        request.inputs.add(name="INPUT0", datatype="FP32", shape=shape)
        request.raw_input_contents.append(raw)
        code, details = under_attack(server, f"gRPC FP32 {shape}", partial(grpc_error, server, "ModelInfer", request))
        assert code == grpc.StatusCode.INVALID_ARGUMENT, details
        assert "larger than any tensor can be" in details, details


def test_bytes_shape_bomb_http(server: RuntimeProcess) -> None:
    body, headers = binary_infer_body([("INPUT0", "BYTES", [2**27], SMALL_BYTES)])
    status, _, answer = under_attack(
        server, "HTTP BYTES [2**27]", lambda: http_call(server, "POST", "/v2/models/add_sub/infer", body, headers)
    )
    assert status == 400, answer
    assert "ends after 1 of 134217728 elements" in error_of(answer)


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """About 1 MiB of gzip that inflates to 1 GiB of zeros."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MiB)
    return b"".join([*(packer.compress(zeros) for _ in range(1024)), packer.flush()])


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_compressed_bomb_refused_at_the_cap(server: RuntimeProcess, gzip_bomb: bytes, encoding: str) -> None:
    body = gzip_bomb if encoding == "gzip" else _deflate_bomb()
    headers = {"Content-Encoding": encoding, "Content-Type": "application/json"}
    if encoding == "deflate":  # a binary-extension request: the body limit applies, not the JSON one
        headers["Inference-Header-Content-Length"] = "2"
    status, reply_headers, answer = under_attack(
        server, f"HTTP {encoding} bomb ({len(body) // 1024} KiB -> 1 GiB)",
        lambda: http_call(server, "POST", "/v2/models/add_sub/infer", body, headers),
    )
    assert status == 413, answer
    assert "exceeds the limit of" in error_of(answer)  # a JSON body: the JSON limit, within the body limit
    assert reply_headers.get("connection", "").lower() == "close"


def _deflate_bomb() -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS)
    zeros = bytes(MiB)
    return b"".join([*(packer.compress(zeros) for _ in range(1024)), packer.flush()])


def test_compressed_body_within_the_cap_still_works(server: RuntimeProcess) -> None:
    a = [1.0] * 16
    request = {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16], "data": a} for n in ("INPUT0", "INPUT1")]}
    body = gzip.compress(json.dumps(request).encode())
    status, _, answer = http_call(server, "POST", "/v2/models/add_sub/infer", body,
                                  {"Content-Encoding": "gzip", "Content-Type": "application/json"})
    assert status == 200, answer
    assert json.loads(answer)["outputs"][0]["data"] == [2.0] * 16
    status, _, answer = http_call(server, "POST", "/v2/models/add_sub/infer", b"not gzip at all",
                                  {"Content-Encoding": "gzip"})
    assert status == 400 and "not valid gzip data" in error_of(answer), answer
    status, _, answer = http_call(server, "POST", "/v2/models/add_sub/infer", b"{}", {"Content-Encoding": "br"})
    assert status == 415 and "unsupported Content-Encoding 'br'" in error_of(answer), answer


def test_content_length_over_the_limit_refused_before_the_body(server: RuntimeProcess) -> None:
    """Only the headers are sent: the answer must come without the server waiting for 10 GiB."""

    def send() -> bytes:
        host, port = server.http_url.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(b"POST /v2/models/add_sub/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 10737418240\r\n\r\n{\"inputs\": [")
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
            return reply

    reply = under_attack(server, "HTTP Content-Length 10 GiB", send)
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]
    assert b"exceeds the limit of" in reply


def test_json_cap_and_large_json_parsed_off_the_loop(tmp_path: Path) -> None:
    """With the default limits (256 MiB bodies, 8 MiB of JSON), a 48 MB JSON body is refused by its length and
    one just under the JSON limit is parsed in a worker thread."""
    root = build_repository(tmp_path / "repo")
    with RuntimeProcess([root], ["--model-control-mode=explicit", "--load-model=add_sub"]) as proc:
        proc.wait_model_ready("add_sub")

        def body(size: int) -> bytes:
            head = b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": ['
            return head + b"1.2345678," * ((size - len(head)) // 10 - 1) + b'1.0]}]}'

        big = body(48 * MiB)
        status, _, answer = under_attack(
            proc, "HTTP JSON 48 MiB over the 8 MiB JSON limit",
            lambda: http_call(proc, "POST", "/v2/models/add_sub/infer", big, {"Content-Type": "application/json"}),
        )
        assert status == 413, answer
        assert f"JSON in a request body exceeds the limit of {8 * MiB} bytes" in error_of(answer)
        under_cap = body(8 * MiB - 64)
        status, _, answer = under_attack(
            proc, f"HTTP JSON {len(under_cap) // MiB} MiB under the cap",
            lambda: http_call(proc, "POST", "/v2/models/add_sub/infer", under_cap, {"Content-Type": "application/json"}),
        )
        assert status == 400, answer
        assert "unexpected number of elements" in error_of(answer)


def test_large_config_pbtxt_polled_off_the_loop(tmp_path: Path) -> None:
    """Poll mode: a 4 MiB config.pbtxt is refused (over --max-config-bytes) without stalling the loop on any
    poll, and a large one under the cap is parsed once, off the loop, and not again while it is unchanged."""
    root = tmp_path / "repo"
    model = onnx_models.add_sub().SerializeToString()
    filler = "".join(f'parameters {{ key: "k{i:06d}" value {{ string_value: "vvvvvvvvvvvvvvvv" }} }}\n'
                     for i in range(70_000))
    repo._model(root, "add_sub", repo.ADD_SUB_CONFIG, {"1/model.onnx": model})
    repo._model(root, "huge", repo.ADD_SUB_CONFIG.replace('"add_sub"', '"huge"') + filler, {"1/model.onnx": model})
    repo._model(root, "large", repo.ADD_SUB_CONFIG.replace('"add_sub"', '"large"') + filler[: 900 * 1024 - 2048]
                .rsplit("\n", 1)[0] + "\n", {"1/model.onnx": model})
    assert (root / "huge" / "config.pbtxt").stat().st_size > 4 * MiB
    args = ["--model-control-mode=poll", "--repository-poll-secs=0.5", "--strict-readiness=false"]
    with RuntimeProcess([root], args) as proc:
        proc.wait_model_ready("add_sub", timeout=180)

        def polls() -> int:
            """Until the log shows several more polls (each reports the refused config twice)."""
            seen = proc.log_text().count("over the limit")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.log_text().count("over the limit") < seen + 6:
                time.sleep(0.1)
            return proc.log_text().count("over the limit") - seen

        reports = under_attack(proc, "poll mode, 4 MiB and 0.9 MiB config.pbtxt", polls)
        assert reports >= 6, proc.log_text()[-3000:]
        assert "over the limit of 1048576 bytes for a model configuration" in proc.log_text()
        proc.wait_model_ready("large", timeout=60)
        with proc.grpc_client() as client:
            index = {m.name: m for m in client.get_model_repository_index().models}
        assert index["huge"].state == "UNAVAILABLE" and "--max-config-bytes" in index["huge"].reason, index["huge"]


# ---- finding 6: Triton semantics at the edges -----------------------------------------------------------


def test_python_model_edits_its_input_in_place(server: RuntimeProcess) -> None:
    x = np.arange(4, dtype=np.float32)
    with server.grpc_client() as client:
        item = grpcclient.InferInput("X", [4], "FP32")
        item.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("py_inplace", [item]).as_numpy("Y"), x * 2)
    with server.http_client() as hclient:
        hitem = httpclient.InferInput("X", [4], "FP32")
        hitem.set_data_from_numpy(x, binary_data=True)
        np.testing.assert_array_equal(hclient.infer("py_inplace", [hitem]).as_numpy("Y"), x * 2)


def test_deeply_nested_json_is_a_400(server: RuntimeProcess) -> None:
    body = b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1], "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}"
    status, _, answer = under_attack(
        server, "HTTP JSON 100k nested [", lambda: http_call(server, "POST", "/v2/models/add_sub/infer", body)
    )
    assert status == 400, answer
    assert "nested too deeply" in error_of(answer)
    nested_data = {"inputs": [{"name": n, "datatype": "FP32", "shape": [1, 16], "data": [[[[x] for x in range(16)]]]}
                            for n in ("INPUT0", "INPUT1")]}
    status, _, answer = http_call(server, "POST", "/v2/models/add_sub/infer", json.dumps(nested_data).encode())
    assert status == 200, answer  # nesting that the shape explains is fine


def _json_infer(value: bytes) -> bytes:
    return (b'{"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": [' + value + b', 0' * 15 +
            b']}, {"name": "INPUT1", "datatype": "FP32", "shape": [1, 16], "data": [' + b"0, " * 15 + b"0]}]}")


def test_json_is_standard_both_ways(server: RuntimeProcess) -> None:
    for literal, message in ((b"NaN", "NaN is not a JSON value"), (b"-Infinity", "-Infinity is not a JSON value"),
                             (b"1e400", "out of range for datatype FP32"), (b"1e300", "out of range for datatype FP32")):
        status, _, answer = http_call(server, "POST", "/v2/models/add_sub/infer", _json_infer(literal))
        assert status == 400, (literal, answer)
        assert message in error_of(answer), (literal, answer)
    nan = np.full((1, 16), np.nan, np.float32).tobytes()
    body, headers = binary_infer_body([("INPUT0", "FP32", [1, 16], nan), ("INPUT1", "FP32", [1, 16], nan)])
    status, _, answer = http_call(server, "POST", "/v2/models/add_sub/infer", body, headers)
    assert status == 400, answer
    assert "holds NaN or infinity, which JSON cannot carry" in error_of(answer)
    body, headers = binary_infer_body([("INPUT0", "FP32", [1, 16], nan), ("INPUT1", "FP32", [1, 16], nan)],
                                      [{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    status, reply_headers, answer = http_call(server, "POST", "/v2/models/add_sub/infer", body, headers)
    assert status == 200, answer
    head = int(reply_headers["inference-header-content-length"])
    json.loads(answer[:head], parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert np.isnan(np.frombuffer(answer[head:], np.float32)).all()


def test_grpc_refuses_duplicate_outputs_and_unregistered_shared_memory(server: RuntimeProcess) -> None:
    """Shared memory is served since issue 11: a region nobody registered is Triton's NOT_FOUND (its name
    clipped), a region without its byte size Triton's INVALID_ARGUMENT; nothing runs either way."""
    def request() -> service_pb2.ModelInferRequest:
        r = service_pb2.ModelInferRequest(model_name="add_sub")
        for name in ("INPUT0", "INPUT1"):
            r.inputs.add(name=name, datatype="FP32", shape=[1, 16])
            r.raw_input_contents.append(bytes(64))
        return r

    def in_shm(params: Any, region: str) -> None:
        params["shared_memory_region"].string_param = region
        params["shared_memory_byte_size"].int64_param = 64

    duplicate = request()
    duplicate.outputs.add(name="OUTPUT0")
    duplicate.outputs.add(name="OUTPUT0")
    code, details = grpc_error(server, "ModelInfer", duplicate)
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "output 'OUTPUT0' is requested more than once")
    shm_out = request()
    in_shm(shm_out.outputs.add(name="OUTPUT0").parameters, "region")
    code, details = grpc_error(server, "ModelInfer", shm_out)
    assert (code, details) == (grpc.StatusCode.NOT_FOUND, "Unable to find shared memory region: 'region'")
    shm_in = request()
    del shm_in.raw_input_contents[0]
    in_shm(shm_in.inputs[0].parameters, "r" * 10_000)
    code, details = grpc_error(server, "ModelInfer", shm_in)
    assert code == grpc.StatusCode.NOT_FOUND
    assert details == f"Unable to find shared memory region: '{'r' * 253}...'"
    no_size = request()
    no_size.outputs.add(name="OUTPUT0").parameters["shared_memory_region"].string_param = "region"
    code, details = grpc_error(server, "ModelInfer", no_size)
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "'shared_memory_byte_size' must be specified along "
                               "with 'shared_memory_region' parameter for tensor 'OUTPUT0'")
    still_serving(server)


def test_long_names_are_bounded_in_errors(server: RuntimeProcess) -> None:
    name = "m" * 10_000
    with server.grpc_client() as client:
        with pytest.raises(Exception) as info:
            client.get_model_metadata(name)
        assert "StatusCode.NOT_FOUND" in str(info.value), str(info.value)[:300]
        assert len(str(info.value)) < 1024
    request = service_pb2.ModelInferRequest(model_name=name)
    request.inputs.add(name="i" * 10_000, datatype="FP32", shape=[1])
    request.raw_input_contents.append(b"\x00")
    code, details = grpc_error(server, "ModelInfer", request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and len(details) < 1024 and "..." in details, details[:300]
    status, _, answer = http_call(server, "GET", f"/v2/models/{name[:5000]}")  # aiohttp takes 8 KiB lines
    assert status == 404 and len(answer) < 1024, answer[:300]
    still_serving(server)


@pytest.mark.parametrize("version", [" 1", "+1", "1 ", "0x1", "\u0661"])
def test_version_is_plain_decimal_digits(server: RuntimeProcess, version: str) -> None:
    request = service_pb2.ModelInferRequest(model_name="add_sub", model_version=version)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="FP32", shape=[1, 16])
        request.raw_input_contents.append(bytes(64))
    code, details = grpc_error(server, "ModelInfer", request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert details == (f"failed to get model version from specified version string '{version}', "
                       "version should be an integral value > 0")
    status, _, answer = http_call(server, "GET", f"/v2/models/add_sub/versions/{quote(version, safe='')}/config")
    assert status == 400, answer
    assert "failed to get model version from specified version string" in error_of(answer)
    with server.grpc_client() as client:
        assert client.get_model_metadata("add_sub", "1").name == "add_sub"


def test_bytes_that_are_no_protobuf_message_are_invalid_argument(server: RuntimeProcess) -> None:
    """A unary call and a stream frame that do not decode: INVALID_ARGUMENT with a message (was UNKNOWN
    "Unexpected DecodeError" and a traceback in the log per request); the server keeps serving."""
    garbage = b"\xff\xff\xff"
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
        unary = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as refused:
            unary(garbage, timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "ModelInfer request is not a valid protobuf message" in (refused.value.details() or "")
        stream = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        with pytest.raises(grpc.RpcError) as ended:
            list(stream(iter([garbage]), timeout=30))
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        health = channel.unary_unary("/grpc.health.v1.Health/Check")  # the health service is guarded as well
        with pytest.raises(grpc.RpcError) as refused:
            health(garbage, timeout=30)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "Check request is not a valid protobuf message" in (refused.value.details() or "")
    assert "DecodeError" not in server.log_path.read_text()
    still_serving(server)
