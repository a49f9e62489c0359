"""KServe v2 JSON tensors (`data` arrays) through the native HTTP core, against a real runtime process: numbers,
booleans and strings are read by the core (`http_infer`, `json_tensors`) and an answer's JSON `data` of numbers
and booleans written by it, byte for byte as the aiohttp front end (Python's codec) answers the same bytes from a
second process; a large JSON tensor is read on a blocking thread of the core while other requests are answered;
what the core leaves to Python (BYTES answers, bad values) is answered by Python with its messages."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.runtime import repo
from tests.support.runtime_process import RuntimeProcess

JSON_LIMIT = 16 * 1024 * 1024
Answer = tuple[int, dict[str, str], bytes]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RuntimeProcess]]:
    root = repo.build(tmp_path_factory.mktemp("repo"))
    repo.echo_model(root)
    repo.generate_models(root)
    args = ["--strict-readiness=false", f"--http-max-json-bytes={JSON_LIMIT}", f"--http-max-body-bytes={JSON_LIMIT}"]
    native = RuntimeProcess([root], ["--http-frontend=native", *args]).start()
    aiohttp = RuntimeProcess([root], ["--http-frontend=aiohttp", *args]).start()
    try:
        for proc in (native, aiohttp):
            proc.wait_ready()
            for model in ("echo", "numbers", "types"):
                proc.wait_model_ready(model)
        yield {"native": native, "aiohttp": aiohttp}
    finally:
        native.stop()
        aiohttp.stop()


def _call(proc: RuntimeProcess, path: str, body: bytes) -> Answer:
    host, port = proc.http_url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _same(servers: dict[str, RuntimeProcess], model: str, header: Mapping[str, object]) -> Answer:
    """Both front ends' answers to one all-JSON body, which must agree byte for byte."""
    body = json.dumps(header).encode()
    native = _call(servers["native"], f"/v2/models/{model}/infer", body)
    aiohttp = _call(servers["aiohttp"], f"/v2/models/{model}/infer", body)
    assert (native[0], native[1].get("content-type"), native[2]) == (aiohttp[0], aiohttp[1].get("content-type"),
                                                                        aiohttp[2])
    assert "server" not in native[1]  # answered by the core: the app's answers name the product in one
    return native


def test_numbers_and_booleans_both_ways_as_aiohttp_answers(servers: dict[str, RuntimeProcess]) -> None:
    x = [[0.1, -2.5, 3e-40, 16777217, 1e30], [0.0, -0.0, 7, 5e-7, 123456.789]]  # FP32 rounds each of them
    header: dict[str, object] = {"id": "j1", "parameters": {"p": 1},
              "inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 5], "data": x},
                         {"name": "k", "datatype": "INT32", "shape": [2, 1], "data": [[-(2**31)], [2**31 - 1]]},
                         {"name": "flag", "datatype": "BOOL", "shape": [2, 1], "data": [True, [False]]}],
              "outputs": [{"name": "y"}, {"name": "n", "parameters": {"binary_data": False}},
                          {"name": "described"}]}
    status, headers, body = _same(servers, "numbers", header)
    assert status == 200, body
    answer = json.loads(body)
    outputs = {o["name"]: o for o in answer["outputs"]}
    np.testing.assert_array_equal(np.array(outputs["y"]["data"], np.float32),
                                  (np.array(x, np.float32) * 2).reshape(-1))
    assert outputs["n"]["data"] == [10, 10]
    described = "x [2, 5] float32, k [2, 1] int32 [-2147483648, 2147483647], flag [2, 1] bool [True, False]"
    assert outputs["described"]["data"] == [described, described]
    # without the BYTES output every answer is the core's own writing
    header["outputs"] = [{"name": "y", "parameters": {"binary_data": True}}, {"name": "n"}]
    status, headers, body = _same(servers, "numbers", header)
    length = int(headers["inference-header-content-length"])
    assert json.loads(body[:length])["outputs"][1]["data"] == [10, 10]
    np.testing.assert_array_equal(np.frombuffer(body[length:], np.float32), (np.array(x, np.float32) * 2).reshape(-1))


def test_every_datatype_and_every_refusal_is_answered_alike(servers: dict[str, RuntimeProcess]) -> None:
    """FP16, INT8, BOOL and BYTES as JSON both ways (the BYTES answer encoded by Python), and values Python
    refuses, each answered with Python's own message."""
    types = {"inputs": [{"name": "fp16_in", "datatype": "FP16", "shape": [1, 2], "data": [1.5, -2]},
                        {"name": "int8_in", "datatype": "INT8", "shape": [1, 2], "data": [-3, 4]},
                        {"name": "flag_in", "datatype": "BOOL", "shape": [1, 2], "data": [True, False]},
                        {"name": "text_in", "datatype": "BYTES", "shape": [1, 2], "data": ["ab", "é"]}]}
    status, _, body = _same(servers, "types", types)
    assert status == 200, body
    assert [o["data"] for o in json.loads(body)["outputs"]] == [[1.5, -2.0], [-3, 4], [True, False], ["ab", "é"]]
    for data, datatype in ([1.5, 2], "INT32"), ([1e39, 0], "FP32"), ([1, "2"], "FP32"), ([1, 2, 3], "FP32"):
        refused = {"inputs": [{"name": "x", "datatype": datatype, "shape": [2], "data": data}]}
        status, _, body = _same(servers, "echo", refused)
        assert status == 400 and json.loads(body)["error"], (data, body)


def test_a_large_json_tensor_is_read_while_others_are_answered(servers: dict[str, RuntimeProcess]) -> None:
    """A JSON tensor of 300,000 floats (a header of about 6 MB, read on one of the core's blocking threads)
    comes back exactly, and small requests sent meanwhile are answered."""
    native = servers["native"]
    rng = np.random.default_rng(7)
    large = rng.standard_normal(300_000).astype(np.float32)
    answered: list[np.ndarray] = []

    def send_large() -> None:
        client = httpclient.InferenceServerClient(native.http_url.removeprefix("http://"), network_timeout=120)
        tensor = httpclient.InferInput("x", [large.size], "FP32")
        tensor.set_data_from_numpy(large, binary_data=False)
        result = client.infer("echo", [tensor], outputs=[httpclient.InferRequestedOutput("y", binary_data=False)])
        answered.append(result.as_numpy("y"))

    sender = threading.Thread(target=send_large)
    sender.start()
    client = httpclient.InferenceServerClient(native.http_url.removeprefix("http://"))
    for i in range(20):
        small = np.array([i, -i], np.float32)
        tensor = httpclient.InferInput("x", [2], "FP32")
        tensor.set_data_from_numpy(small, binary_data=False)
        result = client.infer("echo", [tensor], outputs=[httpclient.InferRequestedOutput("y", binary_data=False)])
        np.testing.assert_array_equal(result.as_numpy("y"), small)
    sender.join(timeout=180)
    assert not sender.is_alive() and len(answered) == 1
    np.testing.assert_array_equal(answered[0], large)


def test_the_header_of_a_json_tensor_is_checked_as_python_checks_it(servers: dict[str, RuntimeProcess]) -> None:
    """Deep nesting, a ragged array, a shape that does not fit: the same answers from both front ends."""
    deep: object = [1.0]
    for _ in range(200):
        deep = [deep]
    cases = [
        ({"name": "x", "datatype": "FP32", "shape": [1], "data": deep}, 200),  # past serde's depth: Python's
        ({"name": "x", "datatype": "FP32", "shape": [3], "data": [[1], 2, [[3]]]}, 200),
        ({"name": "x", "datatype": "FP32", "shape": [10**12], "data": [1, 2]}, 400),
        ({"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2], "parameters": {"binary_data_size": 8}}, 400),
    ]
    for tensor, expected in cases:
        status, _, body = _same(servers, "echo", {"inputs": [tensor]})
        assert status == expected, (tensor, body)


def test_hostile_json_values_are_answered_and_the_server_keeps_serving(servers: dict[str, RuntimeProcess]) -> None:
    """Numbers of thousands of digits, a lone surrogate, a million values for a shape of two, values nested past
    any parser's depth in a ragged array: each answered as aiohttp answers it, and the port serves on."""
    deep = "[" * 5000 + "1" + "]" * 5000
    bodies = [
        ('{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[' + "9" * 5000 + "]}]}", 400),
        ('{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[0.' + "1" * 100_000 + "]}]}", 200),
        ('{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1e' + "9" * 400 + "]}]}", 400),
        ('{"inputs":[{"name":"x","datatype":"BYTES","shape":[1],"data":["\\ud800"]}]}', 400),
        ('{"inputs":[{"name":"x","datatype":"FP32","shape":[2],"data":[' + ",".join(["0"] * 1_000_000) + "]}]}", 400),
        ('{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1,' + deep + "]}]}", 400),
    ]
    for text, expected in bodies:
        native = _call(servers["native"], "/v2/models/echo/infer", text.encode())
        aiohttp = _call(servers["aiohttp"], "/v2/models/echo/infer", text.encode())
        assert (native[0], native[2]) == (aiohttp[0], aiohttp[2]), text[:80]
        assert native[0] == expected, (text[:80], native[2][:200])
    status, _, body = _same(servers, "echo", {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [2]}]})
    assert status == 200 and json.loads(body)["outputs"][0]["data"] == [2.0]


def _core_threads(pid: int) -> int:
    """The HTTP core's threads: its runtime's own and the blocking ones beside it (one name for both; a core the
    loop drives has only the latter, under tokio's name)."""
    names = [(task / "comm").read_text().strip() for task in Path(f"/proc/{pid}/task").iterdir()]
    return sum(1 for name in names if name == "http-core" or name.startswith("tokio-runtime"))


def test_a_burst_of_large_json_headers_takes_a_bounded_number_of_threads(servers: dict[str, RuntimeProcess]) -> None:
    """24 JSON tensors of 20,000 values at once, each header read on a blocking thread of the core: at most 4 such
    threads (they stay a while after their work, so counting after the burst sees every one started), and every
    request answered."""
    native = servers["native"]
    values = np.random.default_rng(5).random(20_000).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [values.size],
                                   "data": values.tolist()}]}).encode()
    before = _core_threads(native.pid)
    answers: list[int] = []

    def send() -> None:
        answers.append(_call(native, "/v2/models/echo/infer", body)[0])

    senders = [threading.Thread(target=send) for _ in range(24)]
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(timeout=300)
    assert answers == [200] * 24
    assert _core_threads(native.pid) <= before + 4


def test_an_empty_output_as_binary_data_is_still_a_binary_answer(servers: dict[str, RuntimeProcess]) -> None:
    """An output of no elements asked for as binary data: a binary answer (its header's length given, no bytes
    after it), as Python writes it, not a JSON one."""
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [0], "data": []}],
                       "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    native = _call(servers["native"], "/v2/models/echo/infer", body)
    aiohttp = _call(servers["aiohttp"], "/v2/models/echo/infer", body)
    keys = ("content-type", "inference-header-content-length")
    assert (native[0], [native[1].get(k) for k in keys], native[2]) == (
        aiohttp[0], [aiohttp[1].get(k) for k in keys], aiohttp[2])
    assert native[0] == 200 and native[1]["inference-header-content-length"] == str(len(native[2]))
