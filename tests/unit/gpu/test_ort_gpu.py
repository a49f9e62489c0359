"""ONNX Runtime on GPUs: provider choice and options, and the IO-binding run (on the CPU provider here)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from ensemble_examples import onnx_models
from ensemble_runtime.backends.ort_gpu import (
    bindable,
    cuda_options,
    gpu_provider_list,
    io_binding_run,
    tensorrt_options,
    trt_cache_dir,
)
from ensemble_runtime.backends.providers import choose_providers
from ensemble_runtime.config.model_config import ConfigError
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

ALL = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
TRT_ACCELERATOR = 'optimization { execution_accelerators { gpu_execution_accelerator [ { name: "tensorrt" %s } ] } }'


def config(text: str) -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" {text}', mc.ModelConfig())


def test_choose_providers_cpu_gpu_and_tensorrt(tmp_path: Path) -> None:
    assert choose_providers(config("instance_group [ { kind: KIND_CPU } ]"), ALL, None).providers == [
        "CPUExecutionProvider"]
    gpu = choose_providers(config("instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]"), ALL, None)
    assert gpu.providers == [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"] and not gpu.note
    trt = choose_providers(config("instance_group [ { kind: KIND_GPU } ] " + TRT_ACCELERATOR % ""), ALL, tmp_path)
    assert trt.providers[0] == ("TensorrtExecutionProvider", {
        "device_id": 0, "trt_engine_cache_enable": True, "trt_engine_cache_path": str(tmp_path / "trt")})


def test_choose_providers_falls_back_with_a_note() -> None:
    choice = choose_providers(config("instance_group [ { kind: KIND_GPU } ] " + TRT_ACCELERATOR % ""),
                              ["CPUExecutionProvider"], None)
    assert choice.providers == ["CPUExecutionProvider"]
    assert choice.note == ("asked for a GPU instance group (device 0) but TensorrtExecutionProvider, "
                           "CUDAExecutionProvider is not available in this onnxruntime build; falling back to "
                           "CPUExecutionProvider")


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


def test_io_binding_run_matches_session_run() -> None:
    session = ort.InferenceSession(onnx_models.add_sub().SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"INPUT0": np.random.rand(3, 16).astype(np.float32), "INPUT1": np.random.rand(3, 16).astype(np.float32)}
    bound = io_binding_run(session, feeds, ["OUTPUT0", "OUTPUT1"], device="cpu")
    plain = session.run(["OUTPUT0", "OUTPUT1"], feeds)
    np.testing.assert_array_equal(bound["OUTPUT0"], plain[0])
    np.testing.assert_array_equal(bound["OUTPUT1"], plain[1])
    assert bindable(feeds) and not bindable({"t": np.array([b"a"], dtype=np.object_)})
