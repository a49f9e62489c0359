"""Hypothesis profiles and one real runtime per test module (not per example).

Profiles: `ci` (default; PROPERTY_EXAMPLES examples per property, 200 unless set) and `deep` (2,000), picked
by HYPOTHESIS_PROFILE. No example database: each run draws afresh; a failure prints the blob to replay it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, settings

from tests.integration.runtime import repo
from tests.property.invariant import MemoryWatch
from tests.support.runtime_process import RuntimeProcess

settings.register_profile(
    "ci",
    max_examples=int(os.environ.get("PROPERTY_EXAMPLES", "200")),
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],  # `memory`: one baseline per test, on purpose,
)
settings.register_profile("deep", parent=settings.get_profile("ci"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeProcess]:
    root: Path = repo.build(tmp_path_factory.mktemp("repo"))
    with RuntimeProcess([root], ["--strict-readiness=false"]) as proc:
        for model in ("add_sub", "py_add_sub", "types"):
            proc.wait_model_ready(model)
        yield proc


@pytest.fixture(scope="module")
def channel(server: RuntimeProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.grpc_url) as chan:
        yield chan


@pytest.fixture
def memory(server: RuntimeProcess) -> MemoryWatch:
    return MemoryWatch(server.pid)
