"""The GPU runtime image (`make images GPU=1`, docker/runtime.Dockerfile), run as Kubernetes runs it, without a GPU:
onnxruntime-gpu serves the example models on CPU, a KIND_GPU model falls back to CPU with a logged note, and the
image carries what its tag says (CUDAExecutionProvider; TensorRT only in a gpu-trt-<key> image).

Runs only where the image is already built for the current sources: it is several GB, so neither `make test` nor
ENSEMBLE_BUILD_TOOLS=1 builds it (skipped otherwise, naming the command).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from ensemble_examples.repository import build_repository

from tests.infra.images import DockerDaemon, ImageArtifact, ImageLocator
from tests.support.ports import free_port

from .serving import (
    VENV,
    assert_examples_answer_over_grpc,
    assert_http_add_sub,
    assert_uid_1000_on_a_read_only_root,
    runtime_args,
)
from .serving import serving as image_serving
from .support import POD_LIKE, wait_running


@pytest.fixture(scope="module")
def gpu_artifact() -> ImageArtifact:
    """The GPU runtime image built for these sources, with or without TensorRT; never built here."""
    for tensorrt in ("0", "1"):
        artifact = ImageLocator(build_on_demand=False, env={"TENSORRT": tensorrt}).describe("runtime-gpu")
        if artifact.tarball.is_file():
            return artifact
    pytest.skip(
        "the GPU runtime image is not built for these sources (`make images GPU=1`, several GB of wheels; "
        "`make test` does not build it)"
    )


def carries_tensorrt(artifact: ImageArtifact) -> bool:
    return artifact.tag.startswith("gpu-trt-")


@pytest.fixture(scope="module")
def gpu_image(gpu_artifact: ImageArtifact, request: pytest.FixtureRequest) -> str:
    """The GPU image's reference, loaded into the package's daemon (started only once the image is known built)."""
    daemon: DockerDaemon = request.getfixturevalue("docker_daemon")
    return daemon.load(gpu_artifact)


@pytest.fixture(scope="module")
def gpu_serving(docker_daemon: DockerDaemon, gpu_image: str) -> Iterator[tuple[str, int, int]]:
    """A GPU-image container serving every example model (no GPU: on CPU): (container, http port, grpc port)."""
    with image_serving(docker_daemon, gpu_image, timeout=300) as running:
        yield running


def test_serves_every_example_model_over_grpc_on_cpu(gpu_serving: tuple[str, int, int]) -> None:
    assert_examples_answer_over_grpc(gpu_serving[2])


def test_answers_an_http_inference(gpu_serving: tuple[str, int, int]) -> None:
    assert_http_add_sub(gpu_serving[1])


def test_runs_as_uid_1000_on_a_read_only_root(docker_daemon: DockerDaemon, gpu_serving: tuple[str, int, int]) -> None:
    assert_uid_1000_on_a_read_only_root(docker_daemon, gpu_serving[0])


def test_carries_onnxruntime_gpu_and_its_cuda_libraries(
    docker_daemon: DockerDaemon, gpu_serving: tuple[str, int, int], gpu_artifact: ImageArtifact
) -> None:
    container, _, _ = gpu_serving
    probe = (
        "import importlib.util, json, onnxruntime; "
        "from ensemble_runtime.backends.onnxruntime_backend import tensorrt_provider_error; "
        "print(json.dumps({'providers': onnxruntime.get_available_providers(), "
        "'tensorrt': importlib.util.find_spec('tensorrt') is not None, "
        "'trt_provider_error': tensorrt_provider_error(), "
        "'capi': onnxruntime.capi.__path__[0]}))"
    )
    found = json.loads(docker_daemon.docker("exec", container, f"{VENV}/bin/python", "-c", probe).stdout)
    print(found)
    assert "CUDAExecutionProvider" in found["providers"], found
    assert found["tensorrt"] == carries_tensorrt(gpu_artifact), found
    if not carries_tensorrt(gpu_artifact):
        # Listed by onnxruntime-gpu, but its library needs TensorRT's: the backend leaves it out, saying why.
        assert "TensorrtExecutionProvider" in found["providers"], found
        assert "libnvinfer.so" in found["trt_provider_error"], found
    packages = {
        p["name"].lower()
        for p in json.loads(
            docker_daemon.docker("exec", container, f"{VENV}/bin/pip", "list", "--format", "json").stdout
        )
    }
    assert "onnxruntime-gpu" in packages and "onnxruntime" not in packages, sorted(packages)
    assert {"nvidia-ml-py", "cuda-python"} <= packages, sorted(packages)
    assert "scikit-learn" not in packages  # trained the example models in the build stage only
    # The CUDA provider's libraries (cuBLAS, cuFFT, cuRAND, cudart, cuDNN from the nvidia-* wheels) resolve through
    # the image's ld.so.conf; only the driver's libcuda, which the NVIDIA container toolkit mounts, may be absent.
    ldd = docker_daemon.docker("exec", container, "ldd", f"{found['capi']}/libonnxruntime_providers_cuda.so").stdout
    missing = {line.split()[0] for line in ldd.splitlines() if "not found" in line}
    assert missing <= {"libcuda.so.1"}, ldd


@pytest.fixture
def kind_gpu_repository() -> Iterator[Path]:
    """add_sub with a KIND_GPU instance group, readable by the container's uid 1000."""
    root = Path(tempfile.mkdtemp(prefix="ensemble-gpu-image-"))
    try:
        build_repository(root, only=["add_sub"])
        config = root / "add_sub" / "config.pbtxt"
        config.write_text(config.read_text() + "instance_group [ { kind: KIND_GPU count: 1 } ]\n")
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_kind_gpu_model_runs_on_cpu_with_a_note(
    docker_daemon: DockerDaemon, gpu_image: str, kind_gpu_repository: Path
) -> None:
    http, grpc, metrics = free_port(), free_port(), free_port()
    args = [*runtime_args(http, grpc, metrics)]
    args[args.index("--model-repository") + 1] = "/models"
    options = [*POD_LIKE, "--volume", f"{kind_gpu_repository}:/models:ro"]
    container = docker_daemon.run_detached(gpu_image, args, options=options)
    try:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        wait_running(
            docker_daemon, container, lambda: client.is_model_ready("add_sub") or None, timeout=300, what="add_sub"
        )
        a = np.ones((1, 16), dtype=np.float32)
        inputs = [grpcclient.InferInput("INPUT0", [1, 16], "FP32"), grpcclient.InferInput("INPUT1", [1, 16], "FP32")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(a)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + a)
        client.close()
        logs = docker_daemon.logs(container)
        print(logs)
        assert "asks for KIND_GPU but this runtime sees no GPU" in logs, logs
        assert "running its 1 instance(s) on CPU" in logs, logs
    finally:
        docker_daemon.docker("rm", "--force", container, check=False)
