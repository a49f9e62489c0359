from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.triton_peer import TritonPeer, not_installed_reason
from tests.integration.shm import repo
from tests.support.runtime_process import RuntimeProcess

_NO_TRITON = not_installed_reason()
# every test runs against our runtime and, where the peer is installed (tools/setup-triton.sh), the real Triton
SERVERS = ["ours", pytest.param("triton", marks=[pytest.mark.triton,
                                                 pytest.mark.skipif(_NO_TRITON is not None, reason=_NO_TRITON or "")])]


@pytest.fixture(scope="package")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repo.build(tmp_path_factory.mktemp("shm-repo"))


@pytest.fixture(scope="package")
def ours(repository: Path) -> Iterator[RuntimeProcess]:
    with RuntimeProcess([repository]) as proc:
        proc.wait_ready(timeout=120)
        yield proc


@pytest.fixture(scope="package")
def triton(repository: Path) -> Iterator[TritonPeer]:
    with TritonPeer([repository]) as proc:
        proc.wait_ready(timeout=120)
        yield proc


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> RuntimeProcess | TritonPeer:
    proc: RuntimeProcess | TritonPeer = request.getfixturevalue(request.param)
    return proc
