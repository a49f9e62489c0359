"""ModelManager holds an ensemble's serving members back while one of its models has a version still uploading.

Real ONNX Runtime models in a local repository; the storage's "still uploading" report is the seam
(`ModelManager.uploading`), given here as a plain mapping. The end-to-end form (MinIO, poll mode, under load)
is tests/integration/rollover/test_upload_in_flight.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping
from pathlib import Path

import pytest
from ensemble_examples import onnx_models
from ensemble_runtime.backends.onnxruntime_backend import OnnxRuntimeBackend
from ensemble_runtime.errors import InferenceError
from ensemble_runtime.inference import InferRequest, InferResponse
from ensemble_runtime.model_manager import ModelManager
from ensemble_runtime.registry import Registry
from ensemble_runtime.version_loader import VersionLoader

from tests.integration.rollover.support import ENSEMBLE, STEPS, ensemble_config, step_config


def add_version(repo: Path, step: str, version: int) -> None:
    folder = repo / step / str(version)
    folder.mkdir(parents=True)
    onnx_models.save(onnx_models.versioned(version), folder / "model.onnx")


def build_repo(repo: Path) -> None:
    """The `pipe` ensemble: step_a and step_b (latest 1) side by side, each at version 1."""
    for step in STEPS:
        (repo / step).mkdir(parents=True)
        (repo / step / "config.pbtxt").write_text(step_config(step))
        add_version(repo, step, 1)
    (repo / ENSEMBLE).mkdir()
    (repo / ENSEMBLE / "config.pbtxt").write_text(ensemble_config())


async def no_calls(request: InferRequest) -> InferResponse:
    raise AssertionError("no model is called")


class Uploads:
    """What storage reports as still uploading; the test changes it between loads."""

    def __init__(self) -> None:
        self.now: dict[str, list[int]] = {}

    def __call__(self) -> Mapping[str, Collection[int]]:
        return self.now


def manager_for(repo: Path, uploads: Uploads) -> ModelManager:
    async def before_load(names: Collection[str]) -> None:  # a local repository needs no sync
        return None

    loader = VersionLoader(backends={"onnxruntime": OnnxRuntimeBackend()}, caller=no_calls)
    return ModelManager(roots=[repo], registry=Registry(), loader=loader, before_load=before_load, uploading=uploads)


def served(manager: ModelManager) -> dict[str, tuple[int, ...]]:
    return {name: manager.registry.records[name].served for name in STEPS}


async def unload_all(manager: ModelManager) -> None:
    for name in [*STEPS, ENSEMBLE]:
        await manager.unload(name)
    await manager.registry.wait_retired()


@pytest.mark.parametrize("explicit", [False, True], ids=["poll", "explicit-load"])
def test_members_wait_for_a_sibling_upload(tmp_path: Path, explicit: bool) -> None:
    build_repo(tmp_path)
    uploads = Uploads()

    async def scenario() -> None:
        manager = manager_for(tmp_path, uploads)
        await manager.load([ENSEMBLE])
        assert served(manager) == {"step_a": (1,), "step_b": (1,)}

        add_version(tmp_path, "step_a", 2)  # complete; step_b's version 2 is still on its way
        uploads.now = {"step_b": [2]}
        if explicit:
            with pytest.raises(InferenceError) as caught:
                await manager.load(["step_a"])
            message = caught.value.message
            assert "'step_b' version(s) [2] still uploading" in message and "step_a" in message, message
        else:
            await manager.load(["step_a"], fetch=False)  # a poll: held quietly, retried at the next one
        assert served(manager) == {"step_a": (1,), "step_b": (1,)}
        assert manager.registry.records["step_a"].reason == ""  # waiting is not a failure

        add_version(tmp_path, "step_b", 2)
        uploads.now = {}
        await manager.load(["step_a", "step_b"], fetch=explicit)
        assert served(manager) == {"step_a": (2,), "step_b": (2,)}
        await unload_all(manager)

    asyncio.run(scenario())


def test_an_upload_outside_the_ensemble_holds_nothing(tmp_path: Path) -> None:
    build_repo(tmp_path)
    uploads = Uploads()

    async def scenario() -> None:
        manager = manager_for(tmp_path, uploads)
        await manager.load([ENSEMBLE])
        add_version(tmp_path, "step_a", 2)
        add_version(tmp_path, "step_b", 2)
        uploads.now = {"unrelated": [7]}
        await manager.load(["step_a", "step_b"], fetch=False)
        assert served(manager) == {"step_a": (2,), "step_b": (2,)}
        await unload_all(manager)

    asyncio.run(scenario())
