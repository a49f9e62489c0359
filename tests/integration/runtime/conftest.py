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
