from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.ensembles import repo
from tests.support.runtime_process import RuntimeProcess


@pytest.fixture(scope="package")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repo.build(tmp_path_factory.mktemp("ensembles"))


@pytest.fixture(scope="package")
def server(repository: Path) -> Iterator[RuntimeProcess]:
    """Every model loaded at startup (broken ensembles included); explicit mode so tests may unload/load."""
    args = ["--model-control-mode=explicit", "--load-model=*", "--strict-readiness=false"]
    with RuntimeProcess([repository], args) as proc:
        proc.wait_ready()
        for name in repo.GOOD_ENSEMBLES:
            proc.wait_model_ready(name)
        yield proc
