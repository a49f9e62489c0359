"""The TensorRT backend: a clean refusal without tensorrt, and the whole load/execute path against fakes."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from ensemble_runtime.backends.base import LoadContext
from ensemble_runtime.backends.tensorrt_backend import TRT_MISSING, TensorRTBackend, TensorRTInstance
from ensemble_runtime.config.model_config import ConfigError, apply_defaults
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.gpu.cuda import CudaError, CudaRuntime
from ensemble_runtime.gpu.devices import GpuInventory
from ensemble_runtime.inference import BackendRequest, InferRequest, InferResponse
from ensemble_runtime.registry import VersionState
from ensemble_runtime.version_loader import VersionLoader
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.unit.gpu.fakes import PLAN, FakeCudart, FakeTrt

IO = ('input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "k" data_type: TYPE_INT64 dims: [ 1 ] } ] '
      'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "pos" data_type: TYPE_BOOL dims: [ 4 ] } ]')
TRT_INSTALLED = importlib.util.find_spec("tensorrt") is not None


async def no_calls(request: InferRequest) -> InferResponse:
    raise AssertionError("the TensorRT backend never calls other models")


def repository(tmp_path: Path, text: str, plan: bytes = PLAN) -> tuple[mc.ModelConfig, LoadContext]:
    config = apply_defaults(text_format.Parse(f'platform: "tensorrt_plan" {text}', mc.ModelConfig()), "m")
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    (version / "model.plan").write_bytes(plan)
    return config, LoadContext(config, 1, version, tmp_path / "m", no_calls)


@pytest.mark.skipif(TRT_INSTALLED, reason="tensorrt is installed here")
def test_load_without_tensorrt_fails_with_the_reason(tmp_path: Path) -> None:
    config, context = repository(tmp_path, f'max_batch_size: 4 {IO} instance_group [ {{ kind: KIND_GPU }} ]')
    backend = TensorRTBackend()
    assert backend.prepare_config(config, context.version_path) is config
    with pytest.raises(ConfigError) as caught:
        asyncio.run(backend.load(context))
    assert str(caught.value) == f"model 'm' version 1: {TRT_MISSING}"
    assert TRT_MISSING.startswith("the tensorrt package is not installed in this runtime image; install the tensorrt extra")


@pytest.mark.skipif(TRT_INSTALLED, reason="tensorrt is installed here")
def test_version_loader_marks_the_version_unavailable(tmp_path: Path) -> None:
    config, context = repository(tmp_path, "max_batch_size: 4")  # no IO: autocomplete is impossible without tensorrt
    backend = TensorRTBackend()
    loader = VersionLoader(backends={"tensorrt": backend}, caller=no_calls)
    loaded = asyncio.run(loader.load("m", config, 1, context.version_path, context.model_path, backend))
    assert loaded.state == VersionState.UNAVAILABLE
    assert loaded.reason == f"model 'm' version 1: {TRT_MISSING}"


def test_missing_plan_file_is_a_config_error(tmp_path: Path) -> None:
    config, context = repository(tmp_path, IO)
    (context.version_path / "model.plan").unlink()
    with pytest.raises(ConfigError, match=r"plan file 'model.plan' not found"):
        TensorRTBackend().prepare_config(config, context.version_path)


def fake_backend(cudart: FakeCudart, trt: FakeTrt, gpus: int = 2) -> TensorRTBackend:
    inventory = GpuInventory(tuple(str(i) for i in range(gpus)), f"{gpus} fake GPU(s)")
    return TensorRTBackend(inventory=lambda: inventory, modules=lambda: (trt, CudaRuntime(cudart)))


def request(values: list[list[float]], k: list[int]) -> BackendRequest:
    return BackendRequest({"x": np.array(values, np.float32), "k": np.array(k, np.int64).reshape(-1, 1)}, ("y", "pos"))


def test_prepare_config_autocompletes_from_the_engine(tmp_path: Path) -> None:
    cudart = FakeCudart()
    config, context = repository(tmp_path, "")
    completed = fake_backend(cudart, FakeTrt(cudart)).prepare_config(config, context.version_path)
    assert completed.max_batch_size == 4
    assert [t.name for t in completed.input] == ["x", "k"] and [t.name for t in completed.output] == ["y", "pos"]


def test_contexts_per_gpu_profiles_and_execution(tmp_path: Path) -> None:
    cudart = FakeCudart()
    trt = FakeTrt(cudart)
    _, context = repository(tmp_path, f"max_batch_size: 4 {IO} "
                                           "instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]")

    async def run() -> None:
        instances = await fake_backend(cudart, trt).load(context)
        assert len(instances) == 4 and all(isinstance(i, TensorRTInstance) for i in instances)
        assert [(c.device, c.profile) for e in trt.engines for c in e.contexts] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        [single] = await instances[0].execute([request([[1, -2, 3, 0]], [2])])
        assert not isinstance(single, BaseException)
        assert single["y"].tolist() == [[2, -4, 6, 0]] and single["pos"].tolist() == [[True, False, True, False]]
        assert single["y"].dtype == np.float32 and single["pos"].dtype == np.bool_
        merged = await instances[3].execute([request([[1, 1, 1, 1]], [3]), request([[1, 2, 3, 4], [-1, 0, 0, 0]], [1, 5])])
        assert [r["y"].tolist() for r in merged if not isinstance(r, BaseException)] == [
            [[3, 3, 3, 3]], [[1, 2, 3, 4], [-5, 0, 0, 0]]]
        assert trt.engines[1].contexts[1].runs == 1  # one merged run
        [too_big] = await instances[1].execute([request([[0, 0, 0, 0]] * 5, [1] * 5)])
        assert isinstance(too_big, InferenceError) and too_big.code == ErrorCode.INVALID_ARGUMENT
        assert "outside optimization profile 1" in too_big.message
        for instance in instances:
            await instance.close()
        assert cudart.live == {} and cudart.streams == 0

    asyncio.run(run())


def test_refusals_name_the_problem(tmp_path: Path) -> None:
    cudart = FakeCudart()
    config, context = repository(tmp_path, f"max_batch_size: 8 {IO} instance_group [ {{ kind: KIND_GPU count: 2 }} ]")
    with pytest.raises(ConfigError, match=r"max_batch_size 8 exceeds the largest batch of optimization profile\(s\) 0, 1"):
        asyncio.run(fake_backend(cudart, FakeTrt(cudart), gpus=1).load(context))
    assert cudart.live == {} and cudart.streams == 0

    with pytest.raises(ConfigError, match="lists GPU 1, which this runtime cannot see"):
        asyncio.run(fake_backend(cudart, FakeTrt(cudart), gpus=1).load(
            LoadContext(_with_groups(config, "{ kind: KIND_GPU gpus: [ 1 ] }", 4), 1, context.version_path,
                        context.model_path, no_calls)))
    with pytest.raises(ConfigError, match=r"sees no GPU .*the tensorrt backend needs one"):
        asyncio.run(fake_backend(cudart, FakeTrt(cudart), gpus=0).load(
            LoadContext(_with_groups(config, "{ kind: KIND_GPU }", 4), 1, context.version_path, context.model_path,
                        no_calls)))


def test_a_plan_from_another_tensorrt_is_refused(tmp_path: Path) -> None:
    cudart = FakeCudart()
    _, context = repository(tmp_path, f"max_batch_size: 4 {IO} instance_group [ {{ kind: KIND_GPU }} ]", plan=b"old")
    with pytest.raises(ConfigError, match=r"cannot deserialize the plan.*TensorRT 10.fake.*rebuild it with "
                                          r"ensemble-build-plan"):
        asyncio.run(fake_backend(cudart, FakeTrt(cudart), gpus=1).load(context))


def test_cuda_errors_name_the_call() -> None:
    cuda = CudaRuntime(FakeCudart(malloc_limit=16))
    with pytest.raises(CudaError, match=r"cudaMalloc\(1024\) failed: out of memory \(cudaError 2\)"):
        cuda.call("cudaMalloc(1024)", cuda.rt.cudaMalloc(1024))
    assert cuda.device_count() == 2
    with pytest.raises(CudaError, match="no CUDA-capable device"):
        CudaRuntime(FakeCudart(devices=0)).device_count()


def _with_groups(config: mc.ModelConfig, groups: str, max_batch: int) -> mc.ModelConfig:
    out = mc.ModelConfig()
    out.CopyFrom(config)
    out.max_batch_size = max_batch
    del out.instance_group[:]
    text_format.Parse(f"instance_group [ {groups} ]", out)
    return out
