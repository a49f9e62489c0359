"""Triton's logging extension on a real runtime: `GET/POST /v2/logging` and gRPC `LogSettings` (tritonclient's
`get_log_settings` / `update_log_settings`), over the native front ends. What a setting does is read from the
server's own log: a python model writes one line of each severity through `pb_utils.Logger` per request, tagged
with the request's id. Refusals are 400 / INVALID_ARGUMENT naming the setting (tritonserver 2.51 answers wrong
types with a 500, a wrong format with a 503), `log_file` is refused as tritonserver refuses it, an update with one
wrong value changes nothing, and the server serves on. Where tritonserver is installed, the same requests go to it
too and the answers are compared (`test_matches_triton`)."""

from __future__ import annotations

import http.client
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.utils import InferenceServerException

from bench.triton_peer import not_installed_reason
from tests.support.runtime_process import RuntimeProcess
from tests.support.server_process import ServerProcess

WAIT = 60.0  # seconds: a loaded 2-core machine
TRITON_MISSING = not_installed_reason()
DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True, "log_verbose_level": 0,
            "log_format": "default"}
CONFIG = """
name: "logger"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""
MODEL = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            tag = request.request_id()
            pb_utils.Logger.log_verbose(f"verbose-line {tag}")
            pb_utils.Logger.log_info(f"info-line {tag}")
            pb_utils.Logger.log_warn(f"warning-line {tag}")
            pb_utils.Logger.log_error(f"error-line {tag}")
            x = pb_utils.get_input_tensor_by_name(request, "X")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.as_numpy())]))
        return responses
'''


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("logging")
    (root / "logger" / "1").mkdir(parents=True)
    (root / "logger" / "config.pbtxt").write_text(CONFIG)
    (root / "logger" / "1" / "model.py").write_text(MODEL)
    return root


@pytest.fixture
def server(root: Path) -> Iterator[RuntimeProcess]:
    """A runtime of its own per test: the settings are the process's."""
    with RuntimeProcess([root]) as proc:
        proc.wait_model_ready("logger", WAIT)
        yield proc


def _post(server: ServerProcess, body: object, raw: bytes | None = None,
          method: str = "POST") -> tuple[int, str, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=WAIT)
    try:
        payload = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        connection.request(method, "/v2/logging", body=payload)
        answer = connection.getresponse()
        return answer.status, answer.getheader("Content-Type", ""), answer.read()
    finally:
        connection.close()


def _lines(server: RuntimeProcess, tag: str) -> dict[str, str]:
    """Request `tag` answered, then the lines the model wrote for it, by kind, once its error line is in the log
    (the model writes it last: the lines before it are there too, or were not written)."""
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        x = grpcclient.InferInput("X", [1], "FP32")
        x.set_data_from_numpy(np.ones(1, np.float32))
        client.infer("logger", [x], request_id=tag)
    deadline = time.monotonic() + WAIT
    while True:
        found = {kind: line for line in server.log_text().splitlines()
                 for kind in ("verbose", "info", "warning", "error") if line.endswith(f"{kind}-line {tag}")}
        if "error" in found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_each_setting_changes_what_the_server_writes(server: RuntimeProcess) -> None:
    assert set(_lines(server, "t1")) == {"info", "warning", "error"}  # verbose is off by default
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert client.get_log_settings(as_json=True)["settings"]["log_verbose_level"] == {"uint32_param": 0}
        updated = client.update_log_settings({"log_verbose_level": 1}, as_json=True)["settings"]
        assert updated["log_verbose_level"] == {"uint32_param": 1} and updated["log_info"] == {"bool_param": True}
    assert set(_lines(server, "t2")) == {"verbose", "info", "warning", "error"}
    with httpclient.InferenceServerClient(server.http_url) as client:
        settings = client.update_log_settings({"log_info": False, "log_warning": False})
        assert settings == {**DEFAULTS, "log_verbose_level": 1, "log_info": False, "log_warning": False}
    assert set(_lines(server, "t3")) == {"verbose", "error"}
    status, _, _ = _post(server, {"log_format": "ISO8601", "log_verbose_level": 0})
    assert status == 200
    lines = _lines(server, "t4")
    assert set(lines) == {"error"}
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ERROR ", lines["error"]), lines["error"]
    status, _, raw = _post(server, None, method="GET")
    assert status == 200
    assert json.loads(raw) == {**DEFAULTS, "log_info": False, "log_warning": False, "log_format": "ISO8601"}


@pytest.mark.parametrize(("body", "message"), [
    ({"log_info": "yes"}, "expect boolean for 'log_info'"),
    ({"log_error": 1}, "expect boolean for 'log_error'"),
    ({"log_verbose_level": -1}, "expect an unsigned 32-bit integer for 'log_verbose_level'"),
    ({"log_verbose_level": 1.5}, "expect an unsigned 32-bit integer for 'log_verbose_level'"),
    ({"log_verbose_level": 2**32}, "expect an unsigned 32-bit integer for 'log_verbose_level'"),
    ({"log_verbose_level": True}, "expect an unsigned 32-bit integer for 'log_verbose_level'"),
    ({"log_format": "bogus"}, "invalid argument for log_format, got: bogus"),
    ({"log_info": False, "log_format": 3}, "invalid argument for log_format, got: 3"),
    ([1], "the log settings request must be a JSON object, got list"),
])
def test_wrong_values_are_refused_and_change_nothing(server: RuntimeProcess, body: object, message: str) -> None:
    status, content_type, raw = _post(server, body)
    assert (status, content_type) == (400, "application/json"), raw
    assert message in json.loads(raw)["error"]
    assert _post(server, None, method="GET")[2] == json.dumps(DEFAULTS, separators=(",", ":")).encode()
    assert set(_lines(server, "after")) == {"info", "warning", "error"}  # served on, as before


def test_the_log_file_cannot_be_set_over_the_network(server: RuntimeProcess, tmp_path: Path) -> None:
    target = tmp_path / "chosen.log"
    status, _, raw = _post(server, {"log_file": str(target), "log_verbose_level": 1})
    assert status == 501 and "log file location can not be updated" in json.loads(raw)["error"]
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.update_log_settings({"log_file": str(target)})
        assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
        assert client.get_log_settings(as_json=True)["settings"]["log_verbose_level"] == {"uint32_param": 0}
    assert not target.exists()


def test_grpc_refuses_a_setting_without_a_value_or_of_the_wrong_kind(server: RuntimeProcess) -> None:
    """As tritonserver's gRPC endpoint: a setting sent without a value is refused (HTTP passes nulls over)."""
    for name, kind, message in [("log_info", None, "expect boolean for 'log_info'"),
                                ("log_info", "uint32_param", "expect boolean for 'log_info'"),
                                ("log_verbose_level", "bool_param", "unsigned 32-bit integer")]:
        request = pb.LogSettingsRequest()
        setting = request.settings[name]
        if kind == "uint32_param":
            setting.uint32_param = 3
        elif kind == "bool_param":
            setting.bool_param = True
        with grpcclient.InferenceServerClient(server.grpc_url) as client, pytest.raises(grpc.RpcError) as refused:
            client._client_stub.LogSettings(request)
        assert refused.value.code().name == "INVALID_ARGUMENT" and message in refused.value.details()
    assert _post(server, {"log_info": None})[0] == 200


def test_restricted_like_the_other_categories(root: Path) -> None:
    args = ["--http-restricted-api=logging:admin-key=s3cret", "--grpc-restricted-protocol=logging:admin-key=s3cret"]
    with RuntimeProcess([root], args) as proc:
        status, _, _ = _post(proc, {"log_verbose_level": 1})
        assert status == 403
        with grpcclient.InferenceServerClient(proc.grpc_url) as client:
            with pytest.raises(InferenceServerException) as refused:
                client.update_log_settings({"log_verbose_level": 1})
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
            allowed = client.get_log_settings(headers={"triton-grpc-protocol-admin-key": "s3cret"}, as_json=True)
            assert allowed["settings"]["log_verbose_level"] == {"uint32_param": 0}


# ---- side by side with tritonserver ------------------------------------------------------------------------

SAME: list[tuple[str, object]] = [
    ("GET", None),
    ("POST", {"log_verbose_level": 1}),
    ("POST", {"log_info": False, "log_warning": False, "log_error": True}),
    ("POST", {"log_format": "ISO8601"}),
    ("POST", {"unknown_setting": 1, "log_verbose_level": None}),
    ("POST", {}),
    ("POST", {"log_file": ""}),
    ("POST", {"log_verbose_level": 0, "log_info": True, "log_warning": True, "log_format": "default"}),
    ("GET", None),
]


@pytest.mark.triton
def test_matches_triton(root: Path, tmp_path: Path) -> None:
    if TRITON_MISSING is not None:
        pytest.skip(TRITON_MISSING)
    from bench.triton_peer import TritonPeer

    empty = tmp_path / "empty"
    empty.mkdir()
    with RuntimeProcess([empty]) as ours, TritonPeer([empty]) as theirs:
        ours.wait_ready(WAIT)
        theirs.wait_ready(WAIT)
        for method, body in SAME:
            mine, peer = _post(ours, body, method=method), _post(theirs, body, method=method)
            assert mine[0] == peer[0], (method, body, mine, peer)
            assert json.loads(mine[2]) == json.loads(peer[2]), (method, body, mine, peer)
        with ours.grpc_client() as mine_client, theirs.grpc_client() as peer_client:
            update = {"log_verbose_level": 2, "log_format": "ISO8601"}
            assert mine_client.update_log_settings(update, as_json=True) == peer_client.update_log_settings(
                update, as_json=True)
