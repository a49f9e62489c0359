from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.memory import MemoryBudget, describe
from ensemble_runtime.warmup import warmup_requests
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_synthesized_request_for_onnx(tmp_path: Path) -> None:
    c = config('name: "m" backend: "onnxruntime" max_batch_size: 4 '
               'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3 ] }, { name: "t" data_type: TYPE_STRING dims: [ 1 ] } ] '
               'output [ { name: "y" data_type: TYPE_FP32 dims: [ 3 ] } ]')
    [request] = warmup_requests(c, tmp_path)
    assert request.inputs["x"].shape == (1, 1, 3) and request.inputs["x"].dtype == np.float32
    assert request.inputs["t"].dtype == np.object_
    assert request.requested_outputs == ("y",)


def test_python_models_only_warm_up_when_configured(tmp_path: Path) -> None:
    plain = config('name: "m" backend: "python" input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]')
    assert warmup_requests(plain, tmp_path) == []
    configured = config(
        'name: "m" backend: "python" max_batch_size: 2 '
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ] '
        'model_warmup [ { name: "w" batch_size: 2 count: 3 inputs { key: "x" value: { data_type: TYPE_FP32 dims: [ 2 ] random_data: true } } } ]'
    )
    requests = warmup_requests(configured, tmp_path)
    assert len(requests) == 3
    assert requests[0].inputs["x"].shape == (2, 2)


def test_warmup_data_file(tmp_path: Path) -> None:
    (tmp_path / "warmup").mkdir()
    (tmp_path / "warmup" / "x.bin").write_bytes(np.arange(4, dtype=np.int32).tobytes())
    c = config('name: "m" backend: "python" input [ { name: "x" data_type: TYPE_INT32 dims: [ 4 ] } ] '
               'model_warmup [ { name: "f" inputs { key: "x" value: { data_type: TYPE_INT32 dims: [ 4 ] input_data_file: "x.bin" } } } ]')
    [request] = warmup_requests(c, tmp_path / "1")
    assert request.inputs["x"].tolist() == [0, 1, 2, 3]
    missing = config('name: "m" backend: "python" model_warmup [ { name: "f" inputs { key: "x" value: '
                     '{ data_type: TYPE_INT32 dims: [ 4 ] input_data_file: "nope.bin" } } } ]')
    with pytest.raises(ConfigError, match=r"warmup sample 'f' file .*nope\.bin not found"):
        warmup_requests(missing, tmp_path / "1")


def test_budget(tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"\x00" * 1000)
    budget = MemoryBudget(budget_bytes=5000, factor=2.0)
    need = budget.estimate(tmp_path)
    assert need == 2000
    assert budget.fits(need, in_use=3000)
    assert not budget.fits(need, in_use=3001)
    assert not budget.fits(need, in_use=0, available=1999)  # device memory bounds it too
    assert MemoryBudget().fits(10**12, in_use=10**12)  # no budget
    assert "needs 0.0 MiB" in describe(need, 3001, 5000)
