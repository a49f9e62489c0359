"""`OnnxInstance.execute_one`, the scheduler's per-request path on the loop, gives each request what
`execute_inline([request])[0]` gives it: the same outputs, the same refusal of a STRING input that is not UTF-8,
the same error where ONNX Runtime refuses the feed. A real session over a small model (numeric and STRING
identities)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from ensemble_runtime.backends.onnxruntime_backend import OnnxInstance
from ensemble_runtime.inference import BackendRequest, BackendResult
from onnx import TensorProto, helper


def _session(with_text: bool) -> ort.InferenceSession:
    names = {"num": TensorProto.FLOAT, **({"text": TensorProto.STRING} if with_text else {})}
    inputs = [helper.make_tensor_value_info(f"{n}_in", t, [2]) for n, t in names.items()]
    outputs = [helper.make_tensor_value_info(f"{n}_out", t, [2]) for n, t in names.items()]
    nodes = [helper.make_node("Identity", [f"{n}_in"], [f"{n}_out"]) for n in names]
    model = helper.make_model(
        helper.make_graph(nodes, "one", inputs, outputs), opset_imports=[helper.make_opsetid("", 17)], ir_version=9
    )
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _same(one: BackendResult, listed: BackendResult) -> None:
    if isinstance(listed, BaseException):
        assert type(one) is type(listed) and str(one) == str(listed)
        return
    assert isinstance(one, dict) and one.keys() == listed.keys()
    for name, array in listed.items():
        assert one[name].dtype == array.dtype and one[name].tolist() == array.tolist()


TEXT_CASES: list[tuple[str, dict[str, Any]]] = [
    ("both fine", {"text_in": np.array([b"a", "b\u00e9".encode()], dtype=object)}),
    ("not UTF-8", {"text_in": np.array([b"ok", b"\xff\xfe"], dtype=object)}),
    ("wrong shape", {"text_in": np.array([b"a", b"b", b"c"], dtype=object)}),
]


@pytest.mark.parametrize(("case", "text"), TEXT_CASES, ids=[c for c, _ in TEXT_CASES])
def test_one_request_gets_what_the_listed_path_gives_it(case: str, text: dict[str, Any]) -> None:
    with ThreadPoolExecutor(1) as pool:
        instance = OnnxInstance(_session(True), pool, "one", batched=False)
        request = BackendRequest({"num_in": np.array([1.5, -2.0], np.float32), **text}, ("num_out", "text_out"))
        one, listed = instance.execute_one(request), instance.execute_inline([request])[0]
    _same(one, listed)
    assert isinstance(one, BaseException) == (case != "both fine")
    if case == "not UTF-8":
        assert "input 'text_in' element 1 is not UTF-8 text" in str(one)


@pytest.mark.parametrize("array", [np.array([1.0, 2.0], np.float32), np.array([1, 2], np.int64)], ids=["fp32", "int64"])
def test_a_numeric_model_runs_one_request_as_the_listed_path_does(array: Any) -> None:
    """A model with no STRING input skips the UTF-8 check; a feed ONNX Runtime refuses is the request's error."""
    with ThreadPoolExecutor(1) as pool:
        instance = OnnxInstance(_session(False), pool, "one", batched=False)
        request = BackendRequest({"num_in": array}, ("num_out",))
        one, listed = instance.execute_one(request), instance.execute_inline([request])[0]
    _same(one, listed)
    assert isinstance(one, BaseException) == (array.dtype != np.float32)
