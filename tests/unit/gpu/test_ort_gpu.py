"""ONNX Runtime on GPUs: provider choice and options, and the IO-binding run (on the CPU provider here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from ensemble_examples import onnx_models
from ensemble_runtime.backends.base import LoadContext
from ensemble_runtime.backends.onnxruntime_backend import OnnxRuntimeBackend, tensorrt_provider_error
from ensemble_runtime.backends.ort_gpu import (
    TRT_PROVIDER_LIBRARY,
    bindable,
    cuda_options,
    gpu_provider_list,
    io_binding_run,
    tensorrt_options,
    trt_cache_dir,
    wants_tensorrt,
)
from ensemble_runtime.config.model_config import ConfigError
from ensemble_runtime.gpu.devices import GpuInventory
from ensemble_runtime.inference import InferRequest, InferResponse
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ALL = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
TRT_ACCELERATOR = 'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" %s } ] } }'


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" {text}', mc.ModelConfig())


def test_backend_places_gpu_groups_and_logs_the_fallback(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A KIND_GPU group on a GPU this onnxruntime build cannot use: CPU provider, and a log line says so."""
    model = tmp_path / "m" / "1"
    model.mkdir(parents=True)
    onnx_models.save(onnx_models.add_sub(), model / "model.onnx")
    cfg = config('platform: "onnxruntime_onnx" max_batch_size: 8 instance_group [ { kind: KIND_GPU count: 2 gpus: [ 1 ] } ]')
    two_gpus = GpuInventory(physical=("0", "1"), detail="test: two GPUs")
    backend = OnnxRuntimeBackend(inventory=lambda: two_gpus)
    cfg = backend.prepare_config(cfg, model)

    async def caller(request: InferRequest) -> InferResponse:
        raise AssertionError("not called")

    async def run() -> int:
        instances = await backend.load(LoadContext(cfg, 1, model, model.parent, caller, tmp_path))
        for instance in instances:
            await instance.close()
        return len(instances)

    with caplog.at_level("WARNING"):
        assert asyncio.run(run()) == 2
    assert "asked for GPU 1 but TensorrtExecutionProvider" not in caplog.text
    assert "asked for GPU 1 but CUDAExecutionProvider is not available" in caplog.text
    assert "falling back to CPUExecutionProvider" in caplog.text


def test_backend_without_gpus_runs_gpu_groups_on_cpu(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tmp_path / "m" / "1"
    model.mkdir(parents=True)
    onnx_models.save(onnx_models.add_sub(), model / "model.onnx")
    none = GpuInventory(physical=(), detail="test: no GPU")
    backend = OnnxRuntimeBackend(inventory=lambda: none)
    cfg = backend.prepare_config(config('platform: "onnxruntime_onnx" instance_group [ { kind: KIND_GPU } ]'), model)

    async def caller(request: InferRequest) -> InferResponse:
        raise AssertionError("not called")

    async def run() -> None:
        for instance in await backend.load(LoadContext(cfg, 1, model, model.parent, caller, None)):
            await instance.close()

    with caplog.at_level("WARNING"):
        asyncio.run(run())
    assert "asks for KIND_GPU but this runtime sees no GPU (test: no GPU)" in caplog.text


def test_cuda_options() -> None:
    assert cuda_options(2) == {"device_id": 2, "arena_extend_strategy": "kSameAsRequested",
                               "cudnn_conv_algo_search": "HEURISTIC", "do_copy_in_default_stream": True}
    assert cuda_options(0, gpu_mem_limit=1 << 30)["gpu_mem_limit"] == 1 << 30


def test_tensorrt_options_follow_tritons_accelerator_parameters(tmp_path: Path) -> None:
    params = ('parameters { key: "precision_mode" value: "FP16" } '
              'parameters { key: "max_workspace_size_bytes" value: "1073741824" }')
    options = tensorrt_options(config(TRT_ACCELERATOR % params), 1, tmp_path, 3)
    cache = str(trt_cache_dir(tmp_path, "m", 3))
    assert cache == str(tmp_path / "ort-trt" / "m" / "3")
    assert options == {"device_id": 1, "trt_fp16_enable": True, "trt_int8_enable": False,
                       "trt_max_workspace_size": 1 << 30, "trt_engine_cache_enable": True,
                       "trt_engine_cache_path": cache, "trt_timing_cache_enable": True, "trt_timing_cache_path": cache}
    no_cache = tensorrt_options(config(TRT_ACCELERATOR % 'parameters { key: "trt_engine_cache_enable" value: "false" }'),
                                0, tmp_path, 1)
    assert "trt_engine_cache_path" not in no_cache
    with pytest.raises(ConfigError, match="precision_mode 'FP8' is not FP32, FP16 or INT8"):
        tensorrt_options(config(TRT_ACCELERATOR % 'parameters { key: "precision_mode" value: "fp8" }'), 0, None, 1)
    with pytest.raises(ConfigError, match="max_workspace_size_bytes 'lots' is not a byte count"):
        tensorrt_options(config(TRT_ACCELERATOR % 'parameters { key: "max_workspace_size_bytes" value: "lots" }'),
                         0, None, 1)


def test_gpu_provider_list_and_its_fallback_note(tmp_path: Path) -> None:
    with_trt = config(TRT_ACCELERATOR % "")
    providers, note = gpu_provider_list(with_trt, ALL, 0, tmp_path, 1)
    assert [p if isinstance(p, str) else p[0] for p in providers] == ALL and note == ""
    providers, note = gpu_provider_list(with_trt, ["CPUExecutionProvider"], 1, tmp_path, 1)
    assert providers == ["CPUExecutionProvider"]
    assert note == ("model 'm' asked for GPU 1 but TensorrtExecutionProvider, CUDAExecutionProvider is not available "
                    "in this onnxruntime build (install the gpu extra: onnxruntime-gpu); falling back to "
                    "CPUExecutionProvider")


def test_a_listed_but_unloadable_tensorrt_provider_is_left_out_with_a_note(tmp_path: Path) -> None:
    """onnxruntime-gpu without TensorRT lists TensorrtExecutionProvider: left to onnxruntime, its own retry would
    drop the CUDA options (the device among them); here it is left out and CUDA keeps device 1."""
    with_trt = config(TRT_ACCELERATOR % "")
    assert wants_tensorrt(with_trt) and not wants_tensorrt(config(""))
    why = "libnvinfer.so.10: cannot open shared object file: No such file or directory"
    providers, note = gpu_provider_list(with_trt, ALL, 1, tmp_path, 1, unloadable={"TensorrtExecutionProvider": why})
    assert providers == [("CUDAExecutionProvider", cuda_options(1)), "CPUExecutionProvider"]
    assert note == (f"model 'm' asked for GPU 1 but TensorrtExecutionProvider cannot load TensorRT ({why}; install the "
                    "tensorrt extra); falling back to CUDAExecutionProvider, CPUExecutionProvider")
    providers, note = gpu_provider_list(config(""), ALL, 1, tmp_path, 1, unloadable={"TensorrtExecutionProvider": why})
    assert providers == [("CUDAExecutionProvider", cuda_options(1)), "CPUExecutionProvider"] and note == ""


def test_tensorrt_provider_error_names_what_is_missing() -> None:
    """The CPU onnxruntime of the dev venv has no TensorRT provider library; onnxruntime-gpu without TensorRT has
    one that cannot load libnvinfer (the GPU image: tests/integration/images/test_gpu_runtime_image.py)."""
    library = Path(ort.__file__).parent / "capi" / TRT_PROVIDER_LIBRARY
    error = tensorrt_provider_error()
    if not library.is_file():
        assert error == f"{TRT_PROVIDER_LIBRARY} is not part of this onnxruntime build"
    elif error is not None:
        assert "libnvinfer" in error or "cannot open shared object file" in error


def test_io_binding_run_matches_session_run() -> None:
    session = ort.InferenceSession(onnx_models.add_sub().SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"INPUT0": np.random.rand(3, 16).astype(np.float32), "INPUT1": np.random.rand(3, 16).astype(np.float32)}
    bound = io_binding_run(session, feeds, ["OUTPUT0", "OUTPUT1"], device="cpu")
    plain = session.run(["OUTPUT0", "OUTPUT1"], feeds)
    np.testing.assert_array_equal(bound["OUTPUT0"], plain[0])
    np.testing.assert_array_equal(bound["OUTPUT1"], plain[1])
    assert bindable(feeds) and not bindable({"t": np.array([b"a"], dtype=np.object_)})
