"""New versions through the load API on a local repository: warm-up failures and the memory budget."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples import onnx_models
from onnx import TensorProto, helper
from tritonclient.utils import InferenceServerException

from tests.support.runtime_process import RuntimeProcess

CONFIG = 'platform: "onnxruntime_onnx" max_batch_size: 8\n'


def fails_at_run() -> onnx.ModelProto:
    """Loads fine, fails on every request: reshapes [batch, 4] to a fixed [5]."""
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["X", "shape"], ["Y"]),
            helper.make_node("Slice", ["X", "zero", "one", "one"], ["first"]),
            helper.make_node("Cast", ["first"], ["version"], to=TensorProto.INT32),
        ],
        "fails_at_run",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("version", TensorProto.INT32, ["batch", 1]),
        ],
        [
            helper.make_tensor("shape", TensorProto.INT64, [1], [5]),
            helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
            helper.make_tensor("one", TensorProto.INT64, [1], [1]),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def version_of(client: grpcclient.InferenceServerClient) -> int:
    item = grpcclient.InferInput("X", [1, 4], "FP32")
    item.set_data_from_numpy(np.zeros((1, 4), np.float32))
    return int(client.infer("m", [item]).as_numpy("version")[0, 0])


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.pbtxt").write_text(CONFIG)
    onnx_models.save(onnx_models.versioned(1), tmp_path / "m" / "1" / "model.onnx")
    return tmp_path


def test_version_failing_warmup_never_takes_traffic(repo: Path) -> None:
    with RuntimeProcess([repo], ["--model-control-mode=explicit", "--load-model=m"]) as proc:
        proc.wait_model_ready("m")
        with proc.grpc_client() as client:
            assert version_of(client) == 1
            onnx_models.save(fails_at_run(), repo / "m" / "2" / "model.onnx")
            with pytest.raises(InferenceServerException, match="warm-up request 'warmup:synthesized' failed"):
                client.load_model("m")
            assert version_of(client) == 1  # the old version keeps serving
            index = {(e["name"], e.get("version", "")): e for e in client.get_model_repository_index(as_json=True)["models"]}
            assert index[("m", "2")]["state"] == "UNAVAILABLE"
            assert "warm-up" in index[("m", "2")]["reason"]
            assert index[("m", "1")]["state"] == "READY"
            # a corrected upload recovers without a restart
            shutil.rmtree(repo / "m" / "2")
            onnx_models.save(onnx_models.versioned(2), repo / "m" / "2" / "model.onnx")
            client.load_model("m")
            assert version_of(client) == 2


def test_memory_budget_refuses_and_old_keeps_serving(repo: Path) -> None:
    size = (repo / "m" / "1" / "model.onnx").stat().st_size
    budget = int(size * 2 * 1.5)  # room for one version at factor 2, not two
    with RuntimeProcess([repo], ["--model-control-mode=explicit", "--load-model=m",
                                 f"--memory-budget-bytes={budget}", "--memory-factor=2"]) as proc:
        proc.wait_model_ready("m")
        with proc.grpc_client() as client:
            onnx_models.save(onnx_models.versioned(2), repo / "m" / "2" / "model.onnx")
            with pytest.raises(InferenceServerException, match="memory budget: needs"):
                client.load_model("m")
            assert version_of(client) == 1


def test_memory_budget_drain_then_swap(repo: Path) -> None:
    size = (repo / "m" / "1" / "model.onnx").stat().st_size
    budget = int(size * 2 * 1.5)
    with RuntimeProcess([repo], ["--model-control-mode=explicit", "--load-model=m", f"--memory-budget-bytes={budget}",
                                 "--memory-factor=2", "--memory-policy=drain-then-swap"]) as proc:
        proc.wait_model_ready("m")
        with proc.grpc_client() as client:
            onnx_models.save(onnx_models.versioned(2), repo / "m" / "2" / "model.onnx")
            client.load_model("m")
            assert version_of(client) == 2
        assert "draining the old version(s) first" in proc.log_text()
