"""A test server that fails to start leaves nothing behind: `with` stops it and closes its log (a log left open
fails a later, unrelated test on its ResourceWarning); its three ports are distinct. A real child process."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import pytest

from tests.support.server_process import ServerProcess


class Exits(ServerProcess):
    """A "server" that exits at once with status 1."""

    label = "exits"

    def command(self) -> tuple[Sequence[str], Mapping[str, str]]:
        return [sys.executable, "-c", "import sys; sys.exit(1)"], {}


def test_a_server_that_failed_to_start_is_stopped_and_its_log_closed() -> None:
    server = Exits()
    assert len({server.grpc_port, server.http_port, server.metrics_port}) == 3
    with pytest.raises(RuntimeError, match="exits exited with 1"), server:
        pass
    assert server.proc is not None and server.proc.returncode == 1
    assert server._log.closed
