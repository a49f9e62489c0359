"""On a real GPU: build a plan with ensemble-build-plan's code, load it, run it; NVML memory; ORT IO binding."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ensemble_examples import onnx_models
from ensemble_runtime.backends.base import LoadContext
from ensemble_runtime.backends.ort_gpu import cuda_options, io_binding_run
from ensemble_runtime.backends.tensorrt_backend import TensorRTBackend
from ensemble_runtime.config.model_config import apply_defaults
from ensemble_runtime.errors import ErrorCode, InferenceError
from ensemble_runtime.gpu.cuda import CudaRuntime
from ensemble_runtime.gpu.memory import make_device_free
from ensemble_runtime.inference import BackendRequest, InferRequest, InferResponse
from ensemble_runtime.registry import VersionState
from ensemble_runtime.tools.build_plan import build, parse_args
from ensemble_runtime.version_loader import VersionLoader
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

pytestmark = pytest.mark.gpu


async def no_calls(request: InferRequest) -> InferResponse:
    raise AssertionError("not called")


def plan_repository(tmp_path: Path, trt: Any, config_text: str, *flags: str) -> tuple[mc.ModelConfig, Path]:
    onnx_path = tmp_path / "add_sub.onnx"
    onnx_models.save(onnx_models.add_sub(), onnx_path)
    version = tmp_path / "repo" / "add_sub" / "1"
    version.mkdir(parents=True)
    options = parse_args([str(onnx_path), "-o", str(version / "model.plan"),
                          "--min-shapes", "INPUT0:1x16,INPUT1:1x16", "--opt-shapes", "INPUT0:8x16,INPUT1:8x16",
                          "--max-shapes", "INPUT0:64x16,INPUT1:64x16", *flags])
    options.output.write_bytes(build(options, trt))
    config = apply_defaults(text_format.Parse(f'platform: "tensorrt_plan" {config_text}', mc.ModelConfig()), "add_sub")
    return config, version


def feeds(batch: int) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(batch)
    return {"INPUT0": rng.random((batch, 16), np.float32), "INPUT1": rng.random((batch, 16), np.float32)}


def test_plan_builds_autocompletes_and_runs_on_two_contexts(tmp_path: Path, trt: Any) -> None:
    config, version = plan_repository(tmp_path, trt, "instance_group [ { kind: KIND_GPU count: 2 } ]", "--profiles", "2")
    backend = TensorRTBackend()
    prepared = backend.prepare_config(config, version)
    assert prepared.max_batch_size == 64 and [t.name for t in prepared.input] == ["INPUT0", "INPUT1"]

    async def run() -> None:
        instances = await backend.load(LoadContext(prepared, 1, version, version.parent, no_calls))
        try:
            for instance, batch in zip(instances, (1, 64), strict=False):
                data = feeds(batch)
                [out] = await instance.execute([BackendRequest(data, ("OUTPUT0", "OUTPUT1"))])
                assert not isinstance(out, BaseException), out
                np.testing.assert_allclose(out["OUTPUT0"], data["INPUT0"] + data["INPUT1"], rtol=1e-6)
                np.testing.assert_allclose(out["OUTPUT1"], data["INPUT0"] - data["INPUT1"], rtol=1e-6)
            merged = await instances[0].execute([BackendRequest(feeds(3), ()), BackendRequest(feeds(5), ())])
            assert [r["OUTPUT0"].shape for r in merged if not isinstance(r, BaseException)] == [(3, 16), (5, 16)]
            [too_big] = await instances[1].execute([BackendRequest(feeds(65), ())])
            assert isinstance(too_big, InferenceError) and too_big.code == ErrorCode.INVALID_ARGUMENT
        finally:
            for instance in instances:
                await instance.close()

    asyncio.run(run())


def test_fp16_plan_through_the_version_loader_with_warm_up(tmp_path: Path, trt: Any) -> None:
    config, version = plan_repository(tmp_path, trt, "max_batch_size: 32 instance_group [ { kind: KIND_GPU } ]", "--fp16")
    backend = TensorRTBackend()
    loader = VersionLoader(backends={"tensorrt": backend}, caller=no_calls,
                           device_free=make_device_free(os.environ))

    async def run() -> None:
        loaded = await loader.load("add_sub", config, 1, version, version.parent, backend)
        assert loaded.state == VersionState.READY, loaded.reason
        assert loaded.scheduler is not None
        data = feeds(4)
        out = await loaded.scheduler.submit(BackendRequest(data, ("OUTPUT0",)))
        np.testing.assert_allclose(out["OUTPUT0"], data["INPUT0"] + data["INPUT1"], rtol=1e-2, atol=1e-2)
        await loaded.scheduler.close()

    asyncio.run(run())


def test_max_batch_size_over_the_profile_is_refused(tmp_path: Path, trt: Any) -> None:
    config, version = plan_repository(tmp_path, trt, "max_batch_size: 128 instance_group [ { kind: KIND_GPU } ]")
    backend = TensorRTBackend()
    prepared = backend.prepare_config(config, version)
    with pytest.raises(Exception, match="max_batch_size 128 exceeds the largest batch"):
        asyncio.run(backend.load(LoadContext(prepared, 1, version, version.parent, no_calls)))


def test_nvml_reports_free_memory(cuda: CudaRuntime) -> None:
    pytest.importorskip("pynvml")
    free = make_device_free(os.environ)()
    assert free is not None and free > 0
    cuda_free, _ = cuda.mem_get_info()
    assert abs(free - cuda_free) < 2 << 30  # NVML and CUDA agree within the context's own footprint


def test_ort_cuda_io_binding_matches_numpy(ort_cuda: Any) -> None:
    session = ort_cuda.InferenceSession(onnx_models.add_sub().SerializeToString(),
                                        providers=[("CUDAExecutionProvider", cuda_options(0)), "CPUExecutionProvider"])
    assert session.get_providers()[0] == "CUDAExecutionProvider"
    data = feeds(64)
    out = io_binding_run(session, data, ["OUTPUT0", "OUTPUT1"], device="cuda", device_id=0)
    np.testing.assert_allclose(out["OUTPUT0"], data["INPUT0"] + data["INPUT1"], rtol=1e-6)
