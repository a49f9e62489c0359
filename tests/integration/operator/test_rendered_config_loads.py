"""What the operator renders, a real runtime loads: a Model whose tensor and parameter names carry a non-BMP
character (an emoji), plus quotes, backslashes and a newline, served through its Ensemble over HTTP and gRPC
from the repository.json the operator writes (the runtime reads it exactly as in a pod)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from ensemble_operator.api.v1alpha1 import Ensemble, Model
from ensemble_operator.render.runtime_config import render_repository_config

from tests.support.runtime_process import RuntimeProcess

X, Y, NOTE = "x\U0001f600", 'y "\\ \U0001f680', "note\n\U0001f4dd"
PARAM_KEY, PARAM_VALUE = "greeting\U0001f44b", 'hello "world" \\ \U0001f30d\nbye'
IN, OUT, OUT_NOTE = "in \U0001f600", "out \U0001f680", "note \U0001f4dd"

MODEL_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.names = [t["name"] for t in config["input"]] + [t["name"] for t in config["output"]]
        self.param = config["parameters"][PARAM_KEY]["string_value"]

    def execute(self, requests):
        x, y, note = self.names
        out = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, x).as_numpy()
            text = np.array([self.param.encode("utf-8")], dtype=np.object_)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor(y, data * 2), pb_utils.Tensor(note, text)]))
        return out
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    root = tmp_path_factory.mktemp("rendered")
    source = root / "emoji"
    (source / "1").mkdir(parents=True)
    (source / "1" / "model.py").write_text(f"PARAM_KEY = {PARAM_KEY!r}\n{MODEL_PY}", encoding="utf-8")
    model = Model.model_validate(
        {
            "metadata": {"name": "emoji", "namespace": "ml"},
            "spec": {
                "source": str(source),
                "backend": "python",
                "maxBatchSize": 0,
                "inputs": [{"name": X, "dataType": "FP32", "dims": [3]}],
                "outputs": [
                    {"name": Y, "dataType": "FP32", "dims": [3]},
                    {"name": NOTE, "dataType": "BYTES", "dims": [1]},
                ],
                "parameters": {PARAM_KEY: PARAM_VALUE},
            },
        }
    )
    ensemble = Ensemble.model_validate(
        {
            "metadata": {"name": "pipeline", "namespace": "ml"},
            "spec": {
                "inputs": [{"name": IN, "dataType": "FP32", "dims": [3]}],
                "outputs": [
                    {"name": OUT, "dataType": "FP32", "dims": [3]},
                    {"name": OUT_NOTE, "dataType": "BYTES", "dims": [1]},
                ],
                "steps": [
                    {
                        "name": "only",
                        "modelRef": {"name": "emoji"},
                        "inputMap": {X: IN},
                        "outputMap": {Y: OUT, NOTE: OUT_NOTE},
                    }
                ],
            },
        }
    )
    config: Path = root / "repository.json"
    config.write_text(render_repository_config(ensemble, {"emoji": model}).to_json(), encoding="utf-8")
    args = [f"--repository-config={config}", "--model-control-mode=poll", f"--model-cache-dir={root / 'cache'}"]
    with RuntimeProcess([], args) as proc:
        proc.wait_model_ready("pipeline", timeout=90)
        yield proc


def test_the_model_loads_with_its_names_intact(server: RuntimeProcess) -> None:
    with server.http_client() as client:
        config = client.get_model_config("emoji")
    assert [t["name"] for t in config["input"]] == [X]
    assert [t["name"] for t in config["output"]] == [Y, NOTE]
    assert config["parameters"] == {PARAM_KEY: {"string_value": PARAM_VALUE}}


def test_the_ensemble_answers_over_http_and_grpc(server: RuntimeProcess) -> None:
    data = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    http_in = httpclient.InferInput(IN, [3], "FP32")
    http_in.set_data_from_numpy(data)
    with server.http_client() as client:
        result = client.infer("pipeline", [http_in])
        np.testing.assert_array_equal(result.as_numpy(OUT), data * 2)
        assert result.as_numpy(OUT_NOTE)[0].decode() == PARAM_VALUE
        assert client.is_server_ready()
    grpc_in = grpcclient.InferInput(IN, [3], "FP32")
    grpc_in.set_data_from_numpy(data)
    with server.grpc_client() as grpc:
        answer = grpc.infer("pipeline", [grpc_in])
        np.testing.assert_array_equal(answer.as_numpy(OUT), data * 2)
        assert answer.as_numpy(OUT_NOTE)[0].decode() == PARAM_VALUE
        assert json.loads(json.dumps(grpc.get_model_metadata("emoji", as_json=True)))["inputs"][0]["name"] == X
