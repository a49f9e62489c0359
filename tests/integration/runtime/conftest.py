from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.runtime import repo
from tests.support.runtime_process import RuntimeProcess


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repo.build(tmp_path_factory.mktemp("repo"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([repository], ["--strict-readiness=false"]) as proc:
        proc.wait_ready()  # the initial load has finished (broken models do not hold it back)
        proc.wait_model_ready("add_sub")
        proc.wait_model_ready("py_add_sub")
        yield proc


@pytest.fixture(scope="module")
def held_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where `py_held` marks an execution started (`started`) and waits for the test's release (`release`)."""
    return tmp_path_factory.mktemp("held")


@pytest.fixture(scope="module")
def held_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository of one model, `py_held` (X -> Y, FP32 [1]): each execution waits for the test's release; the
    runtime serving it needs HELD_MODEL_DIR set to `held_dir`."""
    root = tmp_path_factory.mktemp("held-repo")
    repo.held_model(root)
    return root
