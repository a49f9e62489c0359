"""Defects the properties found that issue 10 does not list (reported to the lead; not marked, so they fail).

Each is a minimal reproducer against a real runtime: the expected answer is a clear client error.
"""

from __future__ import annotations

import json

import grpc
import pytest
from ensemble_runtime.config import model_config as mcfg
from ensemble_runtime.validation import ModelSignature
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2 as pb

from tests.property import bad_configs, wire
from tests.property.good import assert_grpc_serves, assert_http_serves
from tests.property.invariant import MemoryWatch, assert_refused
from tests.support.runtime_process import RuntimeProcess

ZERO_BUT_HUGE = [0, 2**62]  # no elements, but numpy cannot represent the shape
TOO_MANY_DIMS = [1] * 65  # numpy arrays have at most 64 dimensions


def _grpc(shape: list[int], raw: bytes | None, datatype: str = "FP32", name: str = "INPUT0") -> bytes:
    request = pb.ModelInferRequest(model_name="add_sub")
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    if raw is not None:
        request.raw_input_contents.append(raw)
    return bytes(request.SerializeToString())


GRPC_CASES = {
    "raw, zero elements, huge dim": _grpc(ZERO_BUT_HUGE, b""),
    "typed, zero elements, huge dim": _grpc(ZERO_BUT_HUGE, None),
    "BYTES raw, zero elements, huge dim": _grpc(ZERO_BUT_HUGE, b"", "BYTES"),
    "raw, 65 dims": _grpc(TOO_MANY_DIMS, b"\0\0\0\0"),
    "non-UTF-8 BYTES for an ONNX STRING input": b"",  # built below: the `types` model
}


def _types_request(text: list[bytes]) -> bytes:
    request = pb.ModelInferRequest(model_name="types")
    for name, datatype, raw in (("fp16_in", "FP16", b"\0" * 4), ("int8_in", "INT8", b"\0" * 2),
                                ("flag_in", "BOOL", b"\0" * 2)):
        request.inputs.add(name=name, datatype=datatype, shape=[1, 2])
        request.raw_input_contents.append(raw)
    request.inputs.add(name="text_in", datatype="BYTES", shape=[1, 2])
    request.raw_input_contents.append(b"".join(len(t).to_bytes(4, "little") + t for t in text))
    return bytes(request.SerializeToString())


GRPC_CASES["non-UTF-8 BYTES for an ONNX STRING input"] = _types_request([b"\xff", b"ok"])


@pytest.mark.parametrize("case", sorted(GRPC_CASES))
def test_grpc_finding(channel: grpc.Channel, case: str) -> None:
    answer = wire.grpc_call(channel, GRPC_CASES[case])
    if case.startswith("non-UTF-8"):  # Triton passes arbitrary bytes to ONNX Runtime; identity gives them back
        assert answer.code == "OK" or answer.code == "INVALID_ARGUMENT", f"{answer.code}: {answer.message}"
    else:
        assert_refused(answer)
    assert_grpc_serves(channel)


@given(data=st.binary(min_size=1, max_size=512))
def test_unparseable_messages_are_invalid_argument(channel: grpc.Channel, memory: MemoryWatch, data: bytes) -> None:
    """Was (fixed in issue 10): UNKNOWN "Unexpected <class 'DecodeError'>" and an ERROR traceback in the log per request."""
    try:
        pb.ModelInferRequest.FromString(data)
        return  # parseable: covered by test_grpc_infer
    except Exception:
        pass
    assert_refused(wire.grpc_call(channel, data))
    assert_grpc_serves(channel)
    memory.check()


def _http(item: dict[str, object], binary: bytes | None = None) -> tuple[bytes, dict[str, str]]:
    head = json.dumps({"inputs": [item]}).encode()
    if binary is None:
        return head, {}
    return head + binary, {"Inference-Header-Content-Length": str(len(head))}


HTTP_CASES = {
    "JSON, zero elements, huge dim": _http({"name": "INPUT0", "datatype": "FP32", "shape": ZERO_BUT_HUGE, "data": []}),
    "JSON BYTES, zero elements, huge dim": _http({"name": "INPUT0", "datatype": "BYTES", "shape": ZERO_BUT_HUGE, "data": []}),
    "binary, zero elements, huge dim": _http(
        {"name": "INPUT0", "datatype": "FP32", "shape": ZERO_BUT_HUGE, "parameters": {"binary_data_size": 0}}, b""),
    "JSON, 65 dims": _http({"name": "INPUT0", "datatype": "FP32", "shape": TOO_MANY_DIMS, "data": [1.0]}),
}


@pytest.mark.parametrize("case", sorted(HTTP_CASES))
def test_http_finding(server: RuntimeProcess, case: str) -> None:
    body, headers = HTTP_CASES[case]
    answer = wire.http_answer(*wire.http_post(server.http_port, wire.infer_path("add_sub"), body, headers))
    assert_refused(answer)
    assert_http_serves(server.http_port)


# ---- config.pbtxt ------------------------------------------------------------------------------------------

NOT_UTF8 = {"not_utf8": b'platform: "onnxruntime_onnx" name: "\xff\xfe"'}


def test_non_utf8_config_leaves_only_that_model_unavailable(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Was (fixed in issue 10): UnicodeDecodeError out of model_manager._peek_config ends the server at startup (rc 1)."""
    root = bad_configs.build(tmp_path_factory.mktemp("not-utf8"), NOT_UTF8)
    server = RuntimeProcess([root], ["--strict-readiness=false"])
    try:  # not `with`: a start that fails would leave the log file open (and a ResourceWarning in a later test)
        server.start()
        server.wait_model_ready("add_sub")
        bad_configs.assert_unavailable_and_serving(server, NOT_UTF8)
    finally:
        server.stop()


UNKNOWN_ENUM = 'name: "m" backend: "python" input [ { name: "x" data_type: 99 dims: [1] } ] ' \
               'output [ { name: "y" data_type: TYPE_FP32 dims: [1] } ]'


def test_unknown_data_type_number_is_a_config_error() -> None:
    """Was (fixed in issue 10): parse and check_config accept `data_type: 99`; ModelSignature.from_config then raises ValueError."""
    try:
        config = mcfg.apply_defaults(mcfg.parse_config_text(UNKNOWN_ENUM), "m")
        mcfg.check_config(config, "m")
    except mcfg.ConfigError:
        return
    ModelSignature.from_config(config)
    raise AssertionError("data_type 99 was accepted")
