from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.triton_examples.support import SERVERS, TRITON_MISSING
from tests.support.server_process import ServerProcess


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """The module's server of this run (ours, or the real Triton); afterwards it must still be live."""
    servers: dict[str, ServerProcess] = request.getfixturevalue("servers")
    if request.param not in servers:
        pytest.skip(f"the real Triton peer is not installed: {TRITON_MISSING}")
    chosen = servers[request.param]
    yield chosen
    with chosen.grpc_client() as client:
        assert client.is_server_live(), f"{chosen.label} is no longer live"
