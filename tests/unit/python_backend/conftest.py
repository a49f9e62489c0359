"""Fixture models copied into a temporary repository, loaded with the real backend, closed afterwards."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from ensemble_runtime.backends.base import LoadContext, ModelCaller, ModelInstance
from ensemble_runtime.backends.python import PythonBackend
from ensemble_runtime.config.model_config import apply_defaults, read_config
from ensemble_runtime.errors import not_found
from ensemble_runtime.inference import BackendRequest, InferRequest, InferResponse
from tritonclient.grpc import model_config_pb2 as mc

MODELS = Path(__file__).parent / "models"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A model repository with every fixture model (each test gets fresh copies)."""
    for model in MODELS.iterdir():
        if model.is_dir():
            shutil.copytree(model, tmp_path / model.name, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def config_of(repo: Path, name: str) -> mc.ModelConfig:
    config = read_config(repo / name)
    assert config is not None
    return PythonBackend().prepare_config(apply_defaults(config, name), repo / name / "1")


async def _unreachable(request: InferRequest) -> InferResponse:
    raise not_found(f"no model '{request.model_name}' in this test")


class Harness:
    """Loads fixture models with the real backend; closes every instance it loaded."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._loaded: list[ModelInstance] = []

    async def load(self, name: str, caller: ModelCaller = _unreachable) -> list[ModelInstance]:
        context = LoadContext(
            config=config_of(self.repo, name),
            version=1,
            version_path=self.repo / name / "1",
            model_path=self.repo / name,
            caller=caller,
        )
        instances = await PythonBackend().load(context)
        self._loaded.extend(instances)
        return instances

    async def close(self) -> None:
        for instance in self._loaded:
            await instance.close()


Run = Callable[[Callable[[Harness], Awaitable[None]]], None]


@pytest.fixture
def run(repo: Path) -> Run:
    """`run(body)`: `await body(harness)` on a fresh event loop, then close what it loaded."""

    def _run(body: Callable[[Harness], Awaitable[None]]) -> None:
        async def main() -> None:
            harness = Harness(repo)
            try:
                await body(harness)
            finally:
                await harness.close()

        asyncio.run(main())

    return _run


def in_process_caller(models: dict[str, ModelInstance]) -> ModelCaller:
    """The seam a server provides: run the named model's instance in process."""

    async def call(request: InferRequest) -> InferResponse:
        instance = models.get(request.model_name)
        if instance is None:
            raise not_found(f"model '{request.model_name}' is not loaded")
        backend_request = BackendRequest(
            inputs=request.inputs,
            requested_outputs=tuple(request.requested_outputs),
            parameters=request.parameters,
            request_id=request.id,
        )
        (result,) = await instance.execute([backend_request])
        if isinstance(result, BaseException):
            raise result
        return InferResponse(request.model_name, request.model_version or "1", result, request.id)

    return call
