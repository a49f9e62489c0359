"""Triton's onnxruntime-backend thread parameters on a real runtime: a model that sets its pools and parallel
execution loads and answers; a count or mode that is not one is refused at load with a clear reason, and the
server goes on serving the others."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import onnx_models

from tests.integration.runtime.repo import ADD_SUB_CONFIG
from tests.support.runtime_process import RuntimeProcess


def _parameters(**values: str) -> str:
    return "".join(f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}\n' for k, v in values.items())


MODELS = {
    "pools": _parameters(intra_op_thread_count="2", inter_op_thread_count="2", execution_mode="1"),
    "defaults": _parameters(intra_op_thread_count="0", execution_mode=" 0 "),
    "bad_count": _parameters(intra_op_thread_count="many"),
    "huge_count": _parameters(inter_op_thread_count="9" * 40),
    "bad_mode": _parameters(execution_mode="2"),
}
REFUSED = {
    "bad_count": "parameter 'intra_op_thread_count' must be a whole number from 0 to 1024, got 'many'",
    "huge_count": "parameter 'inter_op_thread_count' must be a whole number from 0 to 1024",
    "bad_mode": "parameter 'execution_mode' must be 0 (sequential) or 1 (parallel), got '2'",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    root = tmp_path_factory.mktemp("ort-threads")
    model = onnx_models.add_sub().SerializeToString()
    for name, parameters in MODELS.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.onnx").write_bytes(model)
        (root / name / "config.pbtxt").write_text(ADD_SUB_CONFIG.replace('"add_sub"', f'"{name}"') + parameters)
    with RuntimeProcess([root], ["--strict-readiness=false"]) as proc:
        proc.wait_model_ready("pools")
        proc.wait_model_ready("defaults")
        yield proc


@pytest.mark.parametrize("name", ["pools", "defaults"])
def test_thread_parameters_load_and_answer(server: RuntimeProcess, name: str) -> None:
    a = np.arange(32, dtype=np.float32).reshape(2, 16)
    inputs = [grpcclient.InferInput(n, [2, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    for item in inputs:
        item.set_data_from_numpy(a)
    with server.grpc_client() as client:
        result = client.infer(name, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - a)


def test_a_count_or_mode_that_is_not_one_is_refused_at_load(server: RuntimeProcess) -> None:
    with server.grpc_client() as client:
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        for name, reason in REFUSED.items():
            assert index[name]["state"] == "UNAVAILABLE", index[name]
            assert reason in index[name]["reason"], index[name]
            assert not client.is_model_ready(name)
        assert client.is_model_ready("pools")  # the others serve on
